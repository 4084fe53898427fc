/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include "connection.h"
#include "copy.h"
#include "core/clock.h"
#include "lines.h"
#include "message.h"
#include "stream.h"
#include "tpd-protocol.h"

static struct {
        int symbolic;   /* -1: tpd's default (Symbolic=) */
        uint64_t count; /* stop after this many records */
        LinesTime time;
        bool ordered;
        uint64_t order_delay_ms; /* 0: from tpd's flush interval */
} opt = { .symbolic = -1 };

enum {
        ARG_SYMBOLIC,
        ARG_COUNT,
        ARG_TIME,
        ARG_ORDERED,
};

static const OptionSpec stream_specs[] = {
        { "symbolic", 0, optional_argument, ARG_SYMBOLIC },
        { "count", 0, required_argument, ARG_COUNT },
        { "time", 0, required_argument, ARG_TIME },
        { "ordered", 0, optional_argument, ARG_ORDERED },
};

static int stream_parse_option(const OptionSpec *spec, const char *arg) {
        switch (spec->id) {
        case ARG_SYMBOLIC:
                if (!arg || streq(arg, "yes"))
                        opt.symbolic = 1;
                else if (streq(arg, "no"))
                        opt.symbolic = 0;
                else
                        return log_usage("invalid --symbolic '%s': yes or no", arg);
                return 0;
        case ARG_COUNT:
                if (parse_u64(arg, &opt.count) < 0 || opt.count == 0)
                        return log_usage("invalid count '%s': a number of records from 1", arg);
                return 0;
        case ARG_TIME:
                if (streq(arg, "boot"))
                        opt.time = LINES_TIME_BOOT;
                else if (streq(arg, "iso"))
                        opt.time = LINES_TIME_ISO;
                else if (streq(arg, "relative"))
                        opt.time = LINES_TIME_RELATIVE;
                else
                        return log_usage("invalid --time '%s': boot, iso or relative", arg);
                return 0;
        case ARG_ORDERED:
                opt.ordered = true;
                if (arg && (parse_u64(arg, &opt.order_delay_ms) < 0 || opt.order_delay_ms == 0 ||
                            opt.order_delay_ms > 3600 * 1000))
                        return log_usage("invalid --ordered delay '%s': milliseconds from 1", arg);
                return 0;
        }
        return -EINVAL;
}

const OptionTable stream_option_table = OPTION_TABLE(stream_specs, stream_parse_option);

static void stream_on_signal(int sig) {
        /* Stream data never sits in stdio buffers, so nothing is lost by leaving right here; a flag
         * checked between syscalls could miss a signal that arrives just before a blocking splice(). */
        _exit(EXIT_SUCCESS);
}

/* What the stream's lines need from the options and tpd's reply: the trace clock, its offset to
 * the wall clock, the flush interval and the CPUs. */
static LinesOptions stream_lines_options(const CommonOptions *c, json_object *reply) {
        LinesOptions o = {
                .count = opt.count,
                .duration_usec = c->duration_usec,
                .time = opt.time,
                .ordered = opt.ordered,
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
                (opt.order_delay_ms > 0 ? opt.order_delay_ms : (uint64_t) i + MAX((uint64_t) i, 50)) *
                1000000ULL;
        return o;
}

static json_object *stream_params(const CommonOptions *c, char **args, size_t n) {
        json_object *params = selection_params(c, args, n);

        if (params && ((opt.symbolic >= 0 &&
                        json_add(params, "symbolic", json_object_new_boolean(opt.symbolic)) < 0) ||
                       (opt.time == LINES_TIME_ISO &&
                        json_add(params, "realtime", json_object_new_boolean(true)) < 0))) {
                json_object_put(params);
                return NULL;
        }
        return params;
}

int stream_verb(const CommonOptions *c, char **args, size_t n) {
        _cleanup_(connection_done) Connection conn = CONNECTION_NULL;
        _cleanup_(varlink_reply_done) VarlinkReply reply = {};
        struct sigaction sa_exit = { .sa_handler = stream_on_signal };
        struct sigaction sa_ignore = { .sa_handler = SIG_IGN };
        json_object *params = stream_params(c, args, n);
        int r;

        if (!params)
                return connection_exit_status(log_oom());

        /* A closed stdout (| head) must show up as EPIPE, to end quietly with 0. */
        (void) sigaction(SIGPIPE, &sa_ignore, NULL);
        (void) sigaction(SIGINT, &sa_exit, NULL);
        (void) sigaction(SIGTERM, &sa_exit, NULL);

        r = connection_call(&conn, c->socket_path, TPD_METHOD("Stream"), params, true, &reply);
        if (r != 0)
                return connection_exit_status(r);

        /* What came with the reply in the same read() is already stream data. */
        if (opt.count > 0 || c->duration_usec > 0 || opt.time != LINES_TIME_BOOT || opt.ordered) {
                LinesOptions o = stream_lines_options(c, reply.parameters);

                varlink_reply_done(&reply);
                r = lines_stream(conn.fd, STDOUT_FILENO, conn.in.data + conn.in.consumed,
                                 varlink_buffer_pending(&conn.in), &o);
                if (r == 1 || r == -EPIPE)
                        return EXIT_SUCCESS;
        } else {
                varlink_reply_done(&reply);
                r = copy_stream(conn.fd, STDOUT_FILENO, conn.in.data + conn.in.consumed,
                                varlink_buffer_pending(&conn.in));
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
