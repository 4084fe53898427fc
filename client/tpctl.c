/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * tpctl, the command-line client of tpd. Each command is one Varlink call on a fresh connection;
 * `stream` upgrades its connection and then copies the daemon's NDJSON to stdout without parsing it.
 */

#include <getopt.h>
#include <json-c/json.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "build-config.h"
#include "connection.h"
#include "copy.h"
#include "core/clock.h"
#include "export.h"
#include "lines.h"
#include "log.h"
#include "metrics.h"
#include "output.h"
#include "record.h"
#include "replay.h"
#include "terminal.h"
#include "top.h"
#include "tpd-protocol.h"

static inline void json_object_putp(json_object **j) {
        json_object_put(*j);
}

static int json_add_strings(json_object *o, const char *key, char *const *a, size_t n, char *const *b,
                            size_t m) {
        json_object *array = json_object_new_array_ext((int) (n + m));
        int r = json_add(o, key, array);

        for (size_t i = 0; r >= 0 && i < n + m; i++) {
                json_object *s = json_object_new_string(i < n ? a[i] : b[i - n]);

                if (!s || json_object_array_add(array, s) < 0) {
                        json_object_put(s);
                        r = -ENOMEM;
                }
        }
        return r;
}

static int json_add_ints(json_object *o, const char *key, const int *v, size_t n) {
        json_object *array = json_object_new_array_ext((int) n);
        int r = json_add(o, key, array);

        for (size_t i = 0; r >= 0 && i < n; i++) {
                json_object *j = json_object_new_int(v[i]);

                if (!j || json_object_array_add(array, j) < 0) {
                        json_object_put(j);
                        r = -ENOMEM;
                }
        }
        return r;
}

/* --json=MODE, as systemd's tools take it: off is text. */
typedef enum JsonMode {
        JSON_OFF,
        JSON_SHORT,
        JSON_PRETTY,
} JsonMode;

typedef struct Args {
        const char *socket_path;
        JsonMode json;
        bool no_pager;
        bool openmetrics;
        bool all;
        bool print;
        int symbolic;           /* -1: tpd's default (Symbolic=) */
        uint64_t count;         /* stream: stop after this many records */
        uint64_t duration_usec; /* stream: stop after this long */
        LinesTime time;
        bool ordered;
        uint64_t order_delay_ms; /* 0: from tpd's flush interval */
        const char *filter;
        unsigned options; /* Option bits given, to check them against the command */
        char **events;
        size_t n_events;
        int *pids;
        size_t n_pids;
        int *cpus;
        size_t n_cpus;
        RecordOptions record;
        const char *format;
        uint64_t iterations;
        uint64_t delay_usec;
        TopSort sort;
        ExportOptions export;
} Args;

static void args_done(Args *a) {
        free(a->events);
        free(a->pids);
        free(a->cpus);
}

/* Options that only some commands take, as bits of Args.options and Verb.options. */
enum {
        OPT_FILTER = 1 << 0,
        OPT_ALL = 1 << 1,
        OPT_EVENT = 1 << 2,
        OPT_PID = 1 << 3,
        OPT_CPU = 1 << 4,
        OPT_PRINT = 1 << 5,
        OPT_RECORD = 1 << 6,
        OPT_OPENMETRICS = 1 << 7,
        OPT_ITERATIONS = 1 << 8,
        OPT_DELAY = 1 << 9,
        OPT_SORT = 1 << 10,
        OPT_SUBJECT_PREFIX = 1 << 11,
        OPT_BUFFER_SIZE = 1 << 12,
        OPT_BATCH_SIZE = 1 << 13,
        OPT_CREDS = 1 << 14,
        OPT_TLS_CA = 1 << 15,
        OPT_CREATE_STREAM = 1 << 16,
        OPT_REPLICAS = 1 << 17,
        OPT_STREAM = 1 << 18,
        OPT_SYMBOLIC = 1 << 19,
        OPT_COUNT = 1 << 20,
        OPT_DURATION = 1 << 21,
        OPT_TIME = 1 << 22,
        OPT_ORDERED = 1 << 23,
        OPT_SERVERS_FILE = 1 << 24,
};

static const char *const option_names[] = {
        "--filter",
        "--all",
        "--event",
        "--pid",
        "--cpu",
        "--print",
        "--output, --size, --format, --rotate-*, --keep, --file-version, --no-kallsyms, --force",
        "--openmetrics",
        "--iterations",
        "--delay",
        "--sort",
        "--subject-prefix",
        "--buffer-size",
        "--batch-size",
        "--creds",
        "--tls-ca",
        "--create-stream",
        "--replicas",
        "--stream",
        "--symbolic",
        "--count",
        "--duration",
        "--time",
        "--ordered",
        "--servers-file",
};

/* Sends method with params (taken over) and prints the reply: as JSON with --json, else with print
 * (if any). A long reply (paged) goes through the pager on a terminal, as systemctl's lists do. */
static int run_call_paged(const Args *a, const char *method, json_object *params,
                          void (*print)(json_object *), bool paged) {
        _cleanup_(connection_done) Connection c = CONNECTION_NULL;
        _cleanup_(varlink_reply_done) VarlinkReply reply = {};
        int r;

        r = connection_call(&c, a->socket_path, method, params, false, &reply);
        if (r != 0)
                return connection_exit_status(r);
        if (paged && (a->json != JSON_OFF || print))
                (void) pager_open(a->no_pager);
        if (a->json != JSON_OFF)
                print_json_as(reply.parameters, a->json == JSON_PRETTY);
        else if (print)
                print(reply.parameters);
        return EXIT_SUCCESS;
}

static int run_call(const Args *a, const char *method, json_object *params, void (*print)(json_object *)) {
        return run_call_paged(a, method, params, print, false);
}

static int verb_list(const Args *a, char **args, size_t n) {
        _cleanup_(json_object_putp) json_object *params = json_object_new_object();

        if (!params || (n > 0 && json_add(params, "pattern", json_object_new_string(args[0])) < 0))
                return connection_exit_status(log_oom());
        return run_call_paged(a, TPD_METHOD("ListEvents"), TAKE_PTR(params), print_list, true);
}

static int verb_describe(const Args *a, char **args, size_t n) {
        _cleanup_(json_object_putp) json_object *params = json_object_new_object();

        if (!params || json_add(params, "event", json_object_new_string(args[0])) < 0)
                return connection_exit_status(log_oom());
        return run_call(a, TPD_METHOD("DescribeEvent"), TAKE_PTR(params), print_describe);
}

static int verb_enable(const Args *a, char **args, size_t n) {
        _cleanup_(json_object_putp) json_object *params = json_object_new_object();

        if (!params || json_add_strings(params, "events", args, n, NULL, 0) < 0 ||
            (a->filter && json_add(params, "filter", json_object_new_string(a->filter)) < 0))
                return connection_exit_status(log_oom());
        return run_call(a, TPD_METHOD("Enable"), TAKE_PTR(params), NULL);
}

static int verb_disable(const Args *a, char **args, size_t n) {
        _cleanup_(json_object_putp) json_object *params = json_object_new_object();

        if (n == 0 && !a->all)
                return usage_error("disable needs EVENT... or --all");
        if (n > 0 && a->all)
                return usage_error("disable takes either EVENT... or --all, not both");

        if (!params || (a->all ? json_add(params, "all", json_object_new_boolean(true))
                               : json_add_strings(params, "events", args, n, NULL, 0)) < 0)
                return connection_exit_status(log_oom());
        return run_call(a, TPD_METHOD("Disable"), TAKE_PTR(params), NULL);
}

static int verb_status(const Args *a, char **args, size_t n) {
        _cleanup_(json_object_putp) json_object *params = json_object_new_object();

        if (!params)
                return connection_exit_status(log_oom());
        return run_call_paged(a, TPD_METHOD("GetStatus"), TAKE_PTR(params), print_status, true);
}

static int verb_metrics(const Args *a, char **args, size_t n) {
        _cleanup_(connection_done) Connection c = CONNECTION_NULL;
        _cleanup_(varlink_reply_done) VarlinkReply reply = {};
        _cleanup_(json_object_putp) json_object *samples = NULL;
        int r;

        if (a->json != JSON_OFF && a->openmetrics)
                return usage_error("--openmetrics and --json exclude each other");
        if (a->json != JSON_OFF && !(samples = json_object_new_array()))
                return connection_exit_status(log_oom());

        r = connection_call(&c, a->socket_path, TPD_METHOD("GetStatus"), json_object_new_object(), false,
                            &reply);
        if (r != 0)
                return connection_exit_status(r);
        if (metrics_write(stdout, reply.parameters, a->openmetrics, samples) < 0)
                return connection_exit_status(log_oom());
        if (samples)
                print_json_as(samples, a->json == JSON_PRETTY);
        return EXIT_SUCCESS;
}

static int verb_call(const Args *a, char **args, size_t n) {
        _cleanup_(connection_done) Connection c = CONNECTION_NULL;
        _cleanup_(varlink_reply_done) VarlinkReply reply = {};
        _cleanup_(json_object_putp) json_object *params = NULL;
        _cleanup_free_ char *method = NULL;
        int r;

        if (n > 1) {
                r = varlink_json_parse(args[1], strlen(args[1]), &params);
                if (r == -ENOMEM)
                        return connection_exit_status(log_oom());
                if (r < 0)
                        return usage_error("PARAMETERS are not valid JSON");
                if (!json_object_is_type(params, json_type_object))
                        return usage_error("PARAMETERS must be a JSON object: "
                                           "'{\"event\":\"sched:sched_switch\"}'");
        } else if (!(params = json_object_new_object()))
                return connection_exit_status(log_oom());

        /* A bare name means a method of tpd's own interface: `tpctl call GetStatus`. */
        if (asprintf(&method, "%s%s", strchr(args[0], '.') ? "" : TPD_INTERFACE ".", args[0]) < 0) {
                method = NULL;
                return connection_exit_status(log_oom());
        }

        r = connection_call(&c, a->socket_path, method, TAKE_PTR(params), false, &reply);
        if (r < 0)
                return connection_exit_status(r);
        /* Error replies go to stdout whole, so scripts can look at the error id and its parameters.
         * JSON is call's only output: --json=off means the default, pretty. */
        print_json_as(r == 0 ? reply.parameters : reply.object, a->json != JSON_SHORT);
        return r == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

static void stream_on_signal(int sig) {
        /* Stream data never sits in stdio buffers, so nothing is lost by leaving right here; a flag
         * checked between syscalls could miss a signal that arrives just before a blocking splice(). */
        _exit(EXIT_SUCCESS);
}

/* What the stream's lines need from the options and tpd's reply: the trace clock, its offset to
 * the wall clock, the flush interval and the CPUs. */
static LinesOptions stream_lines_options(const Args *a, json_object *reply) {
        LinesOptions o = {
                .count = a->count,
                .duration_usec = a->duration_usec,
                .time = a->time,
                .ordered = a->ordered,
        };
        const char *clock = NULL;
        json_object *v;
        bool found;
        int64_t i;

        if (json_object_object_get_ex(reply, "clock", &v) && json_object_is_type(v, json_type_string))
                clock = json_object_get_string(v);
        o.have_clock = trace_clock_id(clock, &o.clock_id) >= 0;
        o.realtime_offset_ns = reply_int(reply, "realtime_offset_ns", &o.have_offset);
        if (!o.have_offset && clock && streq(clock, "boot"))
                o.realtime_offset_ns = reply_int(reply, "boot_to_realtime_ns", &o.have_offset);
        /* The stream began when tpd took the call. */
        i = reply_int(reply, "ts", &found);
        o.start_ts = found && i > 0 ? (uint64_t) i : 0;
        i = reply_int(reply, "cpus", &found);
        o.n_cpus = found && i > 0 && i <= 8192 ? (unsigned) i : 0;
        /* tpd delivers a partly filled page within its flush interval: wait that long again, and
         * at least 50 ms, for what another CPU may still hold. */
        i = reply_int(reply, "flush_interval_ms", &found);
        if (!found || i <= 0)
                i = 100;
        o.order_delay_ns =
                (a->order_delay_ms > 0 ? a->order_delay_ms : (uint64_t) i + MAX((uint64_t) i, 50)) *
                1000000ULL;
        return o;
}

/* The Stream (or Record) parameters of the selection options: what stream, record and export
 * ask tpd for. Options a command does not take are refused before, so they are unset here. */
static json_object *stream_params(const Args *a, char **args, size_t n) {
        json_object *params = json_object_new_object();

        if (!params ||
            (a->n_events + n > 0 &&
             json_add_strings(params, "events", a->events, a->n_events, args, n) < 0) ||
            (a->n_pids > 0 && json_add_ints(params, "pids", a->pids, a->n_pids) < 0) ||
            (a->n_cpus > 0 && json_add_ints(params, "cpus", a->cpus, a->n_cpus) < 0) ||
            (a->filter && json_add(params, "filter", json_object_new_string(a->filter)) < 0) ||
            (a->print && json_add(params, "print", json_object_new_boolean(true)) < 0) ||
            (a->symbolic >= 0 && json_add(params, "symbolic", json_object_new_boolean(a->symbolic)) < 0) ||
            (a->time == LINES_TIME_ISO && json_add(params, "realtime", json_object_new_boolean(true)) < 0)) {
                json_object_put(params);
                return NULL;
        }
        return params;
}

static int verb_stream(const Args *a, char **args, size_t n) {
        _cleanup_(connection_done) Connection c = CONNECTION_NULL;
        _cleanup_(varlink_reply_done) VarlinkReply reply = {};
        _cleanup_(json_object_putp) json_object *params = stream_params(a, args, n);
        struct sigaction sa_exit = { .sa_handler = stream_on_signal };
        struct sigaction sa_ignore = { .sa_handler = SIG_IGN };
        int r;

        if (!params)
                return connection_exit_status(log_oom());

        /* A closed stdout (| head) must show up as EPIPE, to end quietly with 0. */
        (void) sigaction(SIGPIPE, &sa_ignore, NULL);
        (void) sigaction(SIGINT, &sa_exit, NULL);
        (void) sigaction(SIGTERM, &sa_exit, NULL);

        r = connection_call(&c, a->socket_path, TPD_METHOD("Stream"), TAKE_PTR(params), true, &reply);
        if (r != 0)
                return connection_exit_status(r);

        /* What came with the reply in the same read() is already stream data. */
        if (a->count > 0 || a->duration_usec > 0 || a->time != LINES_TIME_BOOT || a->ordered) {
                LinesOptions o = stream_lines_options(a, reply.parameters);

                varlink_reply_done(&reply);
                r = lines_stream(c.fd, STDOUT_FILENO, c.in.data + c.in.consumed,
                                 varlink_buffer_pending(&c.in), &o);
                if (r == 1 || r == -EPIPE)
                        return EXIT_SUCCESS;
        } else {
                varlink_reply_done(&reply);
                r = copy_stream(c.fd, STDOUT_FILENO, c.in.data + c.in.consumed,
                                varlink_buffer_pending(&c.in));
        }
        if (r == 0 || r == -ECONNRESET) {
                log_error("tpd closed the stream");
                return TPD_EXIT_DAEMON_GONE;
        }
        if (r == -EPIPE)
                return EXIT_SUCCESS;
        log_error_errno(r, "cannot copy the stream to standard output: %m");
        return EXIT_FAILURE;
}

static int verb_export(const Args *a, char **args, size_t n) {
        json_object *params;

        if (a->export.create_stream != (a->export.replicas > 0))
                return usage_error("--create-stream and --replicas N go together");
        if (!a->export.servers == !a->export.servers_file)
                return usage_error("export takes its servers as nats://HOST:PORT[,…] or from "
                                   "--servers-file=FILE, one of the two");
        params = stream_params(a, NULL, 0);
        if (!params)
                return connection_exit_status(log_oom());
        return export_run(a->socket_path, params, &a->export);
}

static int verb_record(const Args *a, char **args, size_t n) {
        RecordOptions o = a->record;
        json_object *params;

        if (!o.output)
                return usage_error("record needs -o FILE");
        if (!a->format)
                o.format = record_format_for(o.output);
        else if (streq(a->format, "dat"))
                o.format = RECORD_FORMAT_DAT;
        else if (streq(a->format, "ndjson"))
                o.format = RECORD_FORMAT_NDJSON;
        else
                return usage_error("--format takes dat or ndjson, not '%s'", a->format);
        if (o.file_version == 0)
                o.file_version = 6;
        params = stream_params(a, args, n);
        if (!params)
                return connection_exit_status(log_oom());
        return record_run(a->socket_path, params, &o);
}

static int verb_replay(const Args *a, char **args, size_t n) {
        _cleanup_free_ char **events = calloc(a->n_events + n, sizeof(char *));

        if (!events)
                return connection_exit_status(log_oom());
        /* EVENT arguments after FILE, like stream's. */
        memcpy(events, a->events, a->n_events * sizeof(char *));
        memcpy(events + a->n_events, args + 1, (n - 1) * sizeof(char *));
        return replay_file(args[0], &(ReplayOptions){
                                            .events = events,
                                            .n_events = a->n_events + n - 1,
                                            .pids = a->pids,
                                            .n_pids = a->n_pids,
                                            .cpus = a->cpus,
                                            .n_cpus = a->n_cpus,
                                            .filter = a->filter,
                                            .print = a->print,
                                    });
}

static int verb_top(const Args *a, char **args, size_t n) {
        TopOptions o = {
                .socket_path = a->socket_path,
                .iterations = a->iterations,
                .delay_usec = a->delay_usec > 0 ? a->delay_usec : 1000000,
                .sort = a->sort,
        };

        return top_run(&o);
}

typedef struct Verb {
        const char *name;
        size_t min_args;
        size_t max_args;
        unsigned options;
        int (*run)(const Args *a, char **args, size_t n);
} Verb;

static const Verb verbs[] = {
        { "list", 0, 1, 0, verb_list },
        { "describe", 1, 1, 0, verb_describe },
        { "enable", 1, SIZE_MAX, OPT_FILTER, verb_enable },
        { "disable", 0, SIZE_MAX, OPT_ALL, verb_disable },
        { "status", 0, 0, 0, verb_status },
        { "stream", 0, SIZE_MAX,
          OPT_EVENT | OPT_PID | OPT_CPU | OPT_FILTER | OPT_PRINT | OPT_SYMBOLIC | OPT_COUNT | OPT_DURATION |
                  OPT_TIME | OPT_ORDERED,
          verb_stream },
        { "call", 1, 2, 0, verb_call },
        { "record", 0, SIZE_MAX, OPT_EVENT | OPT_PID | OPT_CPU | OPT_FILTER | OPT_RECORD | OPT_DURATION,
          verb_record },
        { "replay", 1, SIZE_MAX, OPT_EVENT | OPT_PID | OPT_CPU | OPT_FILTER | OPT_PRINT, verb_replay },
        { "metrics", 0, 0, OPT_OPENMETRICS, verb_metrics },
        { "top", 0, 0, OPT_ITERATIONS | OPT_DELAY | OPT_SORT, verb_top },
        { "export", 0, 1,
          OPT_EVENT | OPT_PID | OPT_CPU | OPT_FILTER | OPT_SUBJECT_PREFIX | OPT_BUFFER_SIZE |
                  OPT_BATCH_SIZE | OPT_CREDS | OPT_TLS_CA | OPT_CREATE_STREAM | OPT_REPLICAS | OPT_STREAM |
                  OPT_SERVERS_FILE,
          verb_export },
};

static void help(void) {
        printf("Usage: tpctl [OPTIONS] COMMAND [ARGUMENTS]\n"
               "\n"
               "Control tpd and stream Linux kernel tracepoints from it as JSON.\n"
               "\n"
               "Commands:\n"
               "  list [PATTERN]             List events by name, enabled ones marked \"(enabled)\";\n"
               "                             PATTERN is a glob: 'sched:*', '*:sched_switch'\n"
               "  describe EVENT             Show an event's id, fields and print format\n"
               "  enable EVENT... [-f EXPR]  Enable events until 'disable', with an optional kernel filter\n"
               "  disable EVENT... | --all   Remove your pins of these events, or all yours (root: all)\n"
               "  status                     Show tpd's settings, counters and enabled events\n"
               "  stream [EVENT...]          Print records as NDJSON, one JSON object a line, until\n"
               "                             interrupted; without EVENT or -e, every enabled event\n"
               "  record -o FILE [EVENT...]  Record to a trace-cmd data file (or NDJSON) until "
               "interrupted,\n"
               "                             --duration or --size; without EVENT or -e, the enabled events\n"
               "  replay FILE [EVENT...]     Print a capture's records as stream would have: FILE is a\n"
               "                             trace-cmd data file (.dat) or stream's NDJSON\n"
               "  metrics                    Print tpd's counters as Prometheus metrics (text format,\n"
               "                             for node_exporter's textfile collector)\n"
               "  call METHOD [PARAMETERS]   Call a Varlink method with a JSON object and print the reply\n"
               "                             as JSON (an error reply whole); bare METHODs are in\n"
               "                             %s\n"
               "  top                        Show events and their busiest processes by rate, refreshed\n"
               "                             every second; keys r t l n sort by rate, total, lost, name,\n"
               "                             q quits; lines of key=value when stdout is no terminal\n"
               "  export nats://HOST:PORT[,…] | export --servers-file=FILE\n"
               "                             Publish the records into NATS JetStream until interrupted,\n"
               "                             as PREFIX.HOST.SYSTEM.EVENT and PREFIX.HOST.lost\n"
               "\n"
               "Options:\n"
               "  -h --help                  Show this help\n"
               "     --version               Show the version\n"
               "  -q --quiet                 No hints under errors\n"
               "     --socket=PATH           tpd's socket (default: $%s, else\n"
               "                             %s)\n"
               "     --json[=MODE]           Every command but stream: print the reply as JSON; MODE\n"
               "                             short (one line), pretty (the default) or off (text)\n"
               "  -j                         --json=pretty on a terminal, else --json=short\n"
               "     --no-legend             No table headers\n"
               "     --no-pager              Do not pipe list and status into a pager\n"
               "  -f --filter=EXPR           enable: kernel filter of the events;\n"
               "                             stream, replay: filter of this stream only, in the same "
               "syntax\n"
               "     --all                   disable: every event enabled with 'enable'\n"
               "  -e --event=EVENT           stream, record, replay: include EVENT (repeatable, like EVENT\n"
               "                             arguments)\n"
               "  -p --pid=PID               stream, record, replay: only records of process PID "
               "(repeatable)\n"
               "  -c --cpu=CPU               stream, record, replay: only records of CPU (repeatable)\n"
               "     --print                 stream, replay: add the kernel's formatted text as \"print\"\n"
               "     --symbolic[=yes|no]     stream: add \"sym\", readable forms of flags, symbols,\n"
               "                             system calls and errnos (\"prev_state\":\"S\")\n"
               "     --count=N               stream: stop after N event records\n"
               "     --duration=SECONDS      stream, record: stop after SECONDS (fractions allowed)\n"
               "     --time=boot|iso|relative\n"
               "                             stream: add \"time\" after \"ts\": iso, the wall clock in\n"
               "                             RFC 3339 with ns; relative, seconds since the start\n"
               "     --ordered[=MS]          stream: merge the CPUs' records in ts order, holding\n"
               "                             each up to MS (default: twice tpd's flush interval)\n"
               "  -o --output=FILE           record: the file; .ndjson, .json or .jsonl mean NDJSON\n"
               "     --format=dat|ndjson     record: the file's format, whatever its name\n"
               "     --size=MB               record: stop before the capture outgrows MB (MiB)\n"
               "     --rotate-size=MB        record: start a new file (NAME-0001.dat, …) at MB\n"
               "     --rotate-time=S         record: start a new file every S seconds\n"
               "     --keep=N                record: keep only the newest N files when rotating\n"
               "     --file-version=6|7      record: trace-cmd file version (7 compresses; default 6)\n"
               "     --no-kallsyms           record: leave kernel symbols out of the file\n"
               "     --force                 record: replace files that exist at the capture's names\n"
               "     --openmetrics           metrics: in the OpenMetrics 1.0 text format\n"
               "  -n --iterations=N          top: refresh N times, then exit\n"
               "  -d --delay=SECONDS         top: time between refreshes (default 1, at least 0.1)\n"
               "     --sort=KEY              top: rate (default), total, lost or name\n"
               "  export also takes -e, -p, -c and -f (which records), and:\n"
               "     --subject-prefix=P      first subject token (default: %s)\n"
               "     --stream=NAME           JetStream stream (default: the prefix in capitals)\n"
               "     --create-stream --replicas=N\n"
               "                             create the stream (subjects P.>) if it is missing; without\n"
               "                             it, a missing stream is an error\n"
               "     --servers-file=FILE     the servers' URLs from FILE instead of the command line,\n"
               "                             where every user can read a password in them\n"
               "     --buffer-size=MB        memory for records the cluster has not taken (default\n"
               "                             %u); beyond it they are counted as lost, cause \"export\"\n"
               "     --batch-size=KB         bytes of records per message (default %u, at most %u);\n"
               "                             0: one record per message\n"
               "     --creds=FILE            NATS credentials file (user JWT and NKey seed)\n"
               "     --tls-ca=FILE           use TLS, verifying the servers with these CA certificates\n"
               "\n"
               "Exit status:\n"
               "  0   success; also when a stream ends by SIGINT or SIGTERM, or its reader goes away\n"
               "  1   tpd answered with an error, or another failure\n"
               "  2   wrong usage\n"
               "  %d  tpd cannot be reached, or it closed the stream\n",
               TPD_INTERFACE, TPD_SOCKET_ENV, TPD_SOCKET_DEFAULT, EXPORT_SUBJECT_PREFIX_DEFAULT,
               EXPORT_BUFFER_SIZE_DEFAULT >> 20, EXPORT_BATCH_SIZE_DEFAULT >> 10,
               EXPORT_BATCH_SIZE_MAX >> 10, TPD_EXIT_DAEMON_GONE);
}

static int parse_int(const char *s, int *ret) {
        char *end;
        long v;

        if (*s < '0' || *s > '9')
                return -EINVAL;
        errno = 0;
        v = strtol(s, &end, 10);
        if (errno != 0 || *end || v > INT_MAX)
                return -EINVAL;
        *ret = (int) v;
        return 0;
}

/* A decimal number ("10", "0.5", "1e-3") from min to max. */
static int parse_decimal(const char *s, double min, double max, double *ret) {
        char *end;
        double v;

        if ((*s < '0' || *s > '9') && *s != '.')
                return -EINVAL;
        errno = 0;
        v = strtod(s, &end);
        if (errno != 0 || end == s || *end || !(v >= min && v <= max))
                return -EINVAL;
        *ret = v;
        return 0;
}

/* Positive seconds, fractions allowed, at most a year. */
static int parse_seconds(const char *s, double *ret) {
        return parse_decimal(s, 1e-9, 366.0 * 24 * 3600, ret);
}

/* The same, in microseconds (at least 1). */
static int parse_duration_usec(const char *s, uint64_t *ret_usec) {
        double v;

        if (parse_seconds(s, &v) < 0)
                return -EINVAL;
        *ret_usec = MAX((uint64_t) (v * 1e6), (uint64_t) 1);
        return 0;
}

/* A positive size in MB (MiB), fractions allowed, as bytes. */
static int parse_megabytes(const char *s, uint64_t *ret) {
        double v;

        if (parse_decimal(s, 1e-6, 1e9, &v) < 0)
                return -EINVAL;
        *ret = (uint64_t) (v * 1048576.0);
        return *ret > 0 ? 0 : -EINVAL;
}

/* top's delay: seconds from 0.1 to a day, in microseconds. */
static int parse_delay(const char *s, uint64_t *ret_usec) {
        double v;

        if (parse_decimal(s, 0.1, 86400, &v) < 0)
                return -EINVAL;
        *ret_usec = (uint64_t) (v * 1e6 + 0.5);
        return 0;
}

static int parse_u64(const char *s, uint64_t *ret) {
        char *end;
        unsigned long long v;

        if (*s < '0' || *s > '9')
                return -EINVAL;
        errno = 0;
        v = strtoull(s, &end, 10);
        if (errno != 0 || *end)
                return -EINVAL;
        *ret = v;
        return 0;
}

/* Returns 1 to run *ret_verb, 0 to exit successfully (--help, --version), negative on usage errors. */
static int parse_args(int argc, char *argv[], Args *a, const Verb **ret_verb) {
        enum {
                ARG_VERSION = 0x100,
                ARG_SOCKET,
                ARG_JSON,
                ARG_ALL,
                ARG_PRINT,
                ARG_DURATION,
                ARG_SIZE,
                ARG_FORMAT,
                ARG_ROTATE_SIZE,
                ARG_ROTATE_TIME,
                ARG_KEEP,
                ARG_FILE_VERSION,
                ARG_NO_KALLSYMS,
                ARG_FORCE,
                ARG_NO_PAGER,
                ARG_NO_LEGEND,
                ARG_OPENMETRICS,
                ARG_SORT,
                ARG_SUBJECT_PREFIX,
                ARG_BUFFER_SIZE,
                ARG_BATCH_SIZE,
                ARG_CREDS,
                ARG_TLS_CA,
                ARG_CREATE_STREAM,
                ARG_REPLICAS,
                ARG_STREAM,
                ARG_SYMBOLIC,
                ARG_COUNT,
                ARG_TIME,
                ARG_ORDERED,
                ARG_SERVERS_FILE,
        };
        static const struct option options[] = {
                { "help", no_argument, NULL, 'h' },
                { "version", no_argument, NULL, ARG_VERSION },
                { "socket", required_argument, NULL, ARG_SOCKET },
                { "json", optional_argument, NULL, ARG_JSON },
                { "no-pager", no_argument, NULL, ARG_NO_PAGER },
                { "no-legend", no_argument, NULL, ARG_NO_LEGEND },
                { "openmetrics", no_argument, NULL, ARG_OPENMETRICS },
                { "filter", required_argument, NULL, 'f' },
                { "all", no_argument, NULL, ARG_ALL },
                { "event", required_argument, NULL, 'e' },
                { "pid", required_argument, NULL, 'p' },
                { "cpu", required_argument, NULL, 'c' },
                { "print", no_argument, NULL, ARG_PRINT },
                { "output", required_argument, NULL, 'o' },
                { "duration", required_argument, NULL, ARG_DURATION },
                { "size", required_argument, NULL, ARG_SIZE },
                { "format", required_argument, NULL, ARG_FORMAT },
                { "rotate-size", required_argument, NULL, ARG_ROTATE_SIZE },
                { "rotate-time", required_argument, NULL, ARG_ROTATE_TIME },
                { "keep", required_argument, NULL, ARG_KEEP },
                { "file-version", required_argument, NULL, ARG_FILE_VERSION },
                { "no-kallsyms", no_argument, NULL, ARG_NO_KALLSYMS },
                { "force", no_argument, NULL, ARG_FORCE },
                { "quiet", no_argument, NULL, 'q' },
                { "iterations", required_argument, NULL, 'n' },
                { "delay", required_argument, NULL, 'd' },
                { "sort", required_argument, NULL, ARG_SORT },
                { "subject-prefix", required_argument, NULL, ARG_SUBJECT_PREFIX },
                { "buffer-size", required_argument, NULL, ARG_BUFFER_SIZE },
                { "batch-size", required_argument, NULL, ARG_BATCH_SIZE },
                { "creds", required_argument, NULL, ARG_CREDS },
                { "tls-ca", required_argument, NULL, ARG_TLS_CA },
                { "create-stream", no_argument, NULL, ARG_CREATE_STREAM },
                { "replicas", required_argument, NULL, ARG_REPLICAS },
                { "stream", required_argument, NULL, ARG_STREAM },
                { "symbolic", optional_argument, NULL, ARG_SYMBOLIC },
                { "count", required_argument, NULL, ARG_COUNT },
                { "time", required_argument, NULL, ARG_TIME },
                { "ordered", optional_argument, NULL, ARG_ORDERED },
                { "servers-file", required_argument, NULL, ARG_SERVERS_FILE },
                {}
        };
        const Verb *verb = NULL;
        size_t n;
        int c, v;

        a->export = (ExportOptions){
                .subject_prefix = EXPORT_SUBJECT_PREFIX_DEFAULT,
                .buffer_size = EXPORT_BUFFER_SIZE_DEFAULT,
                .batch_size = EXPORT_BATCH_SIZE_DEFAULT,
        };

        /* argc bounds every list, so they never grow. */
        a->events = calloc(argc, sizeof(*a->events));
        a->pids = calloc(argc, sizeof(*a->pids));
        a->cpus = calloc(argc, sizeof(*a->cpus));
        if (!a->events || !a->pids || !a->cpus)
                return log_oom();

        /* No '+': options may follow the command (`tpctl stream -e sched:sched_switch`). */
        opterr = 0;
        a->record.kallsyms = true;
        while ((c = getopt_long(argc, argv, ":hqjf:e:p:c:o:n:d:", options, NULL)) >= 0)
                switch (c) {
                case 'h':
                        help();
                        return 0;
                case ARG_VERSION:
                        printf("tpctl %s\n", TPD_VERSION);
                        return 0;
                case ARG_SOCKET:
                        a->socket_path = optarg;
                        break;
                case 'q':
                        log_quiet = true;
                        break;
                case ARG_JSON:
                        /* Bare --json keeps its old meaning: pretty. */
                        if (!optarg || streq(optarg, "pretty"))
                                a->json = JSON_PRETTY;
                        else if (streq(optarg, "short"))
                                a->json = JSON_SHORT;
                        else if (streq(optarg, "off"))
                                a->json = JSON_OFF;
                        else if (streq(optarg, "help")) {
                                puts("short\npretty\noff");
                                return 0;
                        } else
                                return log_usage("unknown JSON mode '%s': short, pretty or off", optarg);
                        break;
                case 'j':
                        /* As in systemd: for a person pretty, for a program short. */
                        a->json = isatty(STDOUT_FILENO) ? JSON_PRETTY : JSON_SHORT;
                        break;
                case ARG_NO_PAGER:
                        a->no_pager = true;
                        break;
                case ARG_NO_LEGEND:
                        output_legend = false;
                        break;
                case ARG_OPENMETRICS:
                        a->openmetrics = true;
                        a->options |= OPT_OPENMETRICS;
                        break;
                case 'f':
                        a->filter = optarg;
                        a->options |= OPT_FILTER;
                        break;
                case ARG_ALL:
                        a->all = true;
                        a->options |= OPT_ALL;
                        break;
                case 'e':
                        a->events[a->n_events++] = optarg;
                        a->options |= OPT_EVENT;
                        break;
                case 'p':
                        if (parse_int(optarg, &a->pids[a->n_pids++]) < 0)
                                return log_usage("invalid PID '%s'", optarg);
                        a->options |= OPT_PID;
                        break;
                case 'c':
                        if (parse_int(optarg, &a->cpus[a->n_cpus++]) < 0)
                                return log_usage("invalid CPU number '%s'", optarg);
                        a->options |= OPT_CPU;
                        break;
                case ARG_PRINT:
                        a->print = true;
                        a->options |= OPT_PRINT;
                        break;
                case 'o':
                        a->record.output = optarg;
                        a->options |= OPT_RECORD;
                        break;
                case ARG_DURATION:
                        if (parse_duration_usec(optarg, &a->duration_usec) < 0)
                                return log_usage("invalid duration '%s': seconds, like 10 or 0.5", optarg);
                        a->record.duration = (double) a->duration_usec / 1e6;
                        a->options |= OPT_DURATION;
                        break;
                case ARG_ROTATE_TIME:
                        if (parse_seconds(optarg, &a->record.rotate_time) < 0)
                                return log_usage("invalid number of seconds '%s'", optarg);
                        a->options |= OPT_RECORD;
                        break;
                case ARG_SIZE:
                case ARG_ROTATE_SIZE: {
                        uint64_t *sz = c == ARG_SIZE ? &a->record.max_size : &a->record.rotate_size;
                        if (parse_megabytes(optarg, sz) < 0)
                                return log_usage("invalid size in MB '%s'", optarg);
                        a->options |= OPT_RECORD;
                        break;
                }
                case ARG_FORMAT:
                        a->format = optarg;
                        a->options |= OPT_RECORD;
                        break;
                case ARG_KEEP: {
                        int k;
                        if (parse_int(optarg, &k) < 0 || k < 1)
                                return log_usage("invalid number of files '%s'", optarg);
                        a->record.keep = (unsigned) k;
                        a->options |= OPT_RECORD;
                        break;
                }
                case ARG_FILE_VERSION:
                        if (parse_int(optarg, &a->record.file_version) < 0 ||
                            (a->record.file_version != 6 && a->record.file_version != 7))
                                return log_usage("--file-version takes 6 or 7, not '%s'", optarg);
                        a->options |= OPT_RECORD;
                        break;
                case ARG_NO_KALLSYMS:
                        a->record.kallsyms = false;
                        a->options |= OPT_RECORD;
                        break;
                case ARG_FORCE:
                        a->record.force = true;
                        a->options |= OPT_RECORD;
                        break;
                case 'n': {
                        int iterations;
                        if (parse_int(optarg, &iterations) < 0 || iterations == 0)
                                return log_usage("invalid number of iterations '%s'", optarg);
                        a->iterations = (uint64_t) iterations;
                        a->options |= OPT_ITERATIONS;
                        break;
                }
                case 'd':
                        if (parse_delay(optarg, &a->delay_usec) < 0)
                                return log_usage("invalid delay '%s': seconds from 0.1 to 86400", optarg);
                        a->options |= OPT_DELAY;
                        break;
                case ARG_SORT:
                        if (top_sort_from_string(optarg, &a->sort) < 0)
                                return log_usage("invalid sort key '%s': rate, total, lost or name", optarg);
                        a->options |= OPT_SORT;
                        break;
                case ARG_SUBJECT_PREFIX:
                        if (!export_prefix_valid(optarg))
                                return log_usage("invalid subject prefix '%s': NATS subject tokens of "
                                                 "letters, digits, '_' and '-', separated by '.'",
                                                 optarg);
                        a->export.subject_prefix = optarg;
                        a->options |= OPT_SUBJECT_PREFIX;
                        break;
                case ARG_BUFFER_SIZE:
                        if (parse_int(optarg, &v) < 0 || v < 1 || v > 65536)
                                return log_usage("invalid --buffer-size '%s': megabytes, 1 to 65536",
                                                 optarg);
                        a->export.buffer_size = (size_t) v << 20;
                        a->options |= OPT_BUFFER_SIZE;
                        break;
                case ARG_BATCH_SIZE:
                        if (parse_int(optarg, &v) < 0 || v > (int) (EXPORT_BATCH_SIZE_MAX >> 10))
                                return log_usage("invalid --batch-size '%s': kilobytes, 0 to %u", optarg,
                                                 EXPORT_BATCH_SIZE_MAX >> 10);
                        a->export.batch_size = (size_t) v << 10;
                        a->options |= OPT_BATCH_SIZE;
                        break;
                case ARG_CREDS:
                        a->export.creds = optarg;
                        a->options |= OPT_CREDS;
                        break;
                case ARG_SERVERS_FILE:
                        a->export.servers_file = optarg;
                        a->options |= OPT_SERVERS_FILE;
                        break;
                case ARG_TLS_CA:
                        a->export.tls_ca = optarg;
                        a->options |= OPT_TLS_CA;
                        break;
                case ARG_CREATE_STREAM:
                        a->export.create_stream = true;
                        a->options |= OPT_CREATE_STREAM;
                        break;
                case ARG_REPLICAS:
                        if (parse_int(optarg, &v) < 0 || v < 1 || v > 5)
                                return log_usage("invalid --replicas '%s': 1 to 5", optarg);
                        a->export.replicas = v;
                        a->options |= OPT_REPLICAS;
                        break;
                case ARG_STREAM:
                        if (!*optarg || strpbrk(optarg, ". *>/\\\t"))
                                return log_usage("invalid stream name '%s'", optarg);
                        a->export.stream = optarg;
                        a->options |= OPT_STREAM;
                        break;
                case ARG_SYMBOLIC:
                        if (!optarg || streq(optarg, "yes"))
                                a->symbolic = 1;
                        else if (streq(optarg, "no"))
                                a->symbolic = 0;
                        else
                                return log_usage("invalid --symbolic '%s': yes or no", optarg);
                        a->options |= OPT_SYMBOLIC;
                        break;
                case ARG_COUNT:
                        if (parse_u64(optarg, &a->count) < 0 || a->count == 0)
                                return log_usage("invalid count '%s': a number of records from 1", optarg);
                        a->options |= OPT_COUNT;
                        break;
                case ARG_TIME:
                        if (streq(optarg, "boot"))
                                a->time = LINES_TIME_BOOT;
                        else if (streq(optarg, "iso"))
                                a->time = LINES_TIME_ISO;
                        else if (streq(optarg, "relative"))
                                a->time = LINES_TIME_RELATIVE;
                        else
                                return log_usage("invalid --time '%s': boot, iso or relative", optarg);
                        a->options |= OPT_TIME;
                        break;
                case ARG_ORDERED:
                        a->ordered = true;
                        if (optarg && (parse_u64(optarg, &a->order_delay_ms) < 0 || a->order_delay_ms == 0 ||
                                       a->order_delay_ms > 3600 * 1000))
                                return log_usage("invalid --ordered delay '%s': milliseconds from 1",
                                                 optarg);
                        a->options |= OPT_ORDERED;
                        break;
                case ':':
                        return log_usage("option '%s' needs an argument", argv[optind - 1]);
                default:
                        if (optopt > 0 && optopt < 0x100)
                                return log_usage("unknown option '-%c'", optopt);
                        return log_usage("unknown option '%s'", argv[optind - 1]);
                }

        if (!a->socket_path)
                a->socket_path = getenv(TPD_SOCKET_ENV);
        if (!a->socket_path || !*a->socket_path)
                a->socket_path = TPD_SOCKET_DEFAULT;

        if (optind >= argc)
                return log_usage("missing command");
        for (size_t i = 0; i < ELEMENTSOF(verbs); i++)
                if (streq(argv[optind], verbs[i].name))
                        verb = &verbs[i];
        if (!verb)
                return log_usage("unknown command '%s'", argv[optind]);

        n = argc - optind - 1;
        if (n < verb->min_args)
                return log_usage("%s needs an argument", verb->name);
        if (n > verb->max_args)
                return log_usage("too many arguments for %s", verb->name);
        for (size_t i = 0; i < ELEMENTSOF(option_names); i++)
                if (a->options & ~verb->options & (1U << i))
                        return log_usage("%s does not apply to %s", option_names[i], verb->name);

        if (verb->run == verb_export && n == 1)
                a->export.servers = argv[optind + 1];
        *ret_verb = verb;
        return 1;
}

int main(int argc, char *argv[]) {
        _cleanup_(args_done) Args a = { .symbolic = -1 };
        const Verb *verb = NULL;
        int r, p;

        r = parse_args(argc, argv, &a, &verb);
        if (r == -ENOMEM)
                return EXIT_FAILURE;
        if (r <= 0)
                return r < 0 ? EXIT_USAGE : EXIT_SUCCESS;

        r = verb->run(&a, argv + optind + 1, argc - optind - 1);

        /* The pager reads to its end or quits early (EPIPE): neither is an error of ours. */
        p = pager_close();
        if (p < 0) {
                log_error_errno(p, "cannot write to the pager: %m");
                return r == EXIT_SUCCESS ? EXIT_FAILURE : r;
        }
        if (p > 0)
                return r;
        /* Output the user asked for that never arrived is a failure, e.g. on a full disk. */
        if (fflush(stdout) != 0 || ferror(stdout)) {
                log_error_errno(-errno, "cannot write to standard output: %m");
                return r == EXIT_SUCCESS ? EXIT_FAILURE : r;
        }
        return r;
}
