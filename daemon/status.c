/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <traceevent/event-parse.h>

#include "build-config.h"
#include "calls.h"
#include "core/encode.h"
#include "rings.h"
#include "status.h"
#include "tpd-protocol.h"

/* GetCounters replies are built at most this often, and shared by the calls in between: a reply
 * with thousands of processes costs milliseconds, and any number of members may ask in a loop. */
#define STATUS_COUNTERS_REUSE_USEC (100 * 1000ULL)

static json_object *json_u64(uint64_t v) {
        return json_object_new_uint64(v);
}

/* Who holds an event: the uids of its pins, of the streams that named it, and of its filter. */
static void status_add_holders(Manager *m, const TracingEvent *e, json_object *o, int *ret) {
        json_object *pins = json_object_new_array(), *streams = json_object_new_array();
        _cleanup_free_ uid_t *uids = NULL;
        size_t n = 0;
        int r = *ret;

        for (size_t i = 0; i < e->n_pin_uids; i++)
                json_push(&r, pins, json_object_new_int64(e->pin_uids[i]));
        for (Peer *k = m->peers; k; k = k->next)
                if (k->stream && k->n_held > 0 && peer_holds(k, e))
                        if (uids_add(&uids, &n, k->uid) < 0)
                                r = -ENOMEM;
        for (size_t i = 0; i < n; i++)
                json_push(&r, streams, json_object_new_int64(uids[i]));
        json_set(&r, o, "pin_uids", pins);
        json_set(&r, o, "stream_uids", streams);
        if (e->filter)
                json_set(&r, o, "filter_uid", json_object_new_int64(e->filter_uid));
        *ret = r;
}

/* Each CPU's buffer as the kernel counts it; *ret_dropped sums its dropped events. */
static json_object *status_cpus(Manager *m, uint64_t *ret_dropped, int *r) {
        json_object *cpus = json_object_new_array();
        uint64_t dropped = 0;

        for (unsigned cpu = 0; cpu < m->n_cpus; cpu++) {
                TracingCpuStats s = {};
                json_object *o = json_object_new_object();

                (void) manager_cpu_stats(m, cpu, &s);
                json_set(r, o, "cpu", json_object_new_int((int) cpu));
                json_set(r, o, "online", json_object_new_boolean(m->cpus && m->cpus[cpu].online));
                json_set(r, o, "entries", json_u64(s.entries));
                json_set(r, o, "overrun", json_u64(s.overrun));
                json_set(r, o, "read", json_u64(s.read));
                /* What the kernel recorded: still in the buffer, read, or overwritten. */
                json_set(r, o, "written", json_u64(s.entries + s.overrun + s.read));
                json_set(r, o, "dropped", json_u64(s.dropped));
                dropped += s.dropped;
                json_push(r, cpus, o);
        }
        *ret_dropped = dropped;
        return cpus;
}

/* The events tpd holds: pinned, or named by a stream. */
static json_object *status_events(Manager *m, int *r) {
        json_object *evs = json_object_new_array();
        TracingEvent *const *events;
        size_t n;

        events = tracing_events(m->tracing, &n);
        for (size_t i = 0; i < n; i++) {
                json_object *o;

                if (!events[i]->pinned && events[i]->streams == 0 && events[i]->internal == 0)
                        continue;
                o = json_object_new_object();
                json_set(r, o, "name", json_object_new_string(events[i]->name));
                json_set(r, o, "pinned", json_object_new_boolean(events[i]->pinned));
                json_set(r, o, "streams", json_object_new_int((int) events[i]->streams));
                if (events[i]->internal > 0)
                        json_set(r, o, "internal", json_object_new_boolean(true));
                if (events[i]->filter)
                        json_set(r, o, "filter", json_object_new_string(events[i]->filter));
                status_add_holders(m, events[i], o, r);
                json_push(r, evs, o);
        }
        return evs;
}

static json_object *status_connections(Manager *m, int *r) {
        json_object *conns = json_object_new_array();

        for (Peer *k = m->peers; k; k = k->next) {
                json_object *o = json_object_new_object();

                json_set(r, o, "uid", json_object_new_int64(k->uid));
                json_set(r, o, "pid", json_object_new_int64(k->pid));
                json_set(r, o, "streaming", json_object_new_boolean(k->stream != NULL));
                if (k->stream) {
                        json_set(r, o, "delivered", json_u64(k->stream->delivered));
                        json_set(r, o, "lost_client",
                                 json_u64(k->shm ? k->shm->reported_lost : k->stream->lost_client));
                        if (!k->recording)
                                json_set(r, o, "transport",
                                         json_object_new_string(k->shm ? "shm" : "socket"));
                        if (k->shm)
                                json_set(r, o, "reader_delivered", json_u64(k->shm->reported_delivered));
                        if (k->stream->selection.follow) {
                                json_set(r, o, "followed", json_u64(k->stream->selection.follow->live));
                                json_set(r, o, "follow_refused",
                                         json_u64(k->stream->selection.follow->refused));
                        }
                }
                json_push(r, conns, o);
        }
        return conns;
}

static json_object *status_lost(const ManagerCounters *counters, uint64_t dropped, int *r) {
        json_object *lost = json_object_new_object();

        json_set(r, lost, "overrun", json_u64(counters->lost_overrun));
        json_set(r, lost, "client", json_u64(counters->lost_client));
        json_set(r, lost, "unknown", json_u64(counters->lost_unknown));
        json_set(r, lost, "decode_pages", json_u64(counters->bad_pages));
        /* The kernel's "dropped events" (with options/overwrite off, a full buffer drops new
         * records), summed over the CPUs as "cpus" shows them. */
        json_set(r, lost, "dropped", json_u64(dropped));
        return lost;
}

/* Every setting by its name, as it is now. */
static json_object *status_settings(Manager *m, int *r) {
        json_object *settings = json_object_new_object();

        for (size_t i = 0; i < config_n_settings; i++) {
                const Setting *s = &config_settings[i];
                const void *v = (const char *) &m->config + s->offset;

                if (s->type == SETTING_UNSIGNED)
                        json_set(r, settings, s->name, json_object_new_int64(*(const unsigned *) v));
                else if (s->type == SETTING_BOOL)
                        json_set(r, settings, s->name, json_object_new_boolean(*(const bool *) v));
                else if (s->type == SETTING_STRING && *(char *const *) v)
                        json_set(r, settings, s->name, json_object_new_string(*(char *const *) v));
                else if (s->type == SETTING_STRING) {
                        /* Unset: null. */
                        if (*r >= 0 && (!settings || json_object_object_add(settings, s->name, NULL) < 0))
                                *r = -ENOMEM;
                } else {
                        json_object *l = json_object_new_array();
                        for (char *const *e = *(char **const *) v; e && *e; e++)
                                json_push(r, l, json_object_new_string(*e));
                        json_set(r, settings, s->name, l);
                }
        }
        return settings;
}

static json_object *status_loop(Manager *m, int *r) {
        json_object *loop = json_object_new_object();

        json_set(r, loop, "dispatches", json_u64(m->loop.dispatches));
        json_set(r, loop, "slow", json_u64(m->loop.slow));
        json_set(r, loop, "max_usec", json_u64(m->loop.max_usec));
        json_set(r, loop, "max_cpu_usec", json_u64(m->loop.max_cpu_usec));
        return loop;
}

/* Who decodes: the threads there are, and those in use now (0: the event loop). */
static json_object *status_decoding(Manager *m, int *r) {
        json_object *d = json_object_new_object();

        json_set(r, d, "workers", json_object_new_int((int) workers_count(m->workers)));
        json_set(r, d, "active", json_object_new_int((int) workers_active(m->workers)));
        json_set(r, d, "auto", json_object_new_boolean(m->decode_auto));
        json_set(r, d, "changes", json_u64(m->decode_changes));
        return d;
}

int status_method_get_status(Manager *m, Peer *peer, const VarlinkCall *call) {
        static const char *const keys[] = { NULL };
        _cleanup_free_ char *clock = NULL;
        ManagerCounters counters;
        unsigned buffer_kb = 0;
        json_object *p, *cpus, *evs, *lost, *conns, *settings;
        uint64_t dropped = 0;
        int r = 0;

        if (check_keys(peer, call, keys) < 0)
                return 0;

        (void) tracing_get_clock(m->tracing, &clock);
        (void) tracing_get_buffer_size_kb(m->tracing, &buffer_kb);

        cpus = status_cpus(m, &dropped, &r);
        evs = status_events(m, &r);
        conns = status_connections(m, &r);
        manager_counters(m, &counters);
        lost = status_lost(&counters, dropped, &r);
        settings = status_settings(m, &r);

        p = json_object_new_object();
        json_set(&r, p, "version", json_object_new_string(TPD_VERSION));
        json_set(&r, p, "instance", json_object_new_string(tracing_instance_name(m->tracing)));
        json_set(&r, p, "clock", json_object_new_string(strempty(clock)));
        json_set(&r, p, "buffer_size_kb", json_object_new_int((int) buffer_kb));
        json_set(&r, p, "flush_interval_ms", json_object_new_int((int) m->config.flush_interval_ms));
        json_set(&r, p, "cpus", cpus);
        json_set(&r, p, "events", evs);
        json_set(&r, p, "clients", json_object_new_int((int) m->n_peers));
        json_set(&r, p, "streams", json_object_new_int((int) m->n_streams));
        json_set(&r, p, "connections", conns);
        json_set(&r, p, "records", json_u64(counters.records));
        json_set(&r, p, "delivered", json_u64(counters.delivered));
        json_set(&r, p, "lost", lost);
        /* Enable replies before the state reaches the disk: a failed save shows here. */
        json_set(&r, p, "state_saves", json_u64(m->state_saves));
        if (m->state_error != 0)
                json_set(&r, p, "state_error", json_object_new_string(strerror(-m->state_error)));
        json_set(&r, p, "settings", settings);
        json_set(&r, p, "loop", status_loop(m, &r));
        json_set(&r, p, "decoding", status_decoding(m, &r));
        if (m->follow.n > 0 || m->lineage.forks > 0) {
                json_object *f = json_object_new_object();

                json_set(&r, f, "streams", json_object_new_int((int) m->follow.n));
                json_set(&r, f, "forks", json_u64(m->lineage.forks));
                json_set(&r, f, "exits", json_u64(m->lineage.exits));
                json_set(&r, f, "moves", json_u64(m->lineage.moves));
                json_set(&r, f, "reads", json_u64(m->follow.reads));
                json_set(&r, f, "waiting_bytes", json_u64(m->lineage.queued));
                json_set(&r, p, "follow", f);
        }
        if (m->attribution.history) {
                json_object *a = json_object_new_object();

                json_set(&r, a, "streams", json_object_new_int((int) m->attribution.n));
                json_set(&r, a, "tasks", json_u64(cgroup_history_tasks(m->attribution.history)));
                json_set(&r, a, "cgroups", json_u64(cgroup_history_paths(m->attribution.history)));
                json_set(&r, p, "attribution", a);
        }
        if (m->stacks.n > 0 || m->stacks.held > 0) {
                json_object *s = json_object_new_object();

                json_set(&r, s, "streams", json_object_new_int((int) m->stacks.n));
                json_set(&r, s, "symbols", json_u64(m->stacks.ksyms.n_entries));
                json_set(&r, s, "held", json_u64(m->stacks.held));
                json_set(&r, s, "joined_late", json_u64(m->stacks.joined_late));
                json_set(&r, s, "unjoined", json_u64(m->stacks.unjoined));
                json_set(&r, s, "reloads", json_u64(m->stacks.reloads));
                json_set(&r, p, "stacks", s);
        }
        return call_reply(peer, p, r);
}

/* Room for a key and a number of a counters reply. */
#define COUNTERS_FIELD_MAX (32 + JSON_U64_MAX_LEN)

static void counters_put_u64(JsonBuf *b, const char *key, uint64_t v) {
        jsonbuf_put(b, key, strlen(key));
        json_put_u64(b, v);
}

/* One event of a GetCounters reply, named name (NULL: none known). Written as text: a json-c
 * object per process made a reply of thousands of processes cost tens of milliseconds of the
 * loop. */
static int counters_put_event(Manager *m, JsonBuf *b, const CounterEvent *e, const char *name, bool first) {
        int r;

        r = jsonbuf_reserve(b, 8 * COUNTERS_FIELD_MAX + (name ? JSON_STRING_MAX_LEN(strlen(name)) : 0));
        if (r < 0)
                return r;
        jsonbuf_put(b, first ? "{" : ",{", first ? 1 : 2);
        if (name) {
                jsonbuf_put(b, "\"name\":", 7);
                json_put_string(b, name, strlen(name));
                jsonbuf_putc(b, ',');
        }
        counters_put_u64(b, "\"id\":", e->id);
        counters_put_u64(b, ",\"records\":", e->records);
        counters_put_u64(b, ",\"lost\":", e->lost);
        jsonbuf_put(b, ",\"processes\":[", 14);
        for (uint16_t i = 0; i < e->n_pids; i++) {
                const char *comm = comm_cache_lookup(m->comm, e->pids[i].pid, 0);
                char safe[64];
                size_t k = 0;

                r = jsonbuf_reserve(b, 4 * COUNTERS_FIELD_MAX + JSON_STRING_MAX_LEN(sizeof(safe)));
                if (r < 0)
                        return r;
                counters_put_u64(b, i == 0 ? "{\"pid\":" : ",{\"pid\":", (uint64_t) e->pids[i].pid);
                if (comm) {
                        /* A task names itself: bytes that are not printable ASCII become '?'. */
                        for (; comm[k] && k + 1 < sizeof(safe); k++)
                                safe[k] = comm[k] >= ' ' && comm[k] < 0x7f ? comm[k] : '?';
                        safe[k] = 0;
                        jsonbuf_put(b, ",\"comm\":", 8);
                        json_put_string(b, safe, k);
                }
                counters_put_u64(b, ",\"records\":", e->pids[i].records);
                counters_put_u64(b, ",\"lost\":", e->pids[i].lost);
                jsonbuf_putc(b, '}');
        }
        r = jsonbuf_reserve(b, 3 * COUNTERS_FIELD_MAX);
        if (r < 0)
                return r;
        counters_put_u64(b, "],\"other_records\":", e->other_records);
        counters_put_u64(b, ",\"other_lost\":", e->other_lost);
        jsonbuf_putc(b, '}');
        return 0;
}

/* Builds a GetCounters reply, serialized as a whole Varlink message (its NUL included). */
static int counters_build(Manager *m, char **ret, size_t *ret_len) {
        _cleanup_(jsonbuf_done) JsonBuf b = {};
        TracingEvent *const *events;
        uint64_t overrun, dropped;
        bool first = true;
        size_t n;
        int r;

        manager_counting_kernel_losses(m, &overrun, &dropped);
        r = jsonbuf_reserve(&b, 4 * COUNTERS_FIELD_MAX);
        if (r < 0)
                return r;
        counters_put_u64(&b, "{\"parameters\":{\"usec\":", now_usec(CLOCK_MONOTONIC));
        counters_put_u64(&b, ",\"since_usec\":", m->counting_usec);
        jsonbuf_put(&b, ",\"events\":[", 11);
        for (size_t i = 0; i < m->counters->n_events; i++, first = false) {
                const CounterEvent *e = &m->counters->events[i];

                /* Its records were decoded: the decoder's plan for it, and its name, exist. */
                r = counters_put_event(m, &b, e, decoder_event_name(m->decoder, e->id), first);
                if (r < 0)
                        return r;
        }
        /* Enabled events that wrote nothing yet are shown too: silent is worth seeing. They are
         * named from tracefs: the decoder would build a plan for each to name it (20 ms for the
         * first reply with 1,024 events enabled). */
        events = tracing_events(m->tracing, &n);
        for (size_t i = 0; i < n; i++) {
                const TracingEvent *e = events[i];
                unsigned id;

                /* tpd's own (tracing_event_hidden()): no stream gets its records. */
                if (!e->enabled || !e->format || e->format->id < 0 || tracing_event_hidden(e))
                        continue;
                id = (unsigned) e->format->id;
                if (id < m->counters->n_index && m->counters->index[id] != 0)
                        continue;
                r = counters_put_event(m, &b, &(CounterEvent){ .id = (uint16_t) id }, e->name, first);
                if (r < 0)
                        return r;
                first = false;
        }
        r = jsonbuf_reserve(&b, 5 * COUNTERS_FIELD_MAX);
        if (r < 0)
                return r;
        counters_put_u64(&b, "],\"other_records\":", m->counters->other_records);
        counters_put_u64(&b, ",\"other_lost\":", m->counters->other_lost);
        counters_put_u64(&b, ",\"overrun\":", overrun);
        counters_put_u64(&b, ",\"dropped\":", dropped);
        jsonbuf_put(&b, "}}", 3); /* and the NUL that ends a message */
        *ret_len = b.len;
        *ret = TAKE_PTR(b.data);
        return 0;
}

int status_method_get_counters(Manager *m, Peer *p, const VarlinkCall *call) {
        static const char *const keys[] = { NULL };
        uint64_t now;
        bool fresh;
        int r;

        if (check_keys(p, call, keys) < 0)
                return 0;
        now = now_usec(CLOCK_MONOTONIC);
        fresh = m->counters_reply && now < m->counters_reply_usec + STATUS_COUNTERS_REUSE_USEC;

        /* A reply built less than STATUS_COUNTERS_REUSE_USEC ago is the answer ("usec" says when it
         * was built): reading the partial pages again would count nothing it shows. */
        if (!fresh || !p->counting) {
                r = manager_counting_start(m, p);
                if (r < 0)
                        return r;
        }
        if (!fresh) {
                m->counters_reply = mfree(m->counters_reply);
                r = counters_build(m, &m->counters_reply, &m->counters_reply_len);
                if (r < 0)
                        return r;
                m->counters_reply_usec = now;
        }
        return peer_reply_text(p, m->counters_reply, m->counters_reply_len);
}
