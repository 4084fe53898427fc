/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "aggregate.h"
#include "connection.h"
#include "histogram.h"
#include "message.h"
#include "tpd-protocol.h"

/* tpd's bounds of interval_ms. */
#define AGGREGATE_INTERVAL_MIN_MS 100
#define AGGREGATE_INTERVAL_MAX_MS 3600000

static struct {
        const char *field;
        HistogramLayout layout;
        const char *key;      /* FROMFIELD=TOFIELD */
        size_t key_split;     /* the index of its '=' */
        uint64_t interval_ms; /* 0: tpd's default */
} opt;

enum {
        ARG_FIELD,
        ARG_LINEAR,
        ARG_KEY,
        ARG_INTERVAL,
};

static const OptionSpec aggregate_specs[] = {
        { "field", 0, required_argument, ARG_FIELD },
        { "linear", 0, required_argument, ARG_LINEAR },
        { "key", 0, required_argument, ARG_KEY },
        { "interval", 0, required_argument, ARG_INTERVAL },
};

/* One integer of --linear, negative ones too, up to the next ',' (or the end, for the last). */
static int parse_linear_number(const char **s, bool last, int64_t *ret) {
        char *end;
        long long v;

        if (!(**s >= '0' && **s <= '9') && **s != '-')
                return -EINVAL;
        errno = 0;
        v = strtoll(*s, &end, 10);
        if (errno != 0 || end == *s || *end != (last ? 0 : ','))
                return -EINVAL;
        *ret = v;
        *s = end + !last;
        return 0;
}

static int parse_linear(const char *s, HistogramLayout *ret) {
        HistogramLayout l = { .linear = true };

        if (parse_linear_number(&s, false, &l.min) < 0 || parse_linear_number(&s, false, &l.max) < 0 ||
            parse_linear_number(&s, true, &l.step) < 0 || l.step <= 0 || l.max <= l.min)
                return -EINVAL;
        *ret = l;
        return 0;
}

static int aggregate_parse_option(const OptionSpec *spec, const char *arg) {
        const char *eq;
        double v;

        switch (spec->id) {
        case ARG_FIELD:
                if (!*arg)
                        return log_usage("--field needs a field's name");
                opt.field = arg;
                return 0;
        case ARG_LINEAR:
                if (parse_linear(arg, &opt.layout) < 0)
                        return log_usage("invalid --linear '%s': MIN,MAX,STEP, integers with MIN < MAX and "
                                         "STEP from 1",
                                         arg);
                return 0;
        case ARG_KEY:
                eq = strchr(arg, '=');
                if (!eq || eq == arg || !eq[1])
                        return log_usage("invalid --key '%s': FROMFIELD=TOFIELD", arg);
                opt.key = arg;
                opt.key_split = (size_t) (eq - arg);
                return 0;
        case ARG_INTERVAL:
                if (parse_decimal(arg, AGGREGATE_INTERVAL_MIN_MS / 1000.0,
                                  AGGREGATE_INTERVAL_MAX_MS / 1000.0, &v) < 0)
                        return log_usage("invalid --interval '%s': seconds from 0.1 to 3600", arg);
                opt.interval_ms = (uint64_t) (v * 1000 + 0.5);
                return 0;
        }
        return -EINVAL;
}

const OptionTable aggregate_option_table = OPTION_TABLE(aggregate_specs, aggregate_parse_option);

static json_object *aggregate_linear(void) {
        json_object *o = json_object_new_object();

        if (o && (json_add(o, "min", json_object_new_int64(opt.layout.min)) < 0 ||
                  json_add(o, "max", json_object_new_int64(opt.layout.max)) < 0 ||
                  json_add(o, "step", json_object_new_int64(opt.layout.step)) < 0)) {
                json_object_put(o);
                return NULL;
        }
        return o;
}

static json_object *aggregate_key(void) {
        json_object *a = json_object_new_array_ext(2);

        if (a && (json_object_array_add(a, json_object_new_string_len(opt.key, (int) opt.key_split)) < 0 ||
                  json_object_array_add(a, json_object_new_string(opt.key + opt.key_split + 1)) < 0)) {
                json_object_put(a);
                return NULL;
        }
        return a;
}

/* The selection's parameters (options.h) and the aggregation's; the events are the arguments. */
static json_object *aggregate_params(const CommonOptions *c, const char *kind, char **args, size_t n) {
        json_object *params = selection_params(c, args, n);
        /* tpd counts in ms: a shorter --duration still asks for one. */
        uint64_t duration_ms = c->duration_usec > 0 ? MAX((c->duration_usec + 500) / 1000, (uint64_t) 1) : 0;

        if (params &&
            (json_add(params, "kind", json_object_new_string(kind)) < 0 ||
             (opt.field && json_add(params, "field", json_object_new_string(opt.field)) < 0) ||
             (opt.key && json_add(params, "key", aggregate_key()) < 0) ||
             (c->by && json_add(params, "by", json_object_new_string(c->by)) < 0) ||
             (opt.layout.linear && json_add(params, "linear", aggregate_linear()) < 0) ||
             (opt.interval_ms > 0 &&
              json_add(params, "interval_ms", json_object_new_int64((int64_t) opt.interval_ms)) < 0) ||
             (duration_ms > 0 &&
              json_add(params, "duration_ms", json_object_new_int64((int64_t) duration_ms)) < 0))) {
                json_object_put(params);
                return NULL;
        }
        return params;
}

static void aggregate_on_signal(int sig) {
        /* Nothing to do here: the signal ends the wait for tpd's next snapshot (connection.h). */
}

/* A snapshot as JSON on one line, or as text after clear. It goes out with write(), not stdio: a
 * reader gone (| head) must end tpctl quietly, not leave stdout failed for its last check. Returns 0
 * or a negative errno. */
static int aggregate_print(const CommonOptions *c, json_object *snapshot, const char *clear) {
        _cleanup_free_ char *text = NULL;
        size_t size = 0;
        FILE *f = open_memstream(&text, &size);

        if (!f)
                return -ENOMEM;
        if (c->json != JSON_OFF)
                fprintf(f, "%s\n",
                        json_object_to_json_string_ext(snapshot, JSON_C_TO_STRING_PLAIN |
                                                                         JSON_C_TO_STRING_NOSLASHESCAPE));
        else {
                fputs(clear, f);
                histogram_render(f, snapshot, &opt.layout);
        }
        if (fclose(f) != 0)
                return -ENOMEM;
        return write_all(STDOUT_FILENO, text, size);
}

static bool reply_final(json_object *params) {
        json_object *v;

        return json_object_object_get_ex(params, "final", &v) && json_object_is_type(v, json_type_boolean) &&
               json_object_get_boolean(v);
}

/*
 * Shows each snapshot until the final one or a signal, then (text on no terminal) the last one.
 * Replies with "record" carry notices between snapshots: they change no count and are not shown,
 * with --json neither, so that every line is a snapshot.
 */
static int aggregate_run(const CommonOptions *c, const char *kind, char **args, size_t n) {
        _cleanup_(connection_done) Connection conn = CONNECTION_NULL;
        _cleanup_(varlink_reply_done) VarlinkReply reply = {};
        struct sigaction sa = { .sa_handler = aggregate_on_signal }, sa_ignore = { .sa_handler = SIG_IGN };
        bool tty = isatty(STDOUT_FILENO);
        json_object *params, *last = NULL;
        sigset_t block, wait_mask;
        int r, w = 0;

        if (c->follow && c->n_pids == 0)
                return usage_error("--follow follows the processes of -p PID: name at least one");
        params = aggregate_params(c, kind, args, n);
        if (!params)
                return connection_exit_status(log_oom());

        /* Blocked except while waiting for tpd, so that a signal cannot slip in before a wait. */
        sigemptyset(&block);
        sigaddset(&block, SIGINT);
        sigaddset(&block, SIGTERM);
        (void) sigprocmask(SIG_BLOCK, &block, &wait_mask);
        sigdelset(&wait_mask, SIGINT);
        sigdelset(&wait_mask, SIGTERM);
        (void) sigaction(SIGINT, &sa, NULL);
        (void) sigaction(SIGTERM, &sa, NULL);
        (void) sigaction(SIGPIPE, &sa_ignore, NULL);

        conn.more = true;
        conn.wait_mask = &wait_mask;
        r = connection_call(&conn, c->socket_path, TPD_METHOD("Aggregate"), params, false, &reply);
        while (r == 0) {
                if (!json_object_object_get_ex(reply.parameters, "record", NULL)) {
                        json_object_put(last);
                        last = json_object_get(reply.parameters);
                        /* On a terminal the screen, not its scrollback: the last snapshot stays. */
                        w = c->json != JSON_OFF || tty ? aggregate_print(c, last, "\033[H\033[2J") : 0;
                        if (w < 0)
                                break;
                }
                if (!reply.continues || reply_final(reply.parameters))
                        break;
                r = connection_next(&conn, c->socket_path, &reply);
        }

        /* Text on no terminal: the last snapshot, also when tpd went away after it. */
        if (w == 0 && r != 1 && last && c->json == JSON_OFF && !tty)
                w = aggregate_print(c, last, "");
        json_object_put(last);
        /* A closed stdout (| head) ends quietly, as stream does; a signal (-EINTR) is the way to end. */
        if (w < 0 && w != -EPIPE)
                return log_error_errno(w, "cannot write to standard output: %m"), EXIT_FAILURE;
        if (w < 0 || r == 0 || r == -EINTR)
                return EXIT_SUCCESS;
        /* An error reply or a failure of the connection, said already. */
        return connection_exit_status(r);
}

/* The first of --field, --linear and --key given that a command does not take, or NULL. */
static const char *aggregate_misplaced(bool field, bool linear, bool key) {
        if (opt.field && !field)
                return "--field";
        if (opt.layout.linear && !linear)
                return "--linear";
        if (opt.key && !key)
                return "--key";
        return NULL;
}

int hist_verb(const CommonOptions *c, char **args, size_t n) {
        const char *misplaced = aggregate_misplaced(true, true, false);

        if (misplaced)
                return usage_error("%s does not apply to hist", misplaced);
        if (!opt.field)
                return usage_error("hist needs --field FIELD: the integer field whose values to count");
        return aggregate_run(c, "hist", args, n);
}

int count_verb(const CommonOptions *c, char **args, size_t n) {
        const char *misplaced = aggregate_misplaced(false, false, false);

        if (misplaced)
                return usage_error("%s does not apply to count", misplaced);
        return aggregate_run(c, "count", args, n);
}

int latency_verb(const CommonOptions *c, char **args, size_t n) {
        const char *misplaced = aggregate_misplaced(false, true, true);

        if (misplaced)
                return usage_error("%s does not apply to latency", misplaced);
        if (!opt.key)
                return usage_error(
                        "latency needs --key FROMFIELD=TOFIELD: the field of FROM that a field of TO "
                        "must equal");
        return aggregate_run(c, "latency", args, n);
}
