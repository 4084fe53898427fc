/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include "command.h"
#include "connection.h"
#include "copy.h"
#include "core/clock.h"
#include "lines.h"
#include "message.h"
#include "perfetto.h"
#include "shm.h"
#include "stream.h"
#include "tpd-protocol.h"

typedef enum StreamTransport {
        STREAM_TRANSPORT_SOCKET,
        STREAM_TRANSPORT_SHM,
        STREAM_TRANSPORT_AUTO, /* shared memory where tpd agrees, else the socket */
} StreamTransport;

/* With --format=perfetto: the trace written to stdout in place of the lines. */
static PerfettoWriter *perfetto;

/* What --transport is without the option. */
#define STREAM_TRANSPORT_DEFAULT STREAM_TRANSPORT_AUTO

static struct {
        StreamTransport transport;
        int symbolic;   /* -1: tpd's default (Symbolic=) */
        uint64_t count; /* stop after this many records */
        LinesTime time;
        bool ordered;
        uint64_t order_delay_ms; /* 0: from tpd's flush interval */
        bool with_cgroup;        /* records carry their task's cgroup */
} opt = { .transport = STREAM_TRANSPORT_DEFAULT, .symbolic = -1 };

enum {
        ARG_SYMBOLIC,
        ARG_COUNT,
        ARG_TIME,
        ARG_ORDERED,
        ARG_TRANSPORT,
        ARG_WITH,
};

static const OptionSpec stream_specs[] = {
        { "symbolic", 0, optional_argument, ARG_SYMBOLIC },
        { "count", 0, required_argument, ARG_COUNT },
        { "time", 0, required_argument, ARG_TIME },
        { "ordered", 0, optional_argument, ARG_ORDERED },
        { "transport", 0, required_argument, ARG_TRANSPORT },
        { "with", 0, required_argument, ARG_WITH },
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
        case ARG_TRANSPORT:
                if (streq(arg, "auto"))
                        opt.transport = STREAM_TRANSPORT_AUTO;
                else if (streq(arg, "shm"))
                        opt.transport = STREAM_TRANSPORT_SHM;
                else if (streq(arg, "socket"))
                        opt.transport = STREAM_TRANSPORT_SOCKET;
                else
                        return log_usage("invalid --transport '%s': auto, shm or socket", arg);
                return 0;
        case ARG_WITH:
                if (!streq(arg, "cgroup"))
                        return log_usage("invalid --with '%s': cgroup", arg);
                opt.with_cgroup = true;
                return 0;
        }
        return -EINVAL;
}

const OptionTable stream_option_table = OPTION_TABLE(stream_specs, stream_parse_option);

static void stream_on_signal(int sig) {
        /* Stream data never sits in stdio buffers (nor in shm.c's while it waits), so nothing is lost by
         * leaving right here; a flag checked between syscalls could miss a signal that arrives just before a
         * blocking splice(). */
        _exit(EXIT_SUCCESS);
}

static int perfetto_sink(void *userdata, const char *line, size_t n) {
        return perfetto_writer_add_line(userdata, line, n);
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
        if (perfetto) {
                o.sink = perfetto_sink;
                o.sink_userdata = perfetto;
        }
        return o;
}

/* Stream's "with": what records carry beyond their fields. */
static json_object *stream_with(void) {
        json_object *with = json_object_new_array();

        if (with && json_object_array_add(with, json_object_new_string("cgroup")) < 0) {
                json_object_put(with);
                return NULL;
        }
        return with;
}

static json_object *stream_params(const CommonOptions *c, char **args, size_t n, bool shm) {
        json_object *params = selection_params(c, args, n);

        if (params && ((opt.symbolic >= 0 &&
                        json_add(params, "symbolic", json_object_new_boolean(opt.symbolic)) < 0) ||
                       (opt.time == LINES_TIME_ISO &&
                        json_add(params, "realtime", json_object_new_boolean(true)) < 0) ||
                       (shm && json_add(params, "transport", json_object_new_string("shm")) < 0) ||
                       (opt.with_cgroup && json_add(params, "with", stream_with()) < 0))) {
                json_object_put(params);
                return NULL;
        }
        return params;
}

/* Whether an error reply is a tpd's that predates the "transport" key refusing it. */
static bool stream_transport_refused(const VarlinkReply *reply) {
        const char *p = json_object_get_string(json_object_object_get(reply->parameters, "parameter"));

        return streq(reply->error, VARLINK_ERROR_INVALID_PARAMETER) && p && streq(p, "transport");
}

/* The Stream call again, over the socket, on a new connection (tpd ends the stream of the old
 * one). Returns as connection_call(). */
static int stream_call_socket(Connection *conn, const CommonOptions *c, char **args, size_t n,
                              VarlinkReply *reply) {
        json_object *params;

        connection_done(conn);
        *conn = CONNECTION_NULL;
        varlink_reply_done(reply);
        params = stream_params(c, args, n, false);
        if (!params)
                return log_oom();
        return connection_call(conn, c->socket_path, TPD_METHOD("Stream"), params, true, reply);
}

/* The Stream call, asking for shared memory unless --transport=socket; with auto, a tpd that does
 * not know the key is asked again without it. Returns as connection_call(). */
static int stream_call(Connection *conn, const CommonOptions *c, char **args, size_t n,
                       VarlinkReply *reply) {
        json_object *params = stream_params(c, args, n, opt.transport != STREAM_TRANSPORT_SOCKET);
        int r;

        if (!params)
                return log_oom();
        conn->keep_error = opt.transport == STREAM_TRANSPORT_AUTO;
        r = connection_call(conn, c->socket_path, TPD_METHOD("Stream"), params, true, reply);
        if (r != 1 || !conn->keep_error)
                return r;
        if (!stream_transport_refused(reply)) {
                connection_print_error(c->socket_path, reply);
                return 1;
        }
        return stream_call_socket(conn, c, args, n, reply);
}

/* Takes the shared memory tpd agreed to. With auto, memory tpctl cannot map (an address-space
 * limit) or a reply it cannot use falls back to the socket, with one message rather than
 * shm_setup()'s: 0 (*shm false after a fallback), or an exit status. */
static int stream_setup_shm(Shm *shm_reader, Connection *conn, const CommonOptions *c, char **args, size_t n,
                            VarlinkReply *reply, bool *shm) {
        bool fallback = opt.transport == STREAM_TRANSPORT_AUTO;
        int r;

        log_muted = fallback;
        r = shm_setup(shm_reader, conn, reply->parameters, opt.time == LINES_TIME_ISO);
        log_muted = false;
        if (r >= 0)
                return 0;
        if (!fallback)
                return EXIT_FAILURE;
        log_error_errno(r, "cannot read tpd's shared memory (%m): streaming over its socket instead");
        shm_done(shm_reader);
        *shm = false;
        r = stream_call_socket(conn, c, args, n, reply);
        return r == 0 ? 0 : connection_exit_status(r);
}

/* Whether tpd agreed to stream over shared memory. */
static bool stream_reply_shm(json_object *reply) {
        json_object *v;

        return json_object_object_get_ex(reply, "transport", &v) &&
               json_object_is_type(v, json_type_string) && streq(json_object_get_string(v), "shm");
}

/* Whether tpctl looks at the lines (lines.c) rather than copying them. */
static bool stream_uses_lines(const CommonOptions *c) {
        return perfetto || opt.count > 0 || c->duration_usec > 0 || opt.time != LINES_TIME_BOOT ||
               opt.ordered;
}

static int stream_over_shm(Shm *shm, VarlinkReply *reply, const CommonOptions *c) {
        if (stream_uses_lines(c)) {
                LinesOptions o = stream_lines_options(c, reply->parameters);

                varlink_reply_done(reply);
                return shm_lines(shm, STDOUT_FILENO, &o);
        }
        varlink_reply_done(reply);
        return shm_copy(shm, STDOUT_FILENO);
}

/* What came with the reply in the same read() is already stream data. */
static int stream_over_socket(Connection *conn, VarlinkReply *reply, const CommonOptions *c) {
        if (stream_uses_lines(c)) {
                LinesOptions o = stream_lines_options(c, reply->parameters);

                varlink_reply_done(reply);
                return lines_stream(conn->fd, STDOUT_FILENO, conn->in.data + conn->in.consumed,
                                    varlink_buffer_pending(&conn->in), &o);
        }
        varlink_reply_done(reply);
        return copy_stream(conn->fd, STDOUT_FILENO, conn->in.data + conn->in.consumed,
                           varlink_buffer_pending(&conn->in));
}

/* --format: NDJSON (the lines as tpd sends them), or a Perfetto trace, whose writer is made before
 * the call (stream_uses_lines() takes it) and started from its reply. 0, or an exit status. */
static int stream_format(const CommonOptions *c) {
        int r;

        if (!c->format || streq(c->format, "ndjson"))
                return 0;
        if (!streq(c->format, "perfetto"))
                return usage_error("--format takes ndjson or perfetto, not '%s'", c->format);
        if (opt.time != LINES_TIME_BOOT)
                return usage_error("--time and --format=perfetto: a Perfetto trace keeps tpd's ts");
        if (isatty(STDOUT_FILENO)) {
                log_error("a Perfetto trace is binary: not written to a terminal");
                log_hint("Redirect standard output to a file: tpctl stream --format=perfetto > x.pftrace");
                return EXIT_FAILURE;
        }
        opt.symbolic = 0; /* the trace takes the numbers */
        r = perfetto_writer_new(STDOUT_FILENO, &perfetto);
        if (r < 0)
                return log_error_errno(r, "cannot write the Perfetto trace: %m"), EXIT_FAILURE;
        return 0;
}

static int stream_perfetto_start(json_object *reply) {
        int r = perfetto ? perfetto_writer_start(perfetto, reply) : 0;

        if (r < 0)
                return log_error_errno(r, "cannot write the Perfetto trace: %m"), EXIT_FAILURE;
        return 0;
}

/* The end of the trace: what the stream's end left out, once it ended as it should (status). */
static int stream_perfetto_finish(int status) {
        int r = 0;

        if (!perfetto)
                return status;
        if (status == EXIT_SUCCESS || status == TPD_EXIT_DAEMON_GONE)
                r = perfetto_writer_finish(perfetto);
        perfetto = perfetto_writer_free(perfetto);
        if (r < 0) {
                log_error_errno(r, "cannot write the Perfetto trace: %m");
                return EXIT_FAILURE;
        }
        return status;
}

/* The Stream call of a command's stream (command_start_streamed()). */
typedef struct StreamCommandCall {
        Connection *conn;
        const CommonOptions *c;
        char **args;
        size_t n;
        VarlinkReply *reply;
} StreamCommandCall;

static int stream_command_call(void *userdata, pid_t pid, int *ret_fd) {
        StreamCommandCall *s = userdata;
        int p = (int) pid, r;
        CommonOptions own = common_options_following(s->c, &p);

        r = stream_call(s->conn, &own, s->args, s->n, s->reply);
        if (r != 0)
                return connection_exit_status(r);
        *ret_fd = s->conn->fd;
        return 0;
}

/* `tpctl stream -- CMD`: CMD and what it forks, until it exited and tpd sent everything it wrote
 * (command.h); tpctl exits as CMD did. */
static int stream_command(const CommonOptions *c, char **args, size_t n) {
        _cleanup_(connection_done) Connection conn = CONNECTION_NULL;
        _cleanup_(varlink_reply_done) VarlinkReply reply = {};
        struct sigaction sa_ignore = { .sa_handler = SIG_IGN };
        Command cmd = COMMAND_NULL;
        LinesOptions o;
        int r, status;

        if (c->n_pids > 0)
                return usage_error("-p and -- COMMAND: the command is the process to follow");
        if (opt.transport == STREAM_TRANSPORT_SHM)
                return usage_error(
                        "--transport=shm and -- COMMAND: a command's stream goes over the socket");
        (void) sigaction(SIGPIPE, &sa_ignore, NULL);
        opt.transport = STREAM_TRANSPORT_SOCKET;
        r = command_start_streamed(c->command, &cmd, stream_command_call,
                                   &(StreamCommandCall){ &conn, c, args, n, &reply });
        if (r != 0)
                return r;
        r = stream_perfetto_start(reply.parameters);
        if (r != 0) {
                (void) command_finish(&cmd);
                return r;
        }
        o = stream_lines_options(c, reply.parameters);
        o.until_sync = true;
        varlink_reply_done(&reply);
        r = lines_stream(conn.fd, STDOUT_FILENO, conn.in.data + conn.in.consumed,
                         varlink_buffer_pending(&conn.in), &o);
        status = command_finish(&cmd);
        if (r == 0 || r == -ECONNRESET) {
                log_error("tpd closed the stream");
                return TPD_EXIT_DAEMON_GONE;
        }
        if (r < 0 && r != -EPIPE)
                log_error_errno(r, "cannot copy the stream to standard output: %m");
        return status;
}

static int stream_run(const CommonOptions *c, char **args, size_t n) {
        _cleanup_(connection_done) Connection conn = CONNECTION_NULL;
        _cleanup_(varlink_reply_done) VarlinkReply reply = {};
        _cleanup_(shm_done) Shm shm_reader = SHM_NULL;
        struct sigaction sa_exit = { .sa_handler = stream_on_signal };
        struct sigaction sa_ignore = { .sa_handler = SIG_IGN };
        bool shm;
        int r;

        if (c->n_command > 0)
                return stream_command(c, args, n);
        if (c->follow && c->n_pids == 0)
                return usage_error("--follow follows the processes of -p PID: name at least one");
        /* A closed stdout (| head) must show up as EPIPE, to end quietly with 0. */
        (void) sigaction(SIGPIPE, &sa_ignore, NULL);
        (void) sigaction(SIGINT, &sa_exit, NULL);
        (void) sigaction(SIGTERM, &sa_exit, NULL);

        r = stream_call(&conn, c, args, n, &reply);
        if (r != 0)
                return connection_exit_status(r);

        shm = opt.transport != STREAM_TRANSPORT_SOCKET && stream_reply_shm(reply.parameters);
        if (!shm && opt.transport == STREAM_TRANSPORT_SHM) {
                log_error("tpd did not agree to stream over shared memory (--transport=shm)");
                log_hint("Use --transport=auto or socket to stream over its socket.");
                return EXIT_FAILURE;
        }
        if (shm) {
                r = stream_setup_shm(&shm_reader, &conn, c, args, n, &reply, &shm);
                if (r != 0)
                        return r;
        }
        r = stream_perfetto_start(reply.parameters);
        if (r != 0)
                return r;
        r = shm ? stream_over_shm(&shm_reader, &reply, c) : stream_over_socket(&conn, &reply, c);
        /* lines.c's end by a bound or a signal. */
        if (r == 1 || r == -EPIPE)
                return EXIT_SUCCESS;
        if (r == 0 || r == -ECONNRESET) {
                log_error("tpd closed the stream");
                return TPD_EXIT_DAEMON_GONE;
        }
        /* shm.c printed why the ring or tpd's frames made no sense. */
        if (shm && r == -EBADMSG)
                return EXIT_FAILURE;
        log_error_errno(r, "cannot copy the stream to standard output: %m");
        return EXIT_FAILURE;
}

int stream_verb(const CommonOptions *c, char **args, size_t n) {
        int r = stream_format(c);

        if (r != 0)
                return r;
        return stream_perfetto_finish(stream_run(c, args, n));
}
