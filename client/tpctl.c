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
#include "lines.h"
#include "log.h"
#include "output.h"
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

static int exit_status(int r) {
        switch (r) {
        case 0:
                return EXIT_SUCCESS;
        case -ENOENT:
        case -ECONNREFUSED:
        case -EACCES:
        case -EPERM:
        case -ECONNRESET:
        case -EPIPE:
        case -ENOTCONN:
                return TPD_EXIT_DAEMON_GONE;
        case -ENAMETOOLONG:
                return EXIT_USAGE;
        default:
                return EXIT_FAILURE;
        }
}

typedef struct Args {
        const char *socket_path;
        bool json;
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
        OPT_SYMBOLIC = 1 << 6,
        OPT_COUNT = 1 << 7,
        OPT_DURATION = 1 << 8,
        OPT_TIME = 1 << 9,
        OPT_ORDERED = 1 << 10,
};

static const char *const option_names[] = { "--filter",   "--all",   "--event",    "--pid",
                                            "--cpu",      "--print", "--symbolic", "--count",
                                            "--duration", "--time",  "--ordered" };

/* Sends method with params (taken over) and prints the reply: as JSON with --json, else with print
 * (if any). */
static int run_call(const Args *a, const char *method, json_object *params, void (*print)(json_object *)) {
        _cleanup_(connection_done) Connection c = CONNECTION_NULL;
        _cleanup_(varlink_reply_done) VarlinkReply reply = {};
        int r;

        r = connection_call(&c, a->socket_path, method, params, false, &reply);
        if (r != 0)
                return exit_status(r);
        if (a->json)
                print_json(reply.parameters);
        else if (print)
                print(reply.parameters);
        return EXIT_SUCCESS;
}

static int verb_list(const Args *a, char **args, size_t n) {
        _cleanup_(json_object_putp) json_object *params = json_object_new_object();

        if (!params || (n > 0 && json_add(params, "pattern", json_object_new_string(args[0])) < 0))
                return exit_status(log_oom());
        return run_call(a, TPD_METHOD("ListEvents"), TAKE_PTR(params), print_list);
}

static int verb_describe(const Args *a, char **args, size_t n) {
        _cleanup_(json_object_putp) json_object *params = json_object_new_object();

        if (!params || json_add(params, "event", json_object_new_string(args[0])) < 0)
                return exit_status(log_oom());
        return run_call(a, TPD_METHOD("DescribeEvent"), TAKE_PTR(params), print_describe);
}

static int verb_enable(const Args *a, char **args, size_t n) {
        _cleanup_(json_object_putp) json_object *params = json_object_new_object();

        if (!params || json_add_strings(params, "events", args, n, NULL, 0) < 0 ||
            (a->filter && json_add(params, "filter", json_object_new_string(a->filter)) < 0))
                return exit_status(log_oom());
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
                return exit_status(log_oom());
        return run_call(a, TPD_METHOD("Disable"), TAKE_PTR(params), NULL);
}

static int verb_status(const Args *a, char **args, size_t n) {
        _cleanup_(json_object_putp) json_object *params = json_object_new_object();

        if (!params)
                return exit_status(log_oom());
        return run_call(a, TPD_METHOD("GetStatus"), TAKE_PTR(params), print_status);
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
                        return exit_status(log_oom());
                if (r < 0)
                        return usage_error("PARAMETERS are not valid JSON");
                if (!json_object_is_type(params, json_type_object))
                        return usage_error("PARAMETERS must be a JSON object: "
                                           "'{\"event\":\"sched:sched_switch\"}'");
        } else if (!(params = json_object_new_object()))
                return exit_status(log_oom());

        /* A bare name means a method of tpd's own interface: `tpctl call GetStatus`. */
        if (asprintf(&method, "%s%s", strchr(args[0], '.') ? "" : TPD_INTERFACE ".", args[0]) < 0) {
                method = NULL;
                return exit_status(log_oom());
        }

        r = connection_call(&c, a->socket_path, method, TAKE_PTR(params), false, &reply);
        if (r < 0)
                return exit_status(r);
        /* Error replies go to stdout whole, so scripts can look at the error id and its parameters. */
        print_json(r == 0 ? reply.parameters : reply.object);
        return r == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

static void stream_on_signal(int sig) {
        /* Stream data never sits in stdio buffers, so nothing is lost by leaving right here; a flag
         * checked between syscalls could miss a signal that arrives just before a blocking splice(). */
        _exit(EXIT_SUCCESS);
}

static int64_t json_int(json_object *o, const char *key, bool *ret_found) {
        json_object *v;

        *ret_found = json_object_object_get_ex(o, key, &v) && json_object_is_type(v, json_type_int);
        return *ret_found ? json_object_get_int64(v) : 0;
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
        o.have_clock = lines_clock_id(clock, &o.clock_id) >= 0;
        o.realtime_offset_ns = json_int(reply, "realtime_offset_ns", &o.have_offset);
        if (!o.have_offset && clock && streq(clock, "boot"))
                o.realtime_offset_ns = json_int(reply, "boot_to_realtime_ns", &o.have_offset);
        /* The stream began when tpd took the call. */
        i = json_int(reply, "ts", &found);
        o.start_ts = found && i > 0 ? (uint64_t) i : 0;
        i = json_int(reply, "cpus", &found);
        o.n_cpus = found && i > 0 && i <= 8192 ? (unsigned) i : 0;
        /* tpd delivers a partly filled page within its flush interval: wait that long again, and
         * at least 50 ms, for what another CPU may still hold. */
        i = json_int(reply, "flush_interval_ms", &found);
        if (!found || i <= 0)
                i = 100;
        o.order_delay_ns =
                (a->order_delay_ms > 0 ? a->order_delay_ms : (uint64_t) i + MAX((uint64_t) i, 50)) *
                1000000ULL;
        return o;
}

static int verb_stream(const Args *a, char **args, size_t n) {
        _cleanup_(connection_done) Connection c = CONNECTION_NULL;
        _cleanup_(varlink_reply_done) VarlinkReply reply = {};
        _cleanup_(json_object_putp) json_object *params = json_object_new_object();
        struct sigaction sa_exit = { .sa_handler = stream_on_signal };
        struct sigaction sa_ignore = { .sa_handler = SIG_IGN };
        int r;

        if (!params ||
            (a->n_events + n > 0 &&
             json_add_strings(params, "events", a->events, a->n_events, args, n) < 0) ||
            (a->n_pids > 0 && json_add_ints(params, "pids", a->pids, a->n_pids) < 0) ||
            (a->n_cpus > 0 && json_add_ints(params, "cpus", a->cpus, a->n_cpus) < 0) ||
            (a->filter && json_add(params, "filter", json_object_new_string(a->filter)) < 0) ||
            (a->print && json_add(params, "print", json_object_new_boolean(true)) < 0) ||
            (a->symbolic >= 0 && json_add(params, "symbolic", json_object_new_boolean(a->symbolic)) < 0) ||
            (a->time == LINES_TIME_ISO && json_add(params, "realtime", json_object_new_boolean(true)) < 0))
                return exit_status(log_oom());

        /* A closed stdout (| head) must show up as EPIPE, to end quietly with 0. */
        (void) sigaction(SIGPIPE, &sa_ignore, NULL);
        (void) sigaction(SIGINT, &sa_exit, NULL);
        (void) sigaction(SIGTERM, &sa_exit, NULL);

        r = connection_call(&c, a->socket_path, TPD_METHOD("Stream"), TAKE_PTR(params), true, &reply);
        if (r != 0)
                return exit_status(r);

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
               "  call METHOD [PARAMETERS]   Call a Varlink method with a JSON object and print the reply\n"
               "                             as JSON (an error reply whole); bare METHODs are in\n"
               "                             %s\n"
               "\n"
               "Options:\n"
               "  -h --help                  Show this help\n"
               "     --version               Show the version\n"
               "     --socket=PATH           tpd's socket (default: $%s, else\n"
               "                             %s)\n"
               "     --json                  list, describe, status, enable, disable: print the reply's\n"
               "                             parameters as JSON\n"
               "  -f --filter=EXPR           enable: kernel filter of the events;\n"
               "                             stream: filter of this stream only, in the same syntax\n"
               "     --all                   disable: every event enabled with 'enable'\n"
               "  -e --event=EVENT           stream: include EVENT (repeatable, like EVENT arguments)\n"
               "  -p --pid=PID               stream: only records of process PID (repeatable)\n"
               "  -c --cpu=CPU               stream: only records of CPU (repeatable)\n"
               "     --print                 stream: add the kernel's formatted text as \"print\"\n"
               "     --symbolic[=yes|no]     stream: add \"sym\", readable forms of flags, symbols,\n"
               "                             system calls and errnos (\"prev_state\":\"S\")\n"
               "     --count=N               stream: stop after N event records\n"
               "     --duration=SECONDS      stream: stop after SECONDS (fractions allowed)\n"
               "     --time=boot|iso|relative\n"
               "                             stream: add \"time\" after \"ts\": iso, the wall clock in\n"
               "                             RFC 3339 with ns; relative, seconds since the start\n"
               "     --ordered[=MS]          stream: merge the CPUs' records in ts order, holding\n"
               "                             each up to MS (default: twice tpd's flush interval)\n"
               "\n"
               "Exit status:\n"
               "  0   success; also when a stream ends by SIGINT or SIGTERM, or its reader goes away\n"
               "  1   tpd answered with an error, or another failure\n"
               "  2   wrong usage\n"
               "  %d  tpd cannot be reached, or it closed the stream\n",
               TPD_INTERFACE, TPD_SOCKET_ENV, TPD_SOCKET_DEFAULT, TPD_EXIT_DAEMON_GONE);
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

/* "10", "0.5", "1e-3": positive seconds, to microseconds, at most a year. */
static int parse_duration_usec(const char *s, uint64_t *ret_usec) {
        char *end;
        double v;

        if ((*s < '0' || *s > '9') && *s != '.')
                return -EINVAL;
        errno = 0;
        v = strtod(s, &end);
        if (errno != 0 || *end || !(v > 0) || v > 366.0 * 24 * 3600)
                return -EINVAL;
        *ret_usec = (uint64_t) (v * 1e6);
        if (*ret_usec == 0)
                *ret_usec = 1;
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
                ARG_SYMBOLIC,
                ARG_COUNT,
                ARG_DURATION,
                ARG_TIME,
                ARG_ORDERED,
        };
        static const struct option options[] = { { "help", no_argument, NULL, 'h' },
                                                 { "version", no_argument, NULL, ARG_VERSION },
                                                 { "socket", required_argument, NULL, ARG_SOCKET },
                                                 { "json", no_argument, NULL, ARG_JSON },
                                                 { "filter", required_argument, NULL, 'f' },
                                                 { "all", no_argument, NULL, ARG_ALL },
                                                 { "event", required_argument, NULL, 'e' },
                                                 { "pid", required_argument, NULL, 'p' },
                                                 { "cpu", required_argument, NULL, 'c' },
                                                 { "print", no_argument, NULL, ARG_PRINT },
                                                 { "symbolic", optional_argument, NULL, ARG_SYMBOLIC },
                                                 { "count", required_argument, NULL, ARG_COUNT },
                                                 { "duration", required_argument, NULL, ARG_DURATION },
                                                 { "time", required_argument, NULL, ARG_TIME },
                                                 { "ordered", optional_argument, NULL, ARG_ORDERED },
                                                 {} };
        const Verb *verb = NULL;
        size_t n;
        int c;

        /* argc bounds every list, so they never grow. */
        a->events = calloc(argc, sizeof(*a->events));
        a->pids = calloc(argc, sizeof(*a->pids));
        a->cpus = calloc(argc, sizeof(*a->cpus));
        if (!a->events || !a->pids || !a->cpus)
                return log_oom();

        /* No '+': options may follow the command (`tpctl stream -e sched:sched_switch`). */
        opterr = 0;
        while ((c = getopt_long(argc, argv, ":hf:e:p:c:", options, NULL)) >= 0)
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
                case ARG_JSON:
                        a->json = true;
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
                case ARG_DURATION:
                        if (parse_duration_usec(optarg, &a->duration_usec) < 0)
                                return log_usage("invalid duration '%s': seconds, like 10 or 0.5", optarg);
                        a->options |= OPT_DURATION;
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

        *ret_verb = verb;
        return 1;
}

int main(int argc, char *argv[]) {
        _cleanup_(args_done) Args a = { .symbolic = -1 };
        const Verb *verb = NULL;
        int r;

        r = parse_args(argc, argv, &a, &verb);
        if (r == -ENOMEM)
                return EXIT_FAILURE;
        if (r <= 0)
                return r < 0 ? EXIT_USAGE : EXIT_SUCCESS;

        r = verb->run(&a, argv + optind + 1, argc - optind - 1);

        /* Output the user asked for that never arrived is a failure, e.g. on a full disk. */
        if (fflush(stdout) != 0 || ferror(stdout)) {
                log_error_errno(-errno, "cannot write to standard output: %m");
                return r == EXIT_SUCCESS ? EXIT_FAILURE : r;
        }
        return r;
}
