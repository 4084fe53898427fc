/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include "capdir.h"
#include "datconvert.h"
#include "flatjson.h"
#include "message.h"
#include "perfetto.h"
#include "proctree.h"
#include "protobuf.h"
#include "replay.h"
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

struct PerfettoWriter {
        int fd;
        FlatRecord flat; /* the line being written */
        Pb pb;           /* a packet other than a bundle */
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
        size_t at = pb_begin(pb, TRACE_PACKET);

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

static int task_name(PerfettoWriter *w, int64_t pid, const char *comm) {
        Task *t;
        char *s;

        if (pid < 0 || pid > INT32_MAX)
                return 0;
        t = task_get(w, pid);
        if (!t)
                return -ENOMEM;
        if (!comm || streq_ptr(t->comm, comm))
                return 0;
        s = strdup(comm);
        if (!s)
                return -ENOMEM;
        free(t->comm);
        t->comm = s;
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
        pb_end(&b->pb, b->bundle);
        pb_end(&b->pb, b->packet);
        b->open = false;
        return writer_write(w, &b->pb);
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

        if (!b->open) {
                b->packet = packet_begin(&b->pb, 0);
                b->bundle = pb_begin(&b->pb, PACKET_FTRACE_EVENTS);
                pb_uint(&b->pb, BUNDLE_CPU, (uint64_t) cpu);
                b->open = true;
        }
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
                    flat_int(r->fields, r->n_fields, "child_pid", &child) && child >= 0 &&
                    child <= INT32_MAX) {
                        Task *t = task_get(w, child);
                        if (!t)
                                return -ENOMEM;
                        t->ppid = parent;
                }
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
        pb_end(&w->pb, packet);
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
        tree = pb_begin(&w->pb, PACKET_PROCESS_TREE);
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
        pb_end(&w->pb, tree);
        pb_end(&w->pb, packet);
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
                pb_end(&w->pb, packet);
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
        pb_end(&w->pb, packet);
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
        tree = pb_begin(&w->pb, PACKET_PROCESS_TREE);
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
        pb_end(&w->pb, tree);
        pb_end(&w->pb, packet);
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
        pb_done(&w->pb);
        flat_done(&w->flat);
        free(w);
        return NULL;
}

static bool has_suffix(const char *s, const char *suffix) {
        size_t n = strlen(s), k = strlen(suffix);

        return n >= k && streq(s + n - k, suffix);
}

static void fclosep(FILE **f) {
        if (*f)
                fclose(*f);
}

/* OUT's directory and name; an OUT that exists (a link included) is refused, never replaced. */
static int output_open(const char *out, int *ret_dirfd, char **ret_name) {
        int r = capdir_open(out, ret_dirfd, ret_name);

        if (r < 0)
                return log_error_errno(r, "cannot write '%s': %m", out);
        if (faccessat(*ret_dirfd, *ret_name, F_OK, AT_SYMLINK_NOFOLLOW) == 0) {
                log_error("'%s' exists: tpctl convert does not replace a file.", out);
                log_hint("Name another file, or remove it.");
                return -EEXIST;
        }
        return 0;
}

/* The records of the capture, as `tpctl replay IN` prints them in a child, through a pipe, each to
 * the writer: memory stays bounded whatever the capture's size. The trace holds what the capture
 * holds: it is made as a capture's files are (capdir.h), 0600 under a private name, and takes OUT's
 * name only once whole, never over a file that is there. */
static int convert(const char *in, const char *out) {
        _cleanup_close_ int ofd = -1, dirfd = -1;
        _cleanup_(fclosep) FILE *f = NULL;
        _cleanup_free_ char *line = NULL, *name = NULL, *tmp = NULL;
        PerfettoWriter *w = NULL;
        int fds[2], status = EXIT_FAILURE, child, r;
        size_t size = 0;
        ssize_t n;
        pid_t pid;

        if (output_open(out, &dirfd, &name) < 0)
                return EXIT_FAILURE;
        ofd = capdir_mktemp(dirfd, ".tpctl-convert-", O_WRONLY, &tmp);
        if (ofd < 0)
                return log_error_errno(ofd, "cannot create a file next to '%s': %m", out), EXIT_FAILURE;
        if (pipe2(fds, O_CLOEXEC) < 0) {
                log_error_errno(-errno, "cannot make a pipe: %m");
                goto fail;
        }
        pid = fork();
        if (pid < 0) {
                log_error_errno(-errno, "cannot fork: %m");
                safe_close(fds[0]);
                safe_close(fds[1]);
                goto fail;
        }
        if (pid == 0) {
                safe_close(fds[0]);
                _exit(replay_file(in, &(ReplayOptions){ .out_fd = fds[1] }));
        }
        safe_close(fds[1]);
        f = fdopen(fds[0], "r");
        if (!f) {
                safe_close(fds[0]);
                r = -ENOMEM;
        } else
                r = perfetto_writer_new(ofd, &w);
        while (r >= 0 && (n = getline(&line, &size, f)) > 0)
                r = perfetto_writer_add_line(w, line, (size_t) n);
        /* A read that failed is not the end: the child, which then gets EPIPE, ends with 0. */
        if (r >= 0 && f && ferror(f))
                r = -EIO;
        /* A writer that failed leaves the child to an EPIPE, which ends it. */
        if (f)
                fclose(TAKE_PTR(f));
        while (waitpid(pid, &child, 0) < 0)
                if (errno != EINTR) {
                        child = -1;
                        break;
                }
        if (r < 0) {
                log_error_errno(r, "cannot write '%s': %m", out);
                goto fail;
        }
        if (child == -1 || !WIFEXITED(child)) {
                log_error("the replay of '%s' ended %s%s", in, child == -1 ? "unseen" : "by signal ",
                          child == -1 ? "" : sigabbrev_np(WTERMSIG(child)) ?: "?");
                goto fail;
        }
        if (WEXITSTATUS(child) != EXIT_SUCCESS) {
                status = WEXITSTATUS(child); /* the child said why */
                goto fail;
        }
        r = perfetto_writer_finish(w);
        if (r >= 0)
                r = capdir_move(dirfd, tmp, dirfd, name, false);
        if (r < 0) {
                log_error_errno(r, "cannot write '%s': %m", out);
                goto fail;
        }
        perfetto_writer_free(w);
        return EXIT_SUCCESS;

fail:
        perfetto_writer_free(w);
        (void) unlinkat(dirfd, tmp, 0);
        return status;
}

/* NDJSON to a trace-cmd data file (datconvert.c), as a capture's files are written. */
static int convert_dat(const char *in, const char *out) {
        _cleanup_close_ int dirfd = -1;
        _cleanup_free_ char *name = NULL;

        if (output_open(out, &dirfd, &name) < 0)
                return EXIT_FAILURE;
        return convert_to_dat(in, dirfd, name);
}

int convert_verb(const CommonOptions *c, char **args, size_t n) {
        (void) n;
        if (c->format && !streq(c->format, "perfetto") && !streq(c->format, "dat"))
                return usage_error("--format takes perfetto or dat, not '%s'", c->format);
        if (c->format ? streq(c->format, "dat") : has_suffix(args[1], ".dat"))
                return convert_dat(args[0], args[1]);
        if (!c->format && !has_suffix(args[1], ".perfetto-trace") && !has_suffix(args[1], ".pftrace"))
                return usage_error("cannot tell the format to write '%s' in: name it *.perfetto-trace, "
                                   "*.pftrace or *.dat, or give --format=perfetto or --format=dat",
                                   args[1]);
        return convert(args[0], args[1]);
}
