/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * tpctl, the command-line client of tpd. Each command is one Varlink call on a fresh connection;
 * `stream` upgrades its connection and then copies the daemon's NDJSON to stdout without parsing it.
 * Here: the commands, the options of all of them, and the small commands; the larger ones have
 * rooms of their own (stream.c, record.c, replay.c, convert.c, metrics.c, top.c, aggregate.c,
 * export.c), each with its options, and the options several commands share are options.c's.
 */

#include <assert.h>
#include <getopt.h>
#include <json-c/json.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "aggregate.h"
#include "build-config.h"
#include "connection.h"
#include "convert.h"
#include "export.h"
#include "message.h"
#include "metrics.h"
#include "options.h"
#include "output.h"
#include "record.h"
#include "replay.h"
#include "stream.h"
#include "terminal.h"
#include "top.h"
#include "tpd-protocol.h"

/* The longest getopt table of all rooms' options together. */
#define TPCTL_OPTIONS_MAX 64U

static inline void json_object_putp(json_object **j) {
        json_object_put(*j);
}

static bool arg_all;

/* Sends method with params (taken over) and prints the reply: as JSON with --json, else with print
 * (if any). A long reply (paged) goes through the pager on a terminal, as systemctl's lists do. */
static int run_call_paged(const CommonOptions *a, const char *method, json_object *params,
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

static int run_call(const CommonOptions *a, const char *method, json_object *params,
                    void (*print)(json_object *)) {
        return run_call_paged(a, method, params, print, false);
}

static int verb_list(const CommonOptions *a, char **args, size_t n) {
        _cleanup_(json_object_putp) json_object *params = json_object_new_object();

        if (!params || (n > 0 && json_add(params, "pattern", json_object_new_string(args[0])) < 0))
                return connection_exit_status(log_oom());
        return run_call_paged(a, TPD_METHOD("ListEvents"), TAKE_PTR(params), print_list, true);
}

static int verb_describe(const CommonOptions *a, char **args, size_t n) {
        _cleanup_(json_object_putp) json_object *params = json_object_new_object();

        if (!params || json_add(params, "event", json_object_new_string(args[0])) < 0)
                return connection_exit_status(log_oom());
        return run_call(a, TPD_METHOD("DescribeEvent"), TAKE_PTR(params), print_describe);
}

/* The events to enable and -f: the selection's parameters, as enable takes no other option. */
static int verb_enable(const CommonOptions *a, char **args, size_t n) {
        json_object *params = selection_params(a, args, n);

        if (!params)
                return connection_exit_status(log_oom());
        return run_call(a, TPD_METHOD("Enable"), params, NULL);
}

static int verb_disable(const CommonOptions *a, char **args, size_t n) {
        json_object *params;

        if (n == 0 && !arg_all)
                return usage_error("disable needs EVENT... or --all");
        if (n > 0 && arg_all)
                return usage_error("disable takes either EVENT... or --all, not both");

        params = arg_all ? json_object_new_object() : selection_params(a, args, n);
        if (!params || (arg_all && json_add(params, "all", json_object_new_boolean(true)) < 0)) {
                json_object_put(params);
                return connection_exit_status(log_oom());
        }
        return run_call(a, TPD_METHOD("Disable"), params, NULL);
}

static int verb_status(const CommonOptions *a, char **args, size_t n) {
        _cleanup_(json_object_putp) json_object *params = json_object_new_object();

        if (!params)
                return connection_exit_status(log_oom());
        return run_call_paged(a, TPD_METHOD("GetStatus"), TAKE_PTR(params), print_status, true);
}

static int verb_call(const CommonOptions *a, char **args, size_t n) {
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

static const OptionSpec disable_specs[] = {
        { "all", 0, no_argument, 0 },
};

static int disable_parse_option(const OptionSpec *spec, const char *arg) {
        arg_all = true;
        return 0;
}

static const OptionTable disable_option_table = OPTION_TABLE(disable_specs, disable_parse_option);

typedef struct Verb {
        const char *name;
        size_t min_args;
        size_t max_args;
        unsigned shared;        /* the shared options it takes, as OPTION_* bits */
        const OptionTable *own; /* its own options */
        int (*run)(const CommonOptions *a, char **args, size_t n);
} Verb;

static const Verb verbs[] = {
        { "list", 0, 1, 0, NULL, verb_list },
        { "describe", 1, 1, 0, NULL, verb_describe },
        { "enable", 1, SIZE_MAX, OPTION_FILTER, NULL, verb_enable },
        { "disable", 0, SIZE_MAX, 0, &disable_option_table, verb_disable },
        { "status", 0, 0, 0, NULL, verb_status },
        { "stream", 0, SIZE_MAX, STREAM_OPTIONS, &stream_option_table, stream_verb },
        { "call", 1, 2, 0, NULL, verb_call },
        { "record", 0, SIZE_MAX, RECORD_OPTIONS, &record_option_table, record_verb },
        { "replay", 1, SIZE_MAX, REPLAY_OPTIONS, NULL, replay_verb },
        { "convert", 2, 2, OPTION_FORMAT, NULL, convert_verb },
        { "metrics", 0, 0, 0, &metrics_option_table, metrics_verb },
        { "top", 0, SIZE_MAX, OPTION_EVENT | OPTION_BY, &top_option_table, top_verb },
        { "export", 0, 1, EXPORT_OPTIONS, &export_option_table, export_verb },
        { "hist", 1, 1, AGGREGATE_OPTIONS, &aggregate_option_table, hist_verb },
        { "count", 1, SIZE_MAX, AGGREGATE_OPTIONS, &aggregate_option_table, count_verb },
        { "latency", 2, 2, AGGREGATE_OPTIONS, &aggregate_option_table, latency_verb },
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
               "  stream [EVENT...] -- CMD   Run CMD, printing the records of it and what it forks\n"
               "                             (--follow) until it exits; exit with its status\n"
               "  record -o FILE [EVENT...]  Record to a trace-cmd data file (or NDJSON) until "
               "interrupted,\n"
               "                             --duration or --size; without EVENT or -e, the enabled events\n"
               "  record -o FILE [EVENT...] -- CMD\n"
               "                             Run CMD, recording it and what it forks until it exits\n"
               "  replay FILE [EVENT...]     Print a capture's records as stream would have: FILE is a\n"
               "                             trace-cmd data file (.dat) or stream's NDJSON\n"
               "  convert IN OUT             Write a capture (.dat or NDJSON) as a Perfetto trace (OUT\n"
               "                             named *.perfetto-trace or *.pftrace, or --format=perfetto),\n"
               "                             or NDJSON as a data file (*.dat, or --format=dat)\n"
               "  metrics                    Print tpd's counters as Prometheus metrics (text format,\n"
               "                             for node_exporter's textfile collector)\n"
               "  call METHOD [PARAMETERS]   Call a Varlink method with a JSON object and print the reply\n"
               "                             as JSON (an error reply whole); bare METHODs are in\n"
               "                             %s\n"
               "  top                        Show events and their busiest processes by rate, refreshed\n"
               "                             every second; keys r t l n sort by rate, total, lost, name,\n"
               "                             q quits; lines of key=value when stdout is no terminal\n"
               "  top [EVENT...] -- CMD      Run CMD, counting the records of it and what it forks by\n"
               "                             event and process; the last counts stay\n"
               "  export nats://HOST:PORT[,…] | export --servers-file=FILE\n"
               "                             Publish the records into NATS JetStream until interrupted,\n"
               "                             as PREFIX.HOST.SYSTEM.EVENT and PREFIX.HOST.lost\n"
               "  hist EVENT --field FIELD   Show a histogram of FIELD's values (log2 buckets, or\n"
               "                             --linear), counted by tpd, refreshed every --interval\n"
               "  count EVENT...             Show the records counted by tpd, by --by's key\n"
               "  latency FROM TO --key FROMFIELD=TOFIELD\n"
               "                             Show a histogram of the ns from a record of FROM to the\n"
               "                             next of TO whose TOFIELD equals its FROMFIELD\n"
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
               "     --follow                stream, record: -p's processes and the tasks they fork from\n"
               "                             now on\n"
               "     --cgroup=PATH           stream, record: only records of the tasks of the cgroup v2\n"
               "                             subtree PATH (/system.slice/ssh.service), as they come and go\n"
               "     --unit=NAME             stream, record: --cgroup of the systemd unit NAME\n"
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
               "     --transport=auto|shm|socket\n"
               "                             stream: read from tpd's shared memory (auto: if tpd\n"
               "                             agrees) or over the socket (the default)\n"
               "     --with=cgroup           stream: add \"cgroup\", the cgroup each record's task\n"
               "                             was in then\n"
               "     --stack                 stream: add \"stack\", the kernel's stack of each record\n"
               "                             (named events only); record: keep the kernel's stacks\n"
               "                             in the file (root or KernelAddresses=yes)\n"
               "  -o --output=FILE           record: the file; .ndjson, .json or .jsonl mean NDJSON\n"
               "     --format=dat|ndjson     record: the file's format, whatever its name\n"
               "     --format=perfetto|dat   convert: a Perfetto trace or a data file, whatever OUT's name\n"
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
               "     --by=pid|cgroup|unit    top: rows of processes (default), or summed by their\n"
               "                             cgroup or systemd unit\n"
               "  hist, count and latency also take -p, -c, -f, --follow, --cgroup and --unit (which\n"
               "  records), --duration (then the final snapshot, and exit), and:\n"
               "     --field=FIELD           hist: the integer field (or a string's leading integer)\n"
               "     --linear=MIN,MAX,STEP   hist, latency: buckets [MIN+i*STEP, MIN+(i+1)*STEP), not\n"
               "                             log2\n"
               "     --key=FROMFIELD=TOFIELD\n"
               "                             latency: the fields that pair a record of FROM with TO's\n"
               "     --by=comm|pid|cpu|FIELD\n"
               "                             one group per command name, pid, CPU or value of FIELD\n"
               "     --interval=SECONDS      a snapshot every SECONDS (default 1, 0.1 to 3600)\n"
               "     --json                  one line of JSON per snapshot (NDJSON), its parameters\n"
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
               "  0   success; also when a stream or an aggregation ends by SIGINT or SIGTERM, or its\n"
               "      reader goes away\n"
               "      (stream -- CMD: CMD's status)\n"
               "  1   tpd answered with an error, or another failure\n"
               "  2   wrong usage\n"
               "  %d  tpd cannot be reached, or it closed the stream\n",
               TPD_INTERFACE, TPD_SOCKET_ENV, TPD_SOCKET_DEFAULT, EXPORT_SUBJECT_PREFIX_DEFAULT,
               EXPORT_BUFFER_SIZE_DEFAULT >> 20, EXPORT_BATCH_SIZE_DEFAULT >> 10,
               EXPORT_BATCH_SIZE_MAX >> 10, TPD_EXIT_DAEMON_GONE);
}

enum {
        ARG_HELP,
        ARG_VERSION,
};

static const OptionSpec global_specs[] = {
        { "help", 'h', no_argument, ARG_HELP },
        { "version", 0, no_argument, ARG_VERSION },
};

static int global_parse_option(const OptionSpec *spec, const char *arg) {
        if (spec->id == ARG_HELP)
                help();
        else
                printf("tpctl %s\n", TPD_VERSION);
        return 1;
}

static const OptionTable global_option_table = OPTION_TABLE(global_specs, global_parse_option);

/* Every option of every command: one may come before its command or after it. */
static const OptionTable *const option_tables[] = {
        &global_option_table, &common_option_table, &disable_option_table,
        &stream_option_table, &record_option_table, &metrics_option_table,
        &top_option_table,    &export_option_table, &aggregate_option_table,
};

typedef struct Option {
        const OptionTable *table;
        const OptionSpec *spec;
} Option;

/* getopt_long()'s tables of all options; the value of a long option is 0x100 + its index in all. */
static size_t options_build(Option *all, struct option *longopts, char *shortopts) {
        size_t n = 0, n_long = 0, n_short = 0;

        /* ':' first: a missing argument is told apart from an unknown option. */
        shortopts[n_short++] = ':';
        for (size_t t = 0; t < ELEMENTSOF(option_tables); t++)
                for (size_t i = 0; i < option_tables[t]->n_specs; i++) {
                        const OptionSpec *spec = &option_tables[t]->specs[i];

                        assert(n < TPCTL_OPTIONS_MAX);
                        all[n] = (Option){ option_tables[t], spec };
                        if (spec->name)
                                longopts[n_long++] =
                                        (struct option){ spec->name, spec->has_arg, NULL, 0x100 + (int) n };
                        if (spec->short_name) {
                                shortopts[n_short++] = (char) spec->short_name;
                                if (spec->has_arg != no_argument)
                                        shortopts[n_short++] = ':';
                                if (spec->has_arg == optional_argument)
                                        shortopts[n_short++] = ':';
                        }
                        n++;
                }
        longopts[n_long] = (struct option){};
        shortopts[n_short] = 0;
        return n;
}

static const Option *option_find(const Option *all, size_t n, int c) {
        if (c >= 0x100)
                return (size_t) (c - 0x100) < n ? &all[c - 0x100] : NULL;
        for (size_t i = 0; i < n; i++)
                if (all[i].spec->short_name == c)
                        return &all[i];
        return NULL;
}

static bool option_applies(const Option *o, const Verb *verb) {
        if (o->table == &global_option_table || o->table == verb->own)
                return true;
        return o->table == &common_option_table &&
               (o->spec->applies == 0 || (verb->shared & o->spec->applies));
}

/* The command, its arguments' count and the options given (given, n_given) that it must take. */
static int verb_check(const Verb *verb, size_t n, const Option *const *given, size_t n_given) {
        if (n < verb->min_args)
                return log_usage("%s needs an argument", verb->name);
        if (n > verb->max_args)
                return log_usage("too many arguments for %s", verb->name);
        for (size_t i = 0; i < n_given; i++) {
                char shown[64];

                if (option_applies(given[i], verb))
                        continue;
                if (given[i]->spec->shown)
                        return log_usage("%s does not apply to %s", given[i]->spec->shown, verb->name);
                (void) snprintf(shown, sizeof(shown), "--%s", given[i]->spec->name);
                return log_usage("%s does not apply to %s", shown, verb->name);
        }
        return 0;
}

/* Returns 1 to run *ret_verb, 0 to exit successfully (--help, --version), negative on usage errors. */
static int parse_args(int argc, char *argv[], const Verb **ret_verb) {
        Option all[TPCTL_OPTIONS_MAX];
        struct option longopts[TPCTL_OPTIONS_MAX + 1];
        char shortopts[3 * TPCTL_OPTIONS_MAX + 2];
        _cleanup_free_ const Option **given = calloc(argc, sizeof(*given));
        size_t n_all = options_build(all, longopts, shortopts), n_given = 0;
        const Verb *verb = NULL;
        int c, r;

        if (!given)
                return log_oom();
        /* No '+': options may follow the command (`tpctl stream -e sched:sched_switch`). */
        opterr = 0;
        while ((c = getopt_long(argc, argv, shortopts, longopts, NULL)) >= 0) {
                const Option *o = c == ':' ? NULL : option_find(all, n_all, c);

                if (c == ':')
                        return log_usage("option '%s' needs an argument", argv[optind - 1]);
                if (!o) {
                        if (optopt > 0 && optopt < 0x100)
                                return log_usage("unknown option '-%c'", optopt);
                        return log_usage("unknown option '%s'", argv[optind - 1]);
                }
                r = o->table->parse(o->spec, optarg);
                if (r != 0)
                        return r > 0 ? 0 : r;
                given[n_given++] = o;
        }

        if (optind >= argc)
                return log_usage("missing command");
        for (size_t i = 0; i < ELEMENTSOF(verbs); i++)
                if (streq(argv[optind], verbs[i].name))
                        verb = &verbs[i];
        if (!verb)
                return log_usage("unknown command '%s'", argv[optind]);
        r = verb_check(verb, argc - optind - 1, given, n_given);
        if (r < 0)
                return r;
        *ret_verb = verb;
        return 1;
}

/* The first "--" starts a command (`tpctl stream -e EVENT -- make -j8`): what follows is its, not
 * tpctl's, whatever it looks like. Returns the count of tpctl's own words. */
static int split_command(int argc, char *argv[]) {
        for (int i = 1; i < argc; i++)
                if (streq(argv[i], "--")) {
                        common_options_set_command(argv + i + 1, (size_t) (argc - i - 1));
                        return i;
                }
        return argc;
}

static int run(int argc, char *argv[]) {
        const Verb *verb = NULL;
        int r, p, n = split_command(argc, argv);

        r = common_options_init(argc);
        if (r >= 0)
                r = parse_args(n, argv, &verb);
        if (r == -ENOMEM)
                return EXIT_FAILURE;
        if (r <= 0)
                return r < 0 ? EXIT_USAGE : EXIT_SUCCESS;
        if (n < argc && !streq(verb->name, "stream") && !streq(verb->name, "record") &&
            !streq(verb->name, "top"))
                return usage_error("-- COMMAND applies to stream, record and top");
        if (n < argc && n == argc - 1)
                return usage_error("-- needs a command to run");
        argc = n;
        r = common_options_resolve_unit();
        if (r != 0)
                return r;

        r = verb->run(common_options(), argv + optind + 1, argc - optind - 1);

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

int main(int argc, char *argv[]) {
        int r = run(argc, argv);

        common_options_done();
        return r;
}
