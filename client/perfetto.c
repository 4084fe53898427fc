/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <traceevent/event-parse.h>
#include <unistd.h>

#include "core/decode.h"
#include "core/page.h"
#include "flatjson.h"
#include "perfetto.h"
#include "proctree.h"
#include "protobuf.h"
#include "util.h"

/* A CPU's bundle is written out at this size (a packet of Perfetto's own traces is a page or two). */
#define BUNDLE_FLUSH_SIZE (64U * 1024U)
#define CPU_MAX 65536U

/* Field numbers: protos/perfetto/trace/trace.proto, trace_packet.proto and the messages named. */
enum {
        TRACE_PACKET = 1,
        PACKET_FTRACE_EVENTS = 1,
        PACKET_PROCESS_TREE = 2,
        PACKET_CLOCK_SNAPSHOT = 6,
        PACKET_TIMESTAMP = 8,
        PACKET_SEQUENCE_ID = 10, /* trusted_packet_sequence_id */
        PACKET_FTRACE_STATS = 34,
        PACKET_SYSTEM_INFO = 45,
        BUNDLE_CPU = 1,
        BUNDLE_EVENT = 2,
        EVENT_TIMESTAMP = 1,
        EVENT_PID = 2,
        EVENT_GENERIC = 327,
        GENERIC_EVENT_NAME = 1,
        GENERIC_FIELD = 2,
        GENERIC_FIELD_NAME = 1,
        GENERIC_STR = 3,
        GENERIC_INT = 4,
        GENERIC_UINT = 5,
        SYSTEM_INFO_UTSNAME = 1,
        UTSNAME_SYSNAME = 1,
        UTSNAME_VERSION = 2,
        UTSNAME_RELEASE = 3,
        UTSNAME_MACHINE = 4,
        TREE_PROCESSES = 1,
        TREE_THREADS = 2,
        PROCESS_PID = 1,
        PROCESS_PPID = 2,
        PROCESS_CMDLINE = 3,
        PROCESS_CMDLINE_IS_COMM = 9,
        THREAD_TID = 1,
        THREAD_NAME = 2,
        THREAD_TGID = 3,
        SNAPSHOT_CLOCKS = 1,
        SNAPSHOT_PRIMARY_CLOCK = 2,
        CLOCK_ID = 1,
        CLOCK_TIMESTAMP = 2,
        STATS_PHASE = 1,
        STATS_CPU_STATS = 2,
        CPU_STATS_CPU = 1,
        CPU_STATS_OVERRUN = 3,
};

/* ClockSnapshot.Clock.BuiltinClocks and FtraceStats.Phase. */
enum { BUILTIN_REALTIME = 1, BUILTIN_BOOTTIME = 6 };
enum { PHASE_START_OF_TRACE = 1, PHASE_END_OF_TRACE = 2 };

/* Every packet is on one sequence: tpctl is one writer. */
#define SEQUENCE_ID 1

typedef enum { TYPE_INT, TYPE_UINT, TYPE_STR } FieldType;

typedef struct TypedField {
        const char *name;
        uint32_t number;
        FieldType type;
} TypedField;

/* The events Perfetto has a message of its own for, with the fields it knows (ftrace_event.proto,
 * ftrace/sched.proto, ftrace/task.proto, ftrace/ftrace.proto); their other fields are dropped. */
typedef struct TypedEvent {
        const char *name;
        uint32_t number; /* in FtraceEvent */
        TypedField fields[8];
} TypedEvent;

#define WAKEUP_FIELDS                                                                     \
        {                                                                                 \
                { "comm", 1, TYPE_STR }, { "pid", 2, TYPE_INT }, { "prio", 3, TYPE_INT }, \
                        { "success", 4, TYPE_INT }, { "target_cpu", 5, TYPE_INT },        \
        }

static const TypedEvent typed_events[] = {
        { "ftrace:print", 3, { { "ip", 1, TYPE_UINT }, { "buf", 2, TYPE_STR } } },
        { "sched:sched_switch",
          4,
          { { "prev_comm", 1, TYPE_STR },
            { "prev_pid", 2, TYPE_INT },
            { "prev_prio", 3, TYPE_INT },
            { "prev_state", 4, TYPE_INT },
            { "next_comm", 5, TYPE_STR },
            { "next_pid", 6, TYPE_INT },
            { "next_prio", 7, TYPE_INT } } },
        { "sched:sched_wakeup", 17, WAKEUP_FIELDS },
        { "sched:sched_waking", 20, WAKEUP_FIELDS },
        { "sched:sched_wakeup_new", 114, WAKEUP_FIELDS },
        { "task:task_newtask",
          235,
          { { "pid", 1, TYPE_INT },
            { "comm", 2, TYPE_STR },
            { "clone_flags", 3, TYPE_UINT },
            { "oom_score_adj", 4, TYPE_INT } } },
        { "task:task_rename",
          236,
          { { "pid", 1, TYPE_INT },
            { "oldcomm", 2, TYPE_STR },
            { "newcomm", 3, TYPE_STR },
            { "oom_score_adj", 4, TYPE_INT } } },
        { "sched:sched_process_exit",
          238,
          { { "comm", 1, TYPE_STR },
            { "pid", 2, TYPE_INT },
            { "tgid", 3, TYPE_INT },
            { "prio", 4, TYPE_INT } } },
        { "sched:sched_process_fork",
          239,
          { { "parent_comm", 1, TYPE_STR },
            { "parent_pid", 2, TYPE_INT },
            { "child_comm", 3, TYPE_STR },
            { "child_pid", 4, TYPE_INT } } },
        { "sched:sched_process_free",
          240,
          { { "comm", 1, TYPE_STR }, { "pid", 2, TYPE_INT }, { "prio", 3, TYPE_INT } } },
};

/* The pairs of fields of the typed events that name a task, for the process tree. */
static const char *const task_names[][2] = {
        { "prev_pid", "prev_comm" },     { "next_pid", "next_comm" },   { "pid", "comm" },
        { "parent_pid", "parent_comm" }, { "child_pid", "child_comm" }, { "pid", "newcomm" },
};

typedef struct Bundle {
        Pb pb;
        size_t packet, bundle; /* where their lengths go, while open */
        bool open, seen;
        uint64_t lost;
} Bundle;

typedef struct Task {
        int64_t pid, ppid; /* ppid -1: unknown */
        char *comm;
        bool used;
        bool started; /* in the process tree of the start (/proc's) */
} Task;

/* How the records of one event are written from their raw bytes, made at its first record. */
typedef struct RawEvent {
        const EventPlan *plan; /* NULL: no usable format; its records are lost */
        const TypedEvent *typed;
        bool skip; /* ftrace:kernel_stack, which a line carries as its record's "stack": left out */
        int16_t typed_fields[8]; /* the plan's index of each of typed's fields, -1: not in the format */
        int16_t names[ELEMENTSOF(task_names)][2]; /* pid and name fields naming a task, -1: none */
        int16_t fork_parent, fork_child;          /* sched_process_fork's pids, -1 otherwise */
        /* A generic event's constant part: its event_name field, then each field's name field;
         * field i's at keys.data + key_at[i]. */
        Pb keys;
        uint32_t *key_at;
} RawEvent;

struct PerfettoWriter {
        int fd;
        FlatRecord flat; /* the line being written */
        /* Record's frames: the formats tpd sent, the decoder's plans of them, and each event's
         * way of writing (by id). */
        struct tep_handle *tep;
        Decoder *decoder;
        RawEvent **raw;
        size_t n_raw;
        JsonBuf text; /* an array field's text */
        Pb pb;        /* a packet other than a bundle */
        Bundle *cpus;
        size_t n_cpus;
        Task *tasks; /* open addressing, by pid */
        size_t n_tasks, tasks_size;
        uint64_t first_ts, last_ts;
        bool any_ts;
};

static int writer_write(PerfettoWriter *w, Pb *pb) {
        int r;

        if (pb->error < 0)
                return pb->error;
        r = write_all(w->fd, pb->data, pb->len);
        pb_reset(pb);
        return r;
}

static size_t packet_begin(Pb *pb, uint64_t ts) {
        size_t at = pb_begin_long(pb, TRACE_PACKET);

        if (ts > 0)
                pb_uint(pb, PACKET_TIMESTAMP, ts);
        pb_uint(pb, PACKET_SEQUENCE_ID, SEQUENCE_ID);
        return at;
}

static Task *task_get(PerfettoWriter *w, int64_t pid) {
        size_t i;

        if (w->n_tasks * 2 >= w->tasks_size) {
                size_t size = w->tasks_size > 0 ? w->tasks_size * 2 : 1024;
                Task *t = calloc(size, sizeof(Task));

                if (!t)
                        return NULL;
                for (size_t k = 0; k < w->tasks_size; k++) {
                        if (!w->tasks[k].used)
                                continue;
                        for (i = (size_t) w->tasks[k].pid % size; t[i].used; i = (i + 1) % size)
                                ;
                        t[i] = w->tasks[k];
                }
                free(w->tasks);
                w->tasks = t;
                w->tasks_size = size;
        }
        for (i = (uint64_t) pid % w->tasks_size; w->tasks[i].used; i = (i + 1) % w->tasks_size)
                if (w->tasks[i].pid == pid)
                        return &w->tasks[i];
        w->tasks[i] = (Task){ .pid = pid, .ppid = -1, .used = true };
        w->n_tasks++;
        return &w->tasks[i];
}

/* Names task pid by comm (len bytes, no NUL among them); a NULL comm only makes it known. */
static int task_name_n(PerfettoWriter *w, int64_t pid, const char *comm, size_t len) {
        Task *t;
        char *s;

        if (pid < 0 || pid > INT32_MAX)
                return 0;
        t = task_get(w, pid);
        if (!t)
                return -ENOMEM;
        if (!comm || (t->comm && strncmp(t->comm, comm, len) == 0 && t->comm[len] == 0))
                return 0;
        s = strndup(comm, len);
        if (!s)
                return -ENOMEM;
        free(t->comm);
        t->comm = s;
        return 0;
}

static int task_name(PerfettoWriter *w, int64_t pid, const char *comm) {
        return task_name_n(w, pid, comm, comm ? strlen(comm) : 0);
}

/* A fork's child and its parent. */
static int task_parent(PerfettoWriter *w, int64_t child, int64_t parent) {
        Task *t;

        if (child < 0 || child > INT32_MAX)
                return 0;
        t = task_get(w, child);
        if (!t)
                return -ENOMEM;
        t->ppid = parent;
        return 0;
}

static Bundle *writer_cpu(PerfettoWriter *w, int64_t cpu) {
        if (cpu < 0 || cpu >= CPU_MAX)
                return NULL;
        if ((size_t) cpu >= w->n_cpus) {
                Bundle *b = realloc(w->cpus, ((size_t) cpu + 1) * sizeof(Bundle));

                if (!b)
                        return NULL;
                memset(b + w->n_cpus, 0, ((size_t) cpu + 1 - w->n_cpus) * sizeof(Bundle));
                w->cpus = b;
                w->n_cpus = (size_t) cpu + 1;
        }
        w->cpus[cpu].seen = true;
        return &w->cpus[cpu];
}

static int bundle_close(PerfettoWriter *w, Bundle *b) {
        if (!b->open)
                return 0;
        pb_end_long(&b->pb, b->bundle);
        pb_end_long(&b->pb, b->packet);
        b->open = false;
        return writer_write(w, &b->pb);
}

static void bundle_open(Bundle *b, uint64_t cpu) {
        if (b->open)
                return;
        b->packet = packet_begin(&b->pb, 0);
        b->bundle = pb_begin_long(&b->pb, PACKET_FTRACE_EVENTS);
        pb_uint(&b->pb, BUNDLE_CPU, cpu);
        b->open = true;
}

static bool flat_int(const FlatMember *m, size_t n, const char *key, int64_t *ret) {
        const FlatValue *v = flat_get(m, n, key);

        if (!v || v->kind != FLAT_INT)
                return false;
        *ret = v->i;
        return true;
}

static const char *flat_string(const FlatMember *m, size_t n, const char *key) {
        const FlatValue *v = flat_get(m, n, key);

        return v && v->kind == FLAT_STRING ? v->s : NULL;
}

static void put_typed(Pb *pb, const TypedEvent *t, const FlatRecord *r) {
        size_t at = pb_begin(pb, t->number);

        for (size_t i = 0; i < ELEMENTSOF(t->fields) && t->fields[i].name; i++) {
                const TypedField *f = &t->fields[i];
                const FlatValue *v = flat_get(r->fields, r->n_fields, f->name);

                if (!v)
                        continue;
                if (f->type == TYPE_STR && v->kind == FLAT_STRING)
                        pb_string_n(pb, f->number, v->s, v->len);
                else if (f->type == TYPE_INT && (v->kind == FLAT_INT || v->kind == FLAT_UINT))
                        pb_int(pb, f->number, v->kind == FLAT_INT ? v->i : INT64_MAX);
                else if (f->type == TYPE_UINT && (v->kind == FLAT_INT || v->kind == FLAT_UINT))
                        pb_uint(pb, f->number, v->kind == FLAT_UINT ? v->u : (uint64_t) MAX(v->i, 0));
        }
        pb_end(pb, at);
}

/* GenericFtraceEvent: integers as int_value, but those above INT64_MAX as uint_value; strings
 * (pointers too: "0x…") as str_value; arrays and anything else as their JSON text. */
static void put_generic(Pb *pb, const char *event, const FlatRecord *r) {
        const char *colon = strchr(event, ':');
        size_t at = pb_begin(pb, EVENT_GENERIC);

        pb_string(pb, GENERIC_EVENT_NAME, colon ? colon + 1 : event);
        for (size_t i = 0; i < r->n_fields; i++) {
                const FlatMember *m = &r->fields[i];
                size_t f = pb_begin(pb, GENERIC_FIELD);

                pb_string_n(pb, GENERIC_FIELD_NAME, m->name, m->name_len);
                if (m->v.kind == FLAT_STRING || m->v.kind == FLAT_OTHER)
                        pb_string_n(pb, GENERIC_STR, m->v.s, m->v.len);
                else if (m->v.kind == FLAT_INT && m->v.i < INT64_MAX)
                        pb_int(pb, GENERIC_INT, m->v.i);
                else
                        pb_uint(pb, GENERIC_UINT, m->v.kind == FLAT_UINT ? m->v.u : (uint64_t) m->v.i);
                pb_end(pb, f);
        }
        pb_end(pb, at);
}

static int writer_event(PerfettoWriter *w, Bundle *b, int64_t cpu, int64_t ts, const FlatRecord *r) {
        const char *event = flat_string(r->top, r->n_top, "event");
        const TypedEvent *typed = NULL;
        int64_t pid = -1;
        size_t at;
        int k;

        if (!event)
                return 0;
        for (size_t i = 0; i < ELEMENTSOF(typed_events); i++)
                if (streq(typed_events[i].name, event))
                        typed = &typed_events[i];

        bundle_open(b, (uint64_t) cpu);
        at = pb_begin(&b->pb, BUNDLE_EVENT);
        pb_uint(&b->pb, EVENT_TIMESTAMP, (uint64_t) ts);
        if (flat_int(r->top, r->n_top, "pid", &pid))
                pb_uint(&b->pb, EVENT_PID, (uint64_t) pid);
        if (typed)
                put_typed(&b->pb, typed, r);
        else
                put_generic(&b->pb, event, r);
        pb_end(&b->pb, at);

        /* The process tree: the record's task, and those the scheduler's events name. */
        k = task_name(w, pid, flat_string(r->top, r->n_top, "comm"));
        for (size_t i = 0; k >= 0 && typed && !streq(event, "ftrace:print") && i < ELEMENTSOF(task_names);
             i++) {
                int64_t p;

                if (flat_int(r->fields, r->n_fields, task_names[i][0], &p))
                        k = task_name(w, p, flat_string(r->fields, r->n_fields, task_names[i][1]));
        }
        if (k >= 0 && typed && streq(event, "sched:sched_process_fork")) {
                int64_t parent, child;

                if (flat_int(r->fields, r->n_fields, "parent_pid", &parent) &&
                    flat_int(r->fields, r->n_fields, "child_pid", &child))
                        k = task_parent(w, child, parent);
        }
        if (k < 0)
                return k;
        return b->pb.len >= BUNDLE_FLUSH_SIZE ? bundle_close(w, b) : 0;
}

/* From ts on, the wall clock is ts + offset. Perfetto takes ftrace's timestamps as boot time: the
 * records of another trace clock (tpd's Clock=) get no mapping to wall time. */
static int writer_clock(PerfettoWriter *w, int64_t ts, const char *clock, int64_t offset) {
        size_t packet, snapshot, c;

        if (ts < 0 || !streq_ptr(clock, "boot"))
                return 0;

        packet = packet_begin(&w->pb, (uint64_t) ts);
        snapshot = pb_begin(&w->pb, PACKET_CLOCK_SNAPSHOT);
        c = pb_begin(&w->pb, SNAPSHOT_CLOCKS);
        pb_uint(&w->pb, CLOCK_ID, BUILTIN_BOOTTIME);
        pb_uint(&w->pb, CLOCK_TIMESTAMP, (uint64_t) ts);
        pb_end(&w->pb, c);
        c = pb_begin(&w->pb, SNAPSHOT_CLOCKS);
        pb_uint(&w->pb, CLOCK_ID, BUILTIN_REALTIME);
        pb_uint(&w->pb, CLOCK_TIMESTAMP, (uint64_t) (ts + offset));
        pb_end(&w->pb, c);
        pb_uint(&w->pb, SNAPSHOT_PRIMARY_CLOCK, BUILTIN_BOOTTIME);
        pb_end(&w->pb, snapshot);
        pb_end_long(&w->pb, packet);
        return writer_write(w, &w->pb);
}

/* One record of §3 of docs/design.md, read flat. */
static int writer_add(PerfettoWriter *w, const FlatRecord *r) {
        int64_t ts, cpu, lost;
        Bundle *b;

        if (!flat_int(r->top, r->n_top, "ts", &ts) || ts < 0)
                return 0;
        if (!w->any_ts || (uint64_t) ts < w->first_ts)
                w->first_ts = (uint64_t) ts;
        if ((uint64_t) ts > w->last_ts)
                w->last_ts = (uint64_t) ts;
        w->any_ts = true;
        if (flat_string(r->top, r->n_top, "clock")) {
                int64_t offset;

                if (!flat_int(r->top, r->n_top, "realtime_offset_ns", &offset))
                        return 0;
                return writer_clock(w, ts, flat_string(r->top, r->n_top, "clock"), offset);
        }
        if (!flat_int(r->top, r->n_top, "cpu", &cpu))
                return 0; /* a notice */
        b = writer_cpu(w, cpu);
        if (!b)
                return cpu < 0 || cpu >= CPU_MAX ? 0 : -ENOMEM;
        if (flat_int(r->top, r->n_top, "lost", &lost)) {
                b->lost += (uint64_t) MAX(lost, 0);
                return 0;
        }
        return writer_event(w, b, cpu, ts, r);
}

int perfetto_writer_add_line(PerfettoWriter *w, const char *line, size_t n) {
        int r = flat_parse(&w->flat, line, n);

        if (r == -EBADMSG)
                return 0; /* not a record */
        return r < 0 ? r : writer_add(w, &w->flat);
}

static RawEvent *raw_event_free(RawEvent *e) {
        if (!e)
                return NULL;
        pb_done(&e->keys);
        free(e->key_at);
        free(e);
        return NULL;
}

static void raw_events_reset(PerfettoWriter *w) {
        for (size_t i = 0; i < w->n_raw; i++)
                w->raw[i] = raw_event_free(w->raw[i]);
}

/* The plan's index of the field named name, or -1. */
static int16_t raw_field(const EventPlan *p, const char *name) {
        for (unsigned i = 0; i < decoder_plan_n_fields(p); i++) {
                size_t len;
                const char *f = decoder_plan_field_name(p, i, &len);

                if (len == strlen(name) && memcmp(f, name, len) == 0)
                        return (int16_t) i;
        }
        return -1;
}

static RawEvent *raw_event_compile(PerfettoWriter *w, unsigned id) {
        RawEvent *e = calloc(1, sizeof(RawEvent));
        const char *name, *colon;
        unsigned n;

        if (!e)
                return NULL;
        e->fork_parent = e->fork_child = -1;
        for (size_t i = 0; i < ELEMENTSOF(e->names); i++)
                e->names[i][0] = e->names[i][1] = -1;
        e->plan = decoder_plan(w->decoder, id);
        if (!e->plan)
                return e;
        name = decoder_plan_name(e->plan);
        e->skip = streq(name, "ftrace:kernel_stack");
        for (size_t i = 0; i < ELEMENTSOF(typed_events); i++)
                if (streq(typed_events[i].name, name))
                        e->typed = &typed_events[i];
        if (e->typed) {
                for (size_t i = 0; i < ELEMENTSOF(e->typed_fields); i++)
                        e->typed_fields[i] =
                                e->typed->fields[i].name ? raw_field(e->plan, e->typed->fields[i].name) : -1;
                /* As writer_event() names tasks: from the scheduler's and tasks' events. */
                for (size_t i = 0; !streq(name, "ftrace:print") && i < ELEMENTSOF(task_names); i++) {
                        e->names[i][0] = raw_field(e->plan, task_names[i][0]);
                        e->names[i][1] = raw_field(e->plan, task_names[i][1]);
                }
                if (streq(name, "sched:sched_process_fork")) {
                        e->fork_parent = raw_field(e->plan, "parent_pid");
                        e->fork_child = raw_field(e->plan, "child_pid");
                }
                return e;
        }

        n = decoder_plan_n_fields(e->plan);
        e->key_at = calloc((size_t) n + 1, sizeof(uint32_t));
        if (!e->key_at)
                return raw_event_free(e);
        colon = strchr(name, ':');
        pb_string(&e->keys, GENERIC_EVENT_NAME, colon ? colon + 1 : name);
        for (unsigned i = 0; i < n; i++) {
                size_t len;
                const char *f = decoder_plan_field_name(e->plan, i, &len);

                e->key_at[i] = (uint32_t) e->keys.len;
                pb_string_n(&e->keys, GENERIC_FIELD_NAME, f, len);
        }
        e->key_at[n] = (uint32_t) e->keys.len;
        return e->keys.error < 0 ? raw_event_free(e) : e;
}

/* The way event id's records are written; NULL when out of memory. */
static RawEvent *raw_event(PerfettoWriter *w, unsigned id) {
        if (_likely_(id < w->n_raw && w->raw[id]))
                return w->raw[id];
        if (id >= w->n_raw) {
                size_t n = MAX((size_t) id + 1, w->n_raw * 2);
                RawEvent **raw = reallocarray(w->raw, n, sizeof(RawEvent *));

                if (!raw)
                        return NULL;
                memset(raw + w->n_raw, 0, (n - w->n_raw) * sizeof(RawEvent *));
                w->raw = raw;
                w->n_raw = n;
        }
        return (w->raw[id] = raw_event_compile(w, id));
}

/* As put_typed() writes a line's field. */
static void raw_put_typed(Pb *pb, const RawEvent *e, const uint8_t *data, size_t size) {
        size_t at = pb_begin(pb, e->typed->number);

        for (size_t i = 0; i < ELEMENTSOF(e->typed_fields); i++) {
                const TypedField *f = &e->typed->fields[i];
                DecoderValue v;

                if (e->typed_fields[i] < 0 ||
                    decoder_plan_read(e->plan, (unsigned) e->typed_fields[i], data, size, &v) < 0)
                        continue;
                if (f->type == TYPE_STR && v.kind == DECODER_VALUE_STRING)
                        pb_string_n(pb, f->number, (const char *) v.p, v.len);
                else if (f->type == TYPE_INT && v.kind == DECODER_VALUE_SIGNED)
                        pb_int(pb, f->number, v.i);
                else if (f->type == TYPE_INT && v.kind == DECODER_VALUE_UNSIGNED)
                        pb_int(pb, f->number, v.u > INT64_MAX ? INT64_MAX : (int64_t) v.u);
                else if (f->type == TYPE_UINT && v.kind == DECODER_VALUE_UNSIGNED)
                        pb_uint(pb, f->number, v.u);
                else if (f->type == TYPE_UINT && v.kind == DECODER_VALUE_SIGNED)
                        pb_uint(pb, f->number, (uint64_t) MAX(v.i, 0));
        }
        pb_end(pb, at);
}

/* As put_generic() writes a line's fields. */
static int raw_put_generic(PerfettoWriter *w, Pb *pb, const RawEvent *e, const uint8_t *data, size_t size) {
        unsigned n = decoder_plan_n_fields(e->plan);
        size_t at = pb_begin(pb, EVENT_GENERIC);
        int r;

        pb_raw(pb, e->keys.data, e->key_at[0]);
        for (unsigned i = 0; i < n; i++) {
                size_t f;
                DecoderValue v;
                char hex[24];

                r = decoder_plan_read(e->plan, i, data, size, &v);
                if (r < 0)
                        return r;
                f = pb_begin(pb, GENERIC_FIELD);
                pb_raw(pb, e->keys.data + e->key_at[i], e->key_at[i + 1] - e->key_at[i]);
                switch (v.kind) {
                case DECODER_VALUE_STRING:
                        pb_string_n(pb, GENERIC_STR, (const char *) v.p, v.len);
                        break;
                case DECODER_VALUE_SIGNED:
                        if (v.i < INT64_MAX)
                                pb_int(pb, GENERIC_INT, v.i);
                        else
                                pb_uint(pb, GENERIC_UINT, (uint64_t) v.i);
                        break;
                case DECODER_VALUE_UNSIGNED:
                        if (v.u < INT64_MAX)
                                pb_int(pb, GENERIC_INT, (int64_t) v.u);
                        else
                                pb_uint(pb, GENERIC_UINT, v.u);
                        break;
                case DECODER_VALUE_POINTER:
                        pb_string_n(pb, GENERIC_STR, hex,
                                    (size_t) snprintf(hex, sizeof(hex), "0x%" PRIx64, v.u));
                        break;
                case DECODER_VALUE_ARRAY:
                        w->text.len = 0;
                        r = decoder_value_json(&v, &w->text);
                        if (r < 0)
                                return r;
                        pb_string_n(pb, GENERIC_STR, w->text.data, w->text.len);
                        break;
                }
                pb_end(pb, f);
        }
        pb_end(pb, at);
        return 0;
}

/* The tasks a typed event names, and a fork's parent. */
static int raw_names(PerfettoWriter *w, const RawEvent *e, const uint8_t *data, size_t size) {
        DecoderValue pid, comm;
        int r;

        for (size_t i = 0; i < ELEMENTSOF(e->names); i++) {
                if (e->names[i][0] < 0 || e->names[i][1] < 0 ||
                    decoder_plan_read(e->plan, (unsigned) e->names[i][0], data, size, &pid) < 0 ||
                    pid.kind != DECODER_VALUE_SIGNED ||
                    decoder_plan_read(e->plan, (unsigned) e->names[i][1], data, size, &comm) < 0 ||
                    comm.kind != DECODER_VALUE_STRING)
                        continue;
                r = task_name_n(w, pid.i, (const char *) comm.p, comm.len);
                if (r < 0)
                        return r;
        }
        if (e->fork_parent >= 0 && e->fork_child >= 0 &&
            decoder_plan_read(e->plan, (unsigned) e->fork_parent, data, size, &pid) >= 0 &&
            decoder_plan_read(e->plan, (unsigned) e->fork_child, data, size, &comm) >= 0 &&
            pid.kind == DECODER_VALUE_SIGNED && comm.kind == DECODER_VALUE_SIGNED)
                return task_parent(w, comm.i, pid.i);
        return 0;
}

/* One record of a page: an event of cpu's bundle; one of an event without a format, a loss; one
 * shorter than its format, nothing (as the decoder drops it). */
static int raw_record(PerfettoWriter *w, Bundle *b, unsigned cpu, const PageEntry *pe) {
        const uint8_t *data = pe->payload;
        size_t start, at;
        RawEvent *e;
        int32_t pid;
        int r;

        if (pe->size < 8)
                return 0; /* not an event record: the decoder's walk skips them too */
        e = raw_event(w, (unsigned) load_unsigned(data, 2));
        if (!e)
                return -ENOMEM;
        if (!e->plan) {
                b->lost++;
                return 0;
        }
        if (e->skip)
                return 0;
        if (decoder_plan_pid(e->plan, data, pe->size, &pid) < 0)
                return 0;
        bundle_open(b, cpu);
        start = b->pb.len;
        at = pb_begin(&b->pb, BUNDLE_EVENT);
        pb_uint(&b->pb, EVENT_TIMESTAMP, pe->ts);
        pb_uint(&b->pb, EVENT_PID, (uint64_t) (int64_t) pid);
        if (e->typed)
                raw_put_typed(&b->pb, e, data, pe->size);
        else if ((r = raw_put_generic(w, &b->pb, e, data, pe->size)) < 0) {
                b->pb.len = start; /* a record shorter than its format, or no memory */
                return r == -EBADMSG ? 0 : r;
        }
        pb_end(&b->pb, at);
        return e->typed ? raw_names(w, e, data, pe->size) : 0;
}

int perfetto_writer_add_page(PerfettoWriter *w, unsigned cpu, const void *page, size_t size) {
        Bundle *b = writer_cpu(w, cpu);
        PageWalk walk;
        PageEntry pe;
        int r = 0;

        if (!b)
                return cpu >= CPU_MAX ? -EBADMSG : -ENOMEM;
        if (!w->decoder)
                return -EBADMSG; /* no format came */
        if (page_walk_init(&walk, page, size) < 0)
                return 0; /* the decoder skips it too */
        while (r >= 0 && page_walk_next(&walk, &pe) > 0) {
                if (!w->any_ts || pe.ts < w->first_ts)
                        w->first_ts = pe.ts;
                w->last_ts = MAX(w->last_ts, pe.ts);
                w->any_ts = true;
                r = raw_record(w, b, cpu, &pe);
        }
        if (r < 0)
                return r;
        return b->pb.len >= BUNDLE_FLUSH_SIZE ? bundle_close(w, b) : 0;
}

/* "events/SYSTEM/EVENT/format": SYSTEM, in a buffer of the caller's. */
static bool format_path(const char *path, char system[static DECODER_NAME_MAX + 1]) {
        const char *s = path + 7, *e;

        if (strncmp(path, "events/", 7) != 0 || !(e = strchr(s, '/')) || e == s ||
            (size_t) (e - s) > DECODER_NAME_MAX || !streq(strchrnul(e + 1, '/'), "/format") || e[1] == '/')
                return false;
        memcpy(system, s, (size_t) (e - s));
        system[e - s] = 0;
        return true;
}

int perfetto_writer_add_file(PerfettoWriter *w, const void *payload, size_t size) {
        const char *path = payload, *nul = memchr(payload, 0, size);
        char system[DECODER_NAME_MAX + 1];
        int r;

        if (!nul)
                return -EBADMSG;
        if (!format_path(path, system))
                return 0;
        if (!w->tep) {
                w->tep = tep_alloc();
                if (!w->tep)
                        return -ENOMEM;
                r = decoder_new(w->tep, NULL, &w->decoder);
                if (r < 0)
                        return r;
        }
        if (tep_parse_event(w->tep, nul + 1, size - (size_t) (nul + 1 - path), system) != 0)
                return -EBADMSG;
        /* Plans of the events known before stay right; one made before its format came is remade. */
        decoder_reset_plans(w->decoder);
        raw_events_reset(w);
        return 0;
}

int perfetto_writer_add_comm(PerfettoWriter *w, int pid, const char *comm, size_t len) {
        return task_name_n(w, pid, comm, strnlen(comm, len));
}

int perfetto_writer_add_lost(PerfettoWriter *w, unsigned cpu, uint64_t count) {
        Bundle *b = writer_cpu(w, cpu);

        if (!b)
                return cpu >= CPU_MAX ? -EBADMSG : -ENOMEM;
        b->lost += count;
        return 0;
}

static void put_process(Pb *pb, const ProcTask *t) {
        size_t at = pb_begin(pb, TREE_PROCESSES);

        pb_int(pb, PROCESS_PID, t->tid);
        pb_int(pb, PROCESS_PPID, t->ppid);
        if (t->cmdline_len > 1)
                for (size_t i = 0; i < t->cmdline_len; i += strlen(t->cmdline + i) + 1)
                        pb_string(pb, PROCESS_CMDLINE, t->cmdline + i);
        else {
                /* A kernel thread, or a process that erased its arguments: named as the kernel
                 * names it. */
                pb_string(pb, PROCESS_CMDLINE, t->comm);
                pb_uint(pb, PROCESS_CMDLINE_IS_COMM, 1);
        }
        pb_end(pb, at);
}

/* The tasks alive now, from /proc: every process with its parent and arguments, and every task,
 * the processes' own included, as a thread of its process with the kernel's name of it. */
static int writer_processes(PerfettoWriter *w, uint64_t ts) {
        ProcTask *tasks = NULL;
        size_t n = 0, packet, tree;
        int r = proc_tasks_read("/proc", &tasks, &n);

        if (r < 0)
                return r;
        packet = packet_begin(&w->pb, ts);
        tree = pb_begin_long(&w->pb, PACKET_PROCESS_TREE);
        for (size_t i = 0; i < n; i++)
                if (tasks[i].tid == tasks[i].tgid)
                        put_process(&w->pb, &tasks[i]);
        for (size_t i = 0; r >= 0 && i < n; i++) {
                size_t at = pb_begin(&w->pb, TREE_THREADS);

                pb_int(&w->pb, THREAD_TID, tasks[i].tid);
                pb_string(&w->pb, THREAD_NAME, tasks[i].comm);
                pb_int(&w->pb, THREAD_TGID, tasks[i].tgid);
                pb_end(&w->pb, at);
                /* Named here: the tree at the end leaves them out. */
                r = task_name(w, tasks[i].tid, tasks[i].comm);
                if (r >= 0) {
                        Task *t = task_get(w, tasks[i].tid);

                        if (t)
                                t->started = true;
                        else
                                r = -ENOMEM;
                }
        }
        pb_end_long(&w->pb, tree);
        pb_end_long(&w->pb, packet);
        proc_tasks_free(tasks, n);
        return r < 0 ? r : writer_write(w, &w->pb);
}

/* An integer of tpd's reply. */
static bool reply_int(json_object *reply, const char *key, int64_t *ret) {
        json_object *v;

        if (!json_object_object_get_ex(reply, key, &v) || !json_object_is_type(v, json_type_int))
                return false;
        *ret = json_object_get_int64(v);
        return true;
}

int perfetto_writer_start(PerfettoWriter *w, json_object *reply) {
        json_object *v;
        const char *clock =
                json_object_object_get_ex(reply, "clock", &v) && json_object_is_type(v, json_type_string)
                        ? json_object_get_string(v)
                        : NULL;
        int64_t ts = 0, offset;
        int r;

        if (reply_int(reply, "ts", &ts) && ts > 0 &&
            (reply_int(reply, "realtime_offset_ns", &offset) ||
             (streq_ptr(clock, "boot") && reply_int(reply, "boot_to_realtime_ns", &offset)))) {
                r = writer_clock(w, ts, clock, offset);
                if (r < 0)
                        return r;
        }
        return writer_processes(w, (uint64_t) MAX(ts, 0));
}

int perfetto_writer_new(int fd, PerfettoWriter **ret) {
        PerfettoWriter *w = calloc(1, sizeof(PerfettoWriter));
        struct utsname u;
        size_t packet, info, uts;
        int r;

        if (!w)
                return -ENOMEM;
        w->fd = fd;
        /* The machine doing the conversion: the UI reads the kernel's version to decode
         * prev_state, right for a capture converted where it was recorded. */
        if (uname(&u) >= 0) {
                packet = packet_begin(&w->pb, 0);
                info = pb_begin(&w->pb, PACKET_SYSTEM_INFO);
                uts = pb_begin(&w->pb, SYSTEM_INFO_UTSNAME);
                pb_string(&w->pb, UTSNAME_SYSNAME, u.sysname);
                pb_string(&w->pb, UTSNAME_VERSION, u.version);
                pb_string(&w->pb, UTSNAME_RELEASE, u.release);
                pb_string(&w->pb, UTSNAME_MACHINE, u.machine);
                pb_end(&w->pb, uts);
                pb_end(&w->pb, info);
                pb_end_long(&w->pb, packet);
                r = writer_write(w, &w->pb);
                if (r < 0) {
                        perfetto_writer_free(w);
                        return r;
                }
        }
        *ret = w;
        return 0;
}

static void writer_stats(PerfettoWriter *w, unsigned phase) {
        size_t packet = packet_begin(&w->pb, phase == PHASE_START_OF_TRACE ? w->first_ts : w->last_ts);
        size_t stats = pb_begin(&w->pb, PACKET_FTRACE_STATS);

        pb_uint(&w->pb, STATS_PHASE, phase);
        for (size_t cpu = 0; cpu < w->n_cpus; cpu++) {
                size_t at;

                if (!w->cpus[cpu].seen)
                        continue;
                at = pb_begin(&w->pb, STATS_CPU_STATS);
                pb_uint(&w->pb, CPU_STATS_CPU, cpu);
                pb_uint(&w->pb, CPU_STATS_OVERRUN, phase == PHASE_START_OF_TRACE ? 0 : w->cpus[cpu].lost);
                pb_end(&w->pb, at);
        }
        pb_end(&w->pb, stats);
        pb_end_long(&w->pb, packet);
}

int perfetto_writer_finish(PerfettoWriter *w) {
        size_t packet, tree;
        bool any = false;
        int r = 0;

        for (size_t cpu = 0; r >= 0 && cpu < w->n_cpus; cpu++)
                r = bundle_close(w, &w->cpus[cpu]);
        if (r < 0)
                return r;

        /* Every task the records name but the idle tasks (pid 0, Perfetto's swapper), as a
         * process named by its last name, with its parent when a fork named it. Not as a thread:
         * the records do not say which process a thread is of, and Perfetto would put a thread
         * without a tgid under pid 0. Its time is the capture's start: the names hold throughout. */
        packet = packet_begin(&w->pb, w->first_ts);
        tree = pb_begin_long(&w->pb, PACKET_PROCESS_TREE);
        for (size_t i = 0; i < w->tasks_size; i++) {
                const Task *t = &w->tasks[i];
                size_t at;

                if (!t->used || t->pid == 0 || !t->comm || t->started)
                        continue;
                any = true;
                at = pb_begin(&w->pb, TREE_PROCESSES);
                pb_int(&w->pb, PROCESS_PID, t->pid);
                if (t->ppid >= 0)
                        pb_int(&w->pb, PROCESS_PPID, t->ppid);
                pb_string(&w->pb, PROCESS_CMDLINE, t->comm);
                pb_uint(&w->pb, PROCESS_CMDLINE_IS_COMM, 1);
                pb_end(&w->pb, at);
        }
        pb_end_long(&w->pb, tree);
        pb_end_long(&w->pb, packet);
        if (!any)
                pb_reset(&w->pb); /* every task was in the start's tree */

        /* Losses as the kernel's overruns: the UI counts them as data loss, from start to end. */
        writer_stats(w, PHASE_START_OF_TRACE);
        writer_stats(w, PHASE_END_OF_TRACE);
        return writer_write(w, &w->pb);
}

PerfettoWriter *perfetto_writer_free(PerfettoWriter *w) {
        if (!w)
                return NULL;
        for (size_t i = 0; i < w->n_cpus; i++)
                pb_done(&w->cpus[i].pb);
        for (size_t i = 0; i < w->tasks_size; i++)
                free(w->tasks[i].comm);
        free(w->cpus);
        free(w->tasks);
        raw_events_reset(w);
        free(w->raw);
        decoder_free(w->decoder);
        if (w->tep)
                tep_free(w->tep);
        jsonbuf_done(&w->text);
        pb_done(&w->pb);
        flat_done(&w->flat);
        free(w);
        return NULL;
}
