/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Aggregate's glue (daemon/aggregating.h). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <traceevent/event-parse.h>

#include "aggregating.h"
#include "calls.h"
#include "core/selection.h"
#include "log.h"
#include "tpd-protocol.h"

#define INTERVAL_MS_MIN 100
#define INTERVAL_MS_MAX 3600000
#define DURATION_MS_MAX (24LL * INTERVAL_MS_MAX)
/* A latency's records wait this many flush intervals for the other CPUs' records before them. */
#define LATENCY_HOLD_FLUSHES 2
/* A snapshot takes at most this share (its inverse) of the loop's time. */
#define SNAPSHOT_COST_SHARE 20
/* Staged latency records at most: past this, the older half is taken in at once. */
#define STAGED_MAX (64U * 1024U)

/* Where a key, a value or a latency's key comes from: a field, or the record's task or CPU. */
typedef enum Source {
        SOURCE_NONE,
        SOURCE_FIELD,
        SOURCE_COMM,
        SOURCE_PID,
        SOURCE_CPU,
} Source;

typedef struct Getter {
        Source source;
        AggregateField field;
} Getter;

/* What the aggregation reads of one event's records. */
typedef struct EventPlan {
        unsigned id;
        bool from, to; /* of a latency */
        Getter value;  /* of a hist; a latency's key of a from, then of a to */
        Getter to_key;
        Getter by;
} EventPlan;

/* A latency's record waiting for the time order across CPUs. */
typedef struct Staged {
        uint64_t ts;
        uint64_t key;
        int32_t group; /* of a start; -1 for an end */
} Staged;

struct Aggregation {
        Manager *manager;
        Peer *peer;
        AggregateKind kind;
        Aggregate agg;
        char *field, *by, *key[2], *event[2];
        bool has_linear;
        int64_t linear[3];
        uint64_t interval_ms, duration_ms;
        EventPlan *plans;
        size_t n_plans;
        Staged *staged;
        size_t n_staged, staged_cap;
        uint64_t start_ts, end_ts; /* end_ts 0: none */
        uint64_t snapshot_ts;
        uint64_t lost;
        uint64_t cost_usec; /* of the last snapshot */
        uint64_t skipped;   /* snapshots not sent: the client had not read the one before */
        sd_event_source *timer;
        bool done;
};

Aggregation *aggregation_free(Aggregation *a) {
        if (!a)
                return NULL;
        sd_event_source_disable_unref(a->timer);
        aggregate_done(&a->agg);
        free(a->field);
        free(a->by);
        for (size_t i = 0; i < 2; i++) {
                free(a->key[i]);
                free(a->event[i]);
        }
        free(a->plans);
        free(a->staged);
        free(a);
        return NULL;
}

static int parse_error(Peer *peer, const char *key, const char *message) {
        return peer_errorf(peer, VARLINK_ERROR_INVALID_PARAMETER, "parameter", key, "%s", message) < 0
                       ? -ENOMEM
                       : 1;
}

static int parse_linear(const VarlinkCall *call, Aggregation *a) {
        static const char *const names[] = { "min", "max", "step" };
        json_object *v, *f;

        if (!json_object_object_get_ex(call->parameters, "linear", &v) || !v)
                return 0;
        if (!json_object_is_type(v, json_type_object) || json_object_object_length(v) != 3)
                return 1;
        for (size_t i = 0; i < 3; i++) {
                if (!json_object_object_get_ex(v, names[i], &f) || !json_object_is_type(f, json_type_int))
                        return 1;
                errno = 0;
                a->linear[i] = json_object_get_int64(f);
                if (errno != 0)
                        return 1;
        }
        a->has_linear = true;
        return !aggregate_check_linear(a->linear[0], a->linear[1], a->linear[2]);
}

/* Aggregate's own parameters; the selection's are Stream's (streams.c). */
typedef struct AggregateParams {
        const char *kind, *field, *by;
        char **key, **events;
        size_t n_key, n_events;
        int64_t interval_ms, duration_ms;
} AggregateParams;

#define PARAM(f) offsetof(AggregateParams, f)

static const CallParam aggregate_params[] = {
        { "kind", CALL_PARAM_STRING, PARAM(kind), 0, 16 },
        { "field", CALL_PARAM_STRING, PARAM(field), 0, DECODER_NAME_MAX },
        { "by", CALL_PARAM_STRING, PARAM(by), 0, DECODER_NAME_MAX },
        { "key", CALL_PARAM_STRINGS, PARAM(key), PARAM(n_key), 2 },
        { "events", CALL_PARAM_STRINGS, PARAM(events), PARAM(n_events), API_EVENTS_MAX },
        { "interval_ms", CALL_PARAM_INT, PARAM(interval_ms), 0, 0, INTERVAL_MS_MIN, INTERVAL_MS_MAX },
        { "duration_ms", CALL_PARAM_INT, PARAM(duration_ms), 0, 0, 1, DURATION_MS_MAX },
};

static void aggregate_params_done(AggregateParams *p) {
        free(p->key);
        free(p->events);
}

int aggregation_parse(Manager *m, Peer *peer, const VarlinkCall *call, Aggregation **ret) {
        _cleanup_(aggregation_freep) Aggregation *a = calloc(1, sizeof(Aggregation));
        _cleanup_(aggregate_params_done) AggregateParams p = { .interval_ms = 1000 };
        int r;

        if (!a)
                return -ENOMEM;
        r = call_params_parse(m, peer, call, aggregate_params, ELEMENTSOF(aggregate_params), &p);
        if (r != 0)
                return r;
        if (!p.kind || aggregate_kind_from_string(p.kind, &a->kind) < 0)
                return parse_error(peer, "kind", "\"kind\" is \"hist\", \"count\" or \"latency\".");
        if ((a->kind == AGGREGATE_HIST) != !!p.field)
                return parse_error(peer, "field",
                                   a->kind == AGGREGATE_HIST
                                           ? "A hist needs the \"field\" whose values it counts."
                                           : "Only a hist takes a \"field\".");
        if (parse_linear(call, a) || (a->has_linear && a->kind == AGGREGATE_COUNT))
                return parse_error(
                        peer, "linear",
                        "\"linear\" is {min, max, step} with min < max, step > 0 and at most 1024 "
                        "steps, for a hist or a latency.");
        if (a->kind == AGGREGATE_LATENCY) {
                if (p.n_key != 2)
                        return parse_error(peer, "key",
                                           "A latency's \"key\" is two fields: of the first event's record, "
                                           "and of the second's that must equal it.");
                if (p.n_events != 2 || strpbrk(p.events[0], "*?[") || strpbrk(p.events[1], "*?["))
                        return parse_error(peer, "events",
                                           "A latency names two events, without patterns: from, then to.");
                for (size_t i = 0; i < 2; i++) {
                        a->key[i] = strdup(p.key[i]);
                        a->event[i] = strdup(p.events[i]);
                        if (!a->key[i] || !a->event[i])
                                return -ENOMEM;
                }
        } else if (p.key)
                return parse_error(peer, "key", "Only a latency takes a \"key\".");

        if ((p.field && !(a->field = strdup(p.field))) || (p.by && !(a->by = strdup(p.by))))
                return -ENOMEM;
        a->interval_ms = (uint64_t) p.interval_ms;
        a->duration_ms = (uint64_t) p.duration_ms;
        if (aggregate_init(&a->agg, a->kind, a->has_linear ? a->linear : NULL) < 0)
                return -ENOMEM;
        *ret = TAKE_PTR(a);
        return 0;
}

/* A field of the event's format (common ones too: common_pid), else comm, pid or cpu (only with
 * pseudo), which the record itself gives. -ENOENT when none; -EINVAL for a field of no use. */
static int getter_bind(Getter *g, const TracingEvent *e, const char *name, bool pseudo) {
        const struct tep_format_field *f = tep_find_any_field(e->format, name);

        if (f)
                return aggregate_field(f, &g->field) < 0 ? -EINVAL : (g->source = SOURCE_FIELD, 0);
        if (!pseudo)
                return -ENOENT;
        if (streq(name, "comm"))
                g->source = SOURCE_COMM;
        else if (streq(name, "pid"))
                g->source = SOURCE_PID;
        else if (streq(name, "cpu"))
                g->source = SOURCE_CPU;
        else
                return -ENOENT;
        return 0;
}

static int bind_error(Peer *peer, const char *key, const char *name, const TracingEvent *e, int r) {
        return peer_errorf(peer, VARLINK_ERROR_INVALID_PARAMETER, "parameter", key,
                           r == -EINVAL ? "'%s' of '%s' is neither an integer nor a string."
                                        : "'%s' is no field of '%s'%s.",
                           name, e->name, r == -EINVAL ? "" : " (nor comm, pid or cpu)") < 0
                       ? -ENOMEM
                       : 1;
}

int aggregation_bind(Aggregation *a, Peer *peer, TracingEvent *const *events, size_t n) {
        bool from = false, to = false;

        a->plans = calloc(n + 1, sizeof(EventPlan));
        if (!a->plans)
                return -ENOMEM;
        for (size_t i = 0; i < n; i++) {
                const TracingEvent *e = events[i];
                EventPlan *p = &a->plans[a->n_plans];
                int r = 0;

                *p = (EventPlan){ .id = (unsigned) e->format->id };
                if (a->kind == AGGREGATE_LATENCY) {
                        p->from = streq(e->name, a->event[0]);
                        p->to = streq(e->name, a->event[1]);
                        if (p->from && (r = getter_bind(&p->value, e, a->key[0], true)) < 0)
                                return bind_error(peer, "key", a->key[0], e, r);
                        if (p->to && (r = getter_bind(&p->to_key, e, a->key[1], true)) < 0)
                                return bind_error(peer, "key", a->key[1], e, r);
                        /* The group is the start's. */
                        if (p->from && a->by && (r = getter_bind(&p->by, e, a->by, true)) < 0)
                                return bind_error(peer, "by", a->by, e, r);
                } else {
                        if (a->field && (r = getter_bind(&p->value, e, a->field, true)) < 0)
                                return bind_error(peer, "field", a->field, e, r);
                        if (a->field && p->value.source == SOURCE_COMM)
                                return bind_error(peer, "field", a->field, e, -EINVAL);
                        if (a->by && (r = getter_bind(&p->by, e, a->by, true)) < 0)
                                return bind_error(peer, "by", a->by, e, r);
                }
                from |= p->from;
                to |= p->to;
                a->n_plans++;
        }
        if (a->kind == AGGREGATE_LATENCY && (!from || !to))
                return parse_error(peer, "events", "A latency names its two events as system:event.");
        return 0;
}

static const EventPlan *plan_of(const Aggregation *a, unsigned id) {
        for (size_t i = 0; i < a->n_plans; i++)
                if (a->plans[i].id == id)
                        return &a->plans[i];
        return NULL;
}

/* The integer a getter reads of a record: false when it has none (a string without one). */
static bool getter_number(const Getter *g, Decoder *d, const Record *r, int64_t *ret) {
        AggregateValue v;

        switch (g->source) {
        case SOURCE_PID:
                *ret = r->pid;
                return true;
        case SOURCE_CPU:
                *ret = r->cpu;
                return true;
        case SOURCE_FIELD:
                if (aggregate_field_read(&g->field, r->raw, r->raw_size, &v) < 0)
                        return false;
                if (!v.is_string) {
                        *ret = v.number;
                        return true;
                }
                return aggregate_string_number(v.string, v.length, ret);
        default:
                (void) d;
                return false;
        }
}

/* The group of a record by the getter (one group "" without). -ENOSPC when no room is left. */
static int getter_group(Aggregation *a, const Getter *g, Decoder *d, const Record *r) {
        char buf[32];
        const char *s;
        AggregateValue v;
        int n;

        switch (g->source) {
        case SOURCE_NONE:
                return aggregate_group(&a->agg, "", 0);
        case SOURCE_COMM:
                s = decoder_comm(d, r->pid, r->ts) ?: "<...>";
                return aggregate_group(&a->agg, s, strlen(s));
        case SOURCE_FIELD:
                if (aggregate_field_read(&g->field, r->raw, r->raw_size, &v) < 0)
                        return aggregate_group(&a->agg, "", 0);
                /* A trace_marker line ends in a newline, which is no part of its text. */
                while (v.is_string && v.length > 0 && v.string[v.length - 1] == '\n')
                        v.length--;
                if (v.is_string)
                        return aggregate_group(&a->agg, v.string, v.length);
                n = snprintf(buf, sizeof(buf), "%" PRId64, v.number);
                return aggregate_group(&a->agg, buf, (size_t) n);
        default:
                n = snprintf(buf, sizeof(buf), "%" PRId64,
                             g->source == SOURCE_PID ? (int64_t) r->pid : (int64_t) r->cpu);
                return aggregate_group(&a->agg, buf, (size_t) n);
        }
}

static int stage(Aggregation *a, uint64_t ts, uint64_t key, int32_t group) {
        if (a->n_staged == a->staged_cap) {
                size_t cap = MAX(a->staged_cap * 2, (size_t) 1024);
                Staged *s = reallocarray(a->staged, cap, sizeof(Staged));

                if (!s)
                        return -ENOMEM;
                a->staged = s;
                a->staged_cap = cap;
        }
        a->staged[a->n_staged++] = (Staged){ .ts = ts, .key = key, .group = group };
        return 0;
}

static int cmp_staged(const void *x, const void *y) {
        const Staged *a = x, *b = y;

        if (a->ts != b->ts)
                return a->ts < b->ts ? -1 : 1;
        /* One record that ends and starts: the end first. */
        return (a->group >= 0) - (b->group >= 0);
}

/* Takes the staged records up to watermark in time order; the later ones wait. */
static void take_staged(Aggregation *a, uint64_t watermark) {
        size_t i;

        /* A hist or a count stages nothing: no array at all. */
        if (a->n_staged == 0)
                return;
        qsort(a->staged, a->n_staged, sizeof(Staged), cmp_staged);
        for (i = 0; i < a->n_staged && a->staged[i].ts <= watermark; i++) {
                const Staged *s = &a->staged[i];

                if (s->group < 0)
                        (void) aggregate_end(&a->agg, s->key, s->ts);
                else if (aggregate_start(&a->agg, s->key, s->ts, (size_t) s->group) < 0)
                        a->agg.pending_dropped++;
        }
        memmove(a->staged, a->staged + i, (a->n_staged - i) * sizeof(Staged));
        a->n_staged -= i;
}

static void feed_latency(Aggregation *a, const EventPlan *p, Decoder *d, const Record *r) {
        int64_t key;
        int g;

        if (a->n_staged >= STAGED_MAX)
                take_staged(a, a->staged[a->n_staged / 2].ts);
        if (p->to && getter_number(&p->to_key, d, r, &key) && stage(a, r->ts, (uint64_t) key, -1) < 0)
                a->agg.pending_dropped++;
        if (!p->from)
                return;
        if (!getter_number(&p->value, d, r, &key)) {
                a->agg.no_value++;
                return;
        }
        g = getter_group(a, &p->by, d, r);
        if (g >= 0 && stage(a, r->ts, (uint64_t) key, g) < 0)
                a->agg.pending_dropped++;
}

void aggregation_feed(Aggregation *a, Decoder *d, Stream *s, const Batch *b) {
        for (size_t i = 0; i < b->n_records && !a->done; i++) {
                const Record *r = &b->records[i];
                const EventPlan *p;
                int64_t value = 0;
                int g;

                if (r->kind != RECORD_EVENT) {
                        if (selection_has_cpu(&s->selection, r->cpu))
                                a->lost += stream_loss_share(s, r);
                        continue;
                }
                if (r->ts < a->start_ts || (a->end_ts && r->ts > a->end_ts) ||
                    !(p = plan_of(a, r->event_id)) || !selection_matches(&s->selection, d, r))
                        continue;
                if (a->kind == AGGREGATE_LATENCY) {
                        feed_latency(a, p, d, r);
                        continue;
                }
                if (a->kind == AGGREGATE_HIST && !getter_number(&p->value, d, r, &value)) {
                        a->agg.no_value++;
                        continue;
                }
                g = getter_group(a, &p->by, d, r);
                if (g >= 0)
                        aggregate_add(&a->agg, (size_t) g, value);
        }
}

static json_object *snapshot_group(const Aggregate *agg, const AggregateGroup *g, int *r) {
        json_object *o = json_object_new_object(), *buckets;

        json_set(r, o, "key", json_object_new_string(g->key));
        json_set(r, o, "count", json_object_new_int64((int64_t) MIN(g->count, (uint64_t) INT64_MAX)));
        if (!g->buckets || g->count == 0)
                return o;
        json_set(r, o, "sum", json_object_new_int64(g->sum));
        json_set(r, o, "min", json_object_new_int64(g->min));
        json_set(r, o, "max", json_object_new_int64(g->max));
        json_set(r, o, "p50", json_object_new_int64(aggregate_quantile(agg, g, 500)));
        json_set(r, o, "p90", json_object_new_int64(aggregate_quantile(agg, g, 900)));
        json_set(r, o, "p99", json_object_new_int64(aggregate_quantile(agg, g, 990)));
        buckets = json_object_new_array();
        for (size_t i = 0; i < agg->n_buckets; i++) {
                json_object *b;
                int64_t low, high;

                if (g->buckets[i] == 0)
                        continue;
                aggregate_bucket_bounds(agg, i, &low, &high);
                b = json_object_new_object();
                json_set(r, b, "low", json_object_new_int64(low));
                json_set(r, b, "high", json_object_new_int64(high));
                json_set(r, b, "count", json_object_new_int64((int64_t) g->buckets[i]));
                json_push(r, buckets, b);
        }
        json_set(r, o, "buckets", buckets);
        return o;
}

static int send_snapshot(Aggregation *a, bool final) {
        const Aggregate *agg = &a->agg;
        json_object *p = json_object_new_object(), *groups = json_object_new_array();
        int r = 0;

        json_set(&r, p, "kind", json_object_new_string(aggregate_kind_to_string(a->kind)));
        json_set(&r, p, "start", json_object_new_int64((int64_t) a->start_ts));
        json_set(&r, p, "ts", json_object_new_int64((int64_t) a->snapshot_ts));
        if (final)
                json_set(&r, p, "final", json_object_new_boolean(true));
        json_set(&r, p, "records", json_object_new_int64((int64_t) agg->records));
        json_set(&r, p, "lost", json_object_new_int64((int64_t) a->lost));
        json_set(&r, p, "keys_dropped", json_object_new_int64((int64_t) agg->keys_dropped));
        if (a->kind == AGGREGATE_LATENCY) {
                json_set(&r, p, "pending", json_object_new_int64((int64_t) (agg->n_pending + a->n_staged)));
                json_set(&r, p, "pending_dropped", json_object_new_int64((int64_t) agg->pending_dropped));
        }
        if (a->kind != AGGREGATE_COUNT)
                json_set(&r, p, "no_value", json_object_new_int64((int64_t) agg->no_value));
        for (size_t i = 0; i < agg->n_groups; i++)
                json_push(&r, groups, snapshot_group(agg, &agg->groups[i], &r));
        json_set(&r, p, "groups", groups);
        if (r < 0) {
                json_object_put(p);
                return r;
        }
        return final ? peer_reply(a->peer, p) : peer_reply_more(a->peer, p);
}

/* When the next snapshot is due: every interval, and before the end of a duration in time for
 * the last; but a snapshot never takes tpd more than a twentieth of the time between two (a
 * thousand groups of many buckets take milliseconds to write). */
static uint64_t next_usec(const Aggregation *a, uint64_t now) {
        uint64_t next = MAX(a->interval_ms * 1000, SNAPSHOT_COST_SHARE * a->cost_usec);

        if (a->end_ts) /* and 10 ms for the writers */
                next = MIN(next, (a->end_ts > now ? (a->end_ts - now) / 1000 : 0) + 10000);
        return next;
}

static int on_timer(sd_event_source *s, uint64_t usec, void *userdata) {
        Aggregation *a = userdata;
        Manager *m = a->manager;
        uint64_t now = manager_trace_clock_now_ns(m), hold;
        bool final = a->end_ts && now >= a->end_ts;
        int r;

        (void) usec;
        if (final) {
                /* Everything written up to the end is in the buffers now: read it all, and take
                 * what the workers still hold. */
                manager_read_all(m);
                manager_sync_decoding(m);
                a->snapshot_ts = a->end_ts;
        } else {
                hold = (uint64_t) LATENCY_HOLD_FLUSHES * m->config.flush_interval_ms * 1000000ULL;
                a->snapshot_ts = a->kind == AGGREGATE_LATENCY && now > a->start_ts + hold ? now - hold
                                 : a->kind == AGGREGATE_LATENCY                           ? a->start_ts
                                                                                          : now;
        }
        take_staged(a, a->snapshot_ts);
        /* A client that has not read the last snapshot gets the next one once it has: they are
         * cumulative, so none is missed, and tpd holds one at most for a stopped reader. */
        if (final || queue_is_empty(&a->peer->out)) {
                uint64_t begin = now_usec(CLOCK_MONOTONIC);

                r = send_snapshot(a, final);
                if (r < 0) {
                        a->done = true;
                        return sd_event_source_set_enabled(s, SD_EVENT_OFF);
                }
                a->cost_usec = now_usec(CLOCK_MONOTONIC) - begin;
                /* A write that fails ends the connection: the peer, and this aggregation, are gone. */
                if (peer_flush(a->peer) < 0)
                        return 0;
        } else
                a->skipped++;
        if (final) {
                a->done = true;
                return sd_event_source_set_enabled(s, SD_EVENT_OFF);
        }
        return loop_rearm(s, next_usec(a, now));
}

int aggregation_start(Aggregation *a, Manager *m, Peer *peer) {
        uint64_t first = a->interval_ms * 1000;
        int r;

        a->manager = m;
        a->peer = peer;
        a->start_ts = a->snapshot_ts = manager_trace_clock_now_ns(m);
        if (a->duration_ms > 0) {
                a->end_ts = a->start_ts + a->duration_ms * 1000000ULL;
                first = MIN(first, a->duration_ms * 1000 + 10000);
        }
        r = sd_event_add_time_relative(m->event, &a->timer, CLOCK_MONOTONIC, first, 1000, on_timer, a);
        if (r < 0)
                return r;
        return send_snapshot(a, false);
}
