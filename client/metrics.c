/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The names follow Prometheus' conventions: a "tpd_" prefix, base units (bytes, seconds), counters
 * ending in "_total", one family per quantity with labels (cpu, cause, uid, event) rather than one
 * name per value. Every number comes from one GetStatus reply, so a scrape is one consistent view.
 */

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "connection.h"
#include "loss.h"
#include "message.h"
#include "metrics.h"
#include "output.h"
#include "tpd-protocol.h"
#include "util.h"

typedef enum FamilyType {
        GAUGE,
        COUNTER, /* samples end in "_total" */
        INFO,    /* samples end in "_info", always 1; a gauge to Prometheus' format */
} FamilyType;

typedef struct Family {
        const char *name; /* without the suffix of its type */
        FamilyType type;
        const char *help;
} Family;

typedef struct Writer {
        FILE *f;
        json_object *json; /* with --json: the samples, instead of text to f */
        bool openmetrics;
        const Family *family;
} Writer;

static size_t array_length(json_object *a) {
        return json_object_is_type(a, json_type_array) ? json_object_array_length(a) : 0;
}

static const char *family_suffix(const Family *family) {
        return family->type == COUNTER ? "_total" : family->type == INFO ? "_info" : "";
}

static void family_begin(Writer *w, const Family *family) {
        /* Prometheus' own format names the samples in TYPE and HELP; OpenMetrics names the family,
         * whose samples add the suffix of its type. */
        const char *suffix = w->openmetrics ? "" : family_suffix(family);
        const char *type = family->type == COUNTER                  ? "counter"
                           : family->type == INFO && w->openmetrics ? "info"
                                                                    : "gauge";

        w->family = family;
        if (w->json)
                return;
        fprintf(w->f, "# HELP %s%s %s\n", family->name, suffix, family->help);
        fprintf(w->f, "# TYPE %s%s %s\n", family->name, suffix, type);
}

/* A label value with \, " and newline escaped, as both formats want. */
static void label_value(FILE *f, const char *s) {
        for (; *s; s++) {
                if (*s == '\\' || *s == '"')
                        fputc('\\', f);
                if (*s == '\n')
                        fputs("\\n", f);
                else
                        fputc(*s, f);
        }
}

static int64_t ten_to(unsigned decimals) {
        int64_t p = 1;

        while (decimals-- > 0)
                p *= 10;
        return p;
}

/* value / 10^decimals in decimal, without going through a float (a double would print 0.1 as
 * 0.1000000000000000055…). */
static void fixed_point(char *buf, size_t size, int64_t value, unsigned decimals) {
        int64_t p = ten_to(decimals);

        snprintf(buf, size, "%" PRId64 ".%0*" PRId64, value / p, (int) decimals, value % p);
}

/* A sample as JSON: {"name":…,"labels":{…},"value":…}; decimals > 0: value is 10^-decimals, shown as
 * seconds. Returns the labels object to fill, or NULL when out of memory. */
static json_object *sample_json(Writer *w, int64_t value, unsigned decimals) {
        _cleanup_free_ char *name = NULL;
        json_object *o = json_object_new_object(), *labels = json_object_new_object();

        if (asprintf(&name, "%s%s", w->family->name, family_suffix(w->family)) < 0)
                name = NULL;
        if (!o || !labels || !name || json_object_array_add(w->json, o) < 0) {
                json_object_put(o);
                json_object_put(labels);
                return NULL;
        }
        json_object_object_add(o, "name", json_object_new_string(name));
        json_object_object_add(o, "labels", labels);
        if (decimals > 0) {
                char text[48]; /* as the text formats write it, not as the nearest double prints */

                fixed_point(text, sizeof(text), value, decimals);
                json_object_object_add(o, "value",
                                       json_object_new_double_s((double) value / ten_to(decimals), text));
        } else
                json_object_object_add(o, "value", json_object_new_int64(value));
        return labels;
}

/* One sample of the current family; labels are name/value pairs, NULL-terminated. */
static void sample_ext(Writer *w, int64_t value, unsigned decimals, va_list ap) {
        const char *name;
        bool first = true;

        if (w->json) {
                json_object *labels = sample_json(w, value, decimals);

                while (labels && (name = va_arg(ap, const char *)))
                        json_object_object_add(labels, name,
                                               json_object_new_string(va_arg(ap, const char *)));
                return;
        }

        fprintf(w->f, "%s%s", w->family->name, family_suffix(w->family));
        while ((name = va_arg(ap, const char *))) {
                fprintf(w->f, "%s%s=\"", first ? "{" : ",", name);
                label_value(w->f, va_arg(ap, const char *));
                fputc('"', w->f);
                first = false;
        }
        fputs(first ? "" : "}", w->f);
        if (decimals > 0) {
                char text[48];

                fixed_point(text, sizeof(text), value, decimals);
                fprintf(w->f, " %s\n", text);
        } else
                fprintf(w->f, " %" PRId64 "\n", value);
}

static void sample(Writer *w, int64_t value, ...) {
        va_list ap;

        va_start(ap, value);
        sample_ext(w, value, 0, ap);
        va_end(ap);
}

/* A sample of seconds, given in 10^-decimals of a second (3: milliseconds, 6: microseconds). */
static void sample_seconds(Writer *w, int64_t value, unsigned decimals, ...) {
        va_list ap;

        va_start(ap, decimals);
        sample_ext(w, value, decimals, ap);
        va_end(ap);
}

enum {
        F_INFO,
        F_BUFFER,
        F_FLUSH,
        F_ONLINE,
        F_ENTRIES,
        F_WRITTEN,
        F_READ,
        F_OVERRUN,
        F_DROPPED,
        F_RECORDS,
        F_DELIVERED,
        F_LOST,
        F_BAD_PAGES,
        F_CONNECTIONS,
        F_STREAMS,
        F_STREAM_DELIVERED,
        F_STREAM_LOST,
        F_EVENTS,
        F_EVENT_PINNED,
        F_EVENT_STREAMS,
        F_STATE_SAVES,
        F_STATE_FAILING,
        F_LOOP_MAX,
        F_LOOP_SLOW,
};

static const Family families[] = {
        [F_INFO] = { "tpd", INFO, "tpd's version, tracefs instance and trace clock (always 1)." },
        [F_BUFFER] = { "tpd_buffer_size_bytes", GAUGE, "Ring buffer size of each CPU." },
        [F_FLUSH] = { "tpd_flush_interval_seconds", GAUGE, "Partial pages are delivered after this long." },
        [F_ONLINE] = { "tpd_cpu_online", GAUGE, "Whether the CPU is online (1) and read." },
        [F_ENTRIES] = { "tpd_kernel_entries", GAUGE, "Records in the CPU's ring buffer, not yet read." },
        [F_WRITTEN] = { "tpd_kernel_written", COUNTER,
                        "Records the kernel wrote into the CPU's ring buffer." },
        [F_READ] = { "tpd_kernel_read", COUNTER, "Records tpd read out of the CPU's ring buffer." },
        [F_OVERRUN] = { "tpd_kernel_overrun", COUNTER,
                        "Records the kernel overwrote before tpd read them." },
        [F_DROPPED] = { "tpd_kernel_dropped", COUNTER,
                        "Records the kernel dropped because the buffer was full." },
        [F_RECORDS] = { "tpd_records", COUNTER,
                        "Records tpd decoded (once, however many streams got them)." },
        [F_DELIVERED] = { "tpd_delivered", COUNTER,
                          "Records delivered to streams (a record counts once per stream)." },
        [F_LOST] = { "tpd_lost", COUNTER, "Records streams did not get, by cause." },
        [F_BAD_PAGES] = { "tpd_undecoded_pages", COUNTER, "Ring-buffer pages tpd could not decode." },
        [F_CONNECTIONS] = { "tpd_connections", GAUGE, "Open client connections, by uid." },
        [F_STREAMS] = { "tpd_streams", GAUGE, "Running streams, by uid." },
        [F_STREAM_DELIVERED] = { "tpd_stream_delivered", COUNTER, "Records delivered to the stream." },
        [F_STREAM_LOST] = { "tpd_stream_lost", COUNTER,
                            "Records the stream lost because it read too slowly." },
        [F_EVENTS] = { "tpd_events_enabled", GAUGE, "Events tpd holds enabled." },
        [F_EVENT_PINNED] = { "tpd_event_pinned", GAUGE, "Whether the event is pinned (tpctl enable)." },
        [F_EVENT_STREAMS] = { "tpd_event_streams", GAUGE, "Streams that hold the event enabled." },
        [F_STATE_SAVES] = { "tpd_state_saves", COUNTER, "Writes of the state file (pins)." },
        [F_STATE_FAILING] = { "tpd_state_save_failing", GAUGE,
                              "Whether saving the state file fails (1) now." },
        [F_LOOP_MAX] = { "tpd_loop_dispatch_max_seconds", GAUGE,
                         "The longest any client waited for tpd's loop since start (its longest "
                         "dispatch)." },
        [F_LOOP_SLOW] = { "tpd_loop_slow_dispatches", COUNTER, "Dispatches of tpd's loop over 10 ms." },
};

/* Counts by uid of the connections, or of those streaming, in the order uids first appear. */
static int by_uid(Writer *w, json_object *connections, bool streaming) {
        size_t n = array_length(connections), n_uids = 0;
        _cleanup_free_ int64_t *uids = calloc(n + 1, sizeof(int64_t));
        _cleanup_free_ int64_t *counts = calloc(n + 1, sizeof(int64_t));

        if (!uids || !counts)
                return -ENOMEM;
        for (size_t i = 0; i < n; i++) {
                json_object *c = json_object_array_get_idx(connections, i);
                int64_t uid = reply_int(c, "uid", NULL);
                size_t k;

                if (streaming && !json_object_get_boolean(json_object_object_get(c, "streaming")))
                        continue;
                for (k = 0; k < n_uids && uids[k] != uid; k++)
                        ;
                if (k == n_uids)
                        uids[n_uids++] = uid;
                counts[k]++;
        }
        for (size_t k = 0; k < n_uids; k++) {
                char uid[24];

                snprintf(uid, sizeof(uid), "%" PRId64, uids[k]);
                sample(w, counts[k], "uid", uid, NULL);
        }
        return 0;
}

int metrics_write(FILE *f, json_object *st, bool openmetrics, json_object *json) {
        Writer w = { .f = f, .json = json, .openmetrics = openmetrics };
        json_object *cpus = json_object_object_get(st, "cpus");
        json_object *events = json_object_object_get(st, "events");
        json_object *loop = json_object_object_get(st, "loop");
        json_object *lost = json_object_object_get(st, "lost");
        json_object *connections = json_object_object_get(st, "connections");
        static const struct {
                int family;
                const char *key;
        } per_cpu[] = {
                { F_ONLINE, "online" }, { F_ENTRIES, "entries" }, { F_WRITTEN, "written" },
                { F_READ, "read" },     { F_OVERRUN, "overrun" }, { F_DROPPED, "dropped" },
        };
        /* The causes GetStatus counts under their names ("decode" as decode_pages, below). */
        static const int causes[] = { TPD_LOST_OVERRUN, TPD_LOST_CLIENT, TPD_LOST_UNKNOWN,
                                      TPD_LOST_DROPPED };
        int r;

        family_begin(&w, &families[F_INFO]);
        sample(&w, 1, "version", json_object_get_string(json_object_object_get(st, "version")) ?: "",
               "instance", json_object_get_string(json_object_object_get(st, "instance")) ?: "", "clock",
               json_object_get_string(json_object_object_get(st, "clock")) ?: "", NULL);
        family_begin(&w, &families[F_BUFFER]);
        sample(&w, reply_int(st, "buffer_size_kb", NULL) * 1024, NULL);
        family_begin(&w, &families[F_FLUSH]);
        sample_seconds(&w, reply_int(st, "flush_interval_ms", NULL), 3, NULL);

        for (size_t k = 0; k < ELEMENTSOF(per_cpu); k++) {
                family_begin(&w, &families[per_cpu[k].family]);
                for (size_t i = 0; i < array_length(cpus); i++) {
                        json_object *c = json_object_array_get_idx(cpus, i);
                        json_object *v = json_object_object_get(c, per_cpu[k].key);
                        char cpu[24];

                        snprintf(cpu, sizeof(cpu), "%" PRId64, reply_int(c, "cpu", NULL));
                        sample(&w,
                               json_object_is_type(v, json_type_boolean)
                                       ? json_object_get_boolean(v)
                                       : reply_int(c, per_cpu[k].key, NULL),
                               "cpu", cpu, NULL);
                }
        }

        family_begin(&w, &families[F_RECORDS]);
        sample(&w, reply_int(st, "records", NULL), NULL);
        family_begin(&w, &families[F_DELIVERED]);
        sample(&w, reply_int(st, "delivered", NULL), NULL);
        family_begin(&w, &families[F_LOST]);
        for (size_t k = 0; k < ELEMENTSOF(causes); k++)
                sample(&w, reply_int(lost, tpd_lost_cause_name(causes[k]), NULL), "cause",
                       tpd_lost_cause_name(causes[k]), NULL);
        family_begin(&w, &families[F_BAD_PAGES]);
        sample(&w, reply_int(lost, "decode_pages", NULL), NULL);

        family_begin(&w, &families[F_CONNECTIONS]);
        r = by_uid(&w, connections, false);
        if (r < 0)
                return r;
        family_begin(&w, &families[F_STREAMS]);
        r = by_uid(&w, connections, true);
        if (r < 0)
                return r;

        /* Each stream by its client's uid and pid: a stream is one connection, at most MaxStreams. */
        for (int k = F_STREAM_DELIVERED; k <= F_STREAM_LOST; k++) {
                family_begin(&w, &families[k]);
                for (size_t i = 0; i < array_length(connections); i++) {
                        json_object *c = json_object_array_get_idx(connections, i);
                        char uid[24], pid[24];

                        if (!json_object_get_boolean(json_object_object_get(c, "streaming")))
                                continue;
                        snprintf(uid, sizeof(uid), "%" PRId64, reply_int(c, "uid", NULL));
                        snprintf(pid, sizeof(pid), "%" PRId64, reply_int(c, "pid", NULL));
                        if (k == F_STREAM_DELIVERED)
                                sample(&w, reply_int(c, "delivered", NULL), "uid", uid, "pid", pid, NULL);
                        else
                                sample(&w, reply_int(c, "lost_client", NULL), "uid", uid, "pid", pid,
                                       "cause", "client", NULL);
                }
        }

        family_begin(&w, &families[F_EVENTS]);
        sample(&w, (int64_t) array_length(events), NULL);
        family_begin(&w, &families[F_EVENT_PINNED]);
        for (size_t i = 0; i < array_length(events); i++) {
                json_object *e = json_object_array_get_idx(events, i);

                sample(&w, json_object_get_boolean(json_object_object_get(e, "pinned")), "event",
                       json_object_get_string(json_object_object_get(e, "name")) ?: "", NULL);
        }
        family_begin(&w, &families[F_EVENT_STREAMS]);
        for (size_t i = 0; i < array_length(events); i++) {
                json_object *e = json_object_array_get_idx(events, i);

                sample(&w, reply_int(e, "streams", NULL), "event",
                       json_object_get_string(json_object_object_get(e, "name")) ?: "", NULL);
        }

        family_begin(&w, &families[F_STATE_SAVES]);
        sample(&w, reply_int(st, "state_saves", NULL), NULL);
        family_begin(&w, &families[F_STATE_FAILING]);
        sample(&w, json_object_object_get(st, "state_error") ? 1 : 0, NULL);
        family_begin(&w, &families[F_LOOP_MAX]);
        sample_seconds(&w, reply_int(loop, "max_usec", NULL), 6, NULL);
        family_begin(&w, &families[F_LOOP_SLOW]);
        sample(&w, reply_int(loop, "slow", NULL), NULL);

        if (openmetrics && !json)
                fputs("# EOF\n", f);
        return 0;
}

static bool opt_openmetrics;

static const OptionSpec metrics_specs[] = {
        { "openmetrics", 0, no_argument, 0 },
};

static int metrics_parse_option(const OptionSpec *spec, const char *arg) {
        opt_openmetrics = true;
        return 0;
}

const OptionTable metrics_option_table = OPTION_TABLE(metrics_specs, metrics_parse_option);

int metrics_verb(const CommonOptions *c, char **args, size_t n) {
        _cleanup_(connection_done) Connection conn = CONNECTION_NULL;
        _cleanup_(varlink_reply_done) VarlinkReply reply = {};
        json_object *samples = NULL;
        int r;

        if (c->json != JSON_OFF && opt_openmetrics)
                return usage_error("--openmetrics and --json exclude each other");
        if (c->json != JSON_OFF && !(samples = json_object_new_array()))
                return connection_exit_status(log_oom());

        r = connection_call(&conn, c->socket_path, TPD_METHOD("GetStatus"), json_object_new_object(), false,
                            &reply);
        if (r == 0 && metrics_write(stdout, reply.parameters, opt_openmetrics, samples) < 0)
                r = log_oom();
        if (r == 0 && samples)
                print_json_as(samples, c->json == JSON_PRETTY);
        json_object_put(samples);
        return connection_exit_status(r);
}
