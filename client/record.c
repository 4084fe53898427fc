/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "capdir.h"
#include "capture.h"
#include "command.h"
#include "connection.h"
#include "datfile.h"
#include "loss.h"
#include "message.h"
#include "output.h"
#include "record.h"
#include "tpd-protocol.h"

#define READ_SIZE (1024U * 1024U)
/* Seconds tpd gets to send a recording's last names once asked: one read of the kernel's table. */
#define RECORD_LAST_NAMES_WAIT 0.5

static volatile sig_atomic_t stop_requested;

static int exit_status_oom(void) {
        log_oom();
        return EXIT_FAILURE;
}

static void on_signal(int sig) {
        (void) sig;
        stop_requested = 1;
}

/* The format a file name implies: NDJSON for .ndjson, .json and .jsonl, Perfetto for .pftrace and
 * .perfetto-trace, else a data file. */
static RecordFormat record_format_for(const char *path) {
        const char *dot = strrchr(path, '.');

        if (dot && (streq(dot, ".ndjson") || streq(dot, ".json") || streq(dot, ".jsonl")))
                return RECORD_FORMAT_NDJSON;
        if (dot && (streq(dot, ".pftrace") || streq(dot, ".perfetto-trace")))
                return RECORD_FORMAT_PERFETTO;
        return RECORD_FORMAT_DAT;
}

static int wait_ms(double deadline, double now) {
        if (deadline < 0)
                return -1;
        if (deadline <= now)
                return 0;
        return (int) MIN((deadline - now) * 1000, (double) INT_MAX / 2) + 1;
}

static double earliest(double a, double b) {
        return a < 0 ? b : b < 0 ? a : MIN(a, b);
}

/* A recording under way: tpd's connection, what was read of it, and when to stop. */
typedef struct Recorder {
        const RecordOptions *o;
        Capture *c;
        int fd;
        uint8_t *buf;
        size_t len, cap;
        size_t page_size;
        int64_t flush_ms;
        double start, stop_at, last_status;
        bool closed, hung_up;
        int status;
} Recorder;

/* What tpd's reply tells: its flush interval and, for Record's frames, its page size and CPUs, and
 * that its frames are ones this tpctl reads. 0, or an exit status. */
static int recorder_reply(Recorder *rec, json_object *reply) {
        const RecordOptions *o = rec->o;
        unsigned n_cpus;
        int64_t frames;
        bool found;
        int r;

        rec->flush_ms = reply_int(reply, "flush_interval_ms", &found);
        if (!found)
                rec->flush_ms = 100;
        rec->c->reply = reply; /* a Perfetto trace starts with its clock */
        if (o->format == RECORD_FORMAT_NDJSON)
                return 0;
        rec->page_size = (size_t) reply_int(reply, "page_size", NULL);
        n_cpus = (unsigned) reply_int(reply, "cpus", NULL);
        if (rec->page_size < 64 || rec->page_size > (1U << 20) || n_cpus == 0 || n_cpus > 65536) {
                log_error("tpd's reply to Record lacks a page size or CPU count");
                return EXIT_FAILURE;
        }
        /* The frames that follow must be ones this tpctl reads. */
        frames = reply_int(reply, "frames", &found);
        if (frames != TPD_FRAMES_VERSION || !found) {
                if (found)
                        log_error("tpd sends recording frames of version %" PRId64
                                  ", this tpctl reads version %d",
                                  frames, TPD_FRAMES_VERSION);
                else
                        log_error("tpd's reply to Record names no frame version (an older tpd), "
                                  "this tpctl reads version %d",
                                  TPD_FRAMES_VERSION);
                log_hint("use the tpctl of the same release as the running tpd");
                return EXIT_FAILURE;
        }
        if (o->format == RECORD_FORMAT_PERFETTO)
                return 0;
        r = dat_meta_new(rec->c->dir_fd, n_cpus, rec->page_size, o->file_version, &rec->c->meta);
        if (r >= 0)
                r = dat_meta_set_kallsyms(rec->c->meta, o->kallsyms);
        if (r < 0) {
                log_error_errno(r, "cannot prepare %s: %m", o->output);
                return EXIT_FAILURE;
        }
        return 0;
}

/* The complete frames read into the data file; *ret_used: their bytes. 0, or an exit status. */
static int recorder_frames(Recorder *rec, size_t *ret_used) {
        size_t used = 0;
        int r;

        while (rec->len - used >= sizeof(TpdFrame)) {
                TpdFrame f;

                memcpy(&f, rec->buf + used, sizeof(f));
                if (f.length > TPD_FRAME_MAX) {
                        log_error("tpd sent a frame of %u bytes", f.length);
                        return EXIT_FAILURE;
                }
                if (rec->len - used - sizeof(f) < f.length) {
                        if (sizeof(f) + f.length > rec->cap) {
                                uint8_t *b = realloc(rec->buf, sizeof(f) + f.length);
                                if (!b)
                                        return exit_status_oom();
                                rec->buf = b;
                                rec->cap = sizeof(f) + f.length;
                        }
                        break;
                }
                r = capture_frame(rec->c, &f, rec->buf + used + sizeof(f), rec->page_size);
                if (r < 0)
                        return EXIT_FAILURE;
                /* The page that did not fit is dropped, and the names follow. */
                rec->c->names_only = rec->c->size_reached;
                used += sizeof(f) + f.length;
        }
        *ret_used = used;
        return 0;
}

/* Writes what is complete of what was read. 0, or an exit status. */
static int recorder_write(Recorder *rec) {
        size_t used = 0;
        int r;

        if (rec->o->format != RECORD_FORMAT_NDJSON) {
                r = recorder_frames(rec, &used);
                if (r != 0)
                        return r;
        } else if (capture_lines(rec->c, rec->buf, rec->len, &used) < 0)
                return EXIT_FAILURE;
        memmove(rec->buf, rec->buf + used, rec->len - used);
        rec->len -= used;
        return 0;
}

/* Sleeps until data, a signal (it interrupts ppoll()), or the next thing to do: no wake-ups while
 * nothing happens. Every deadline is in the future here (a file's rotation time was just looked
 * at): a past one would mean waiting forever. 1: readable, 0: not, or a negative errno (printed). */
static int recorder_wait(Recorder *rec, double now, const sigset_t *unblocked) {
        struct pollfd pfd = { .fd = rec->fd, .events = POLLIN };
        const RecordOptions *o = rec->o;
        double deadline = -1;
        struct timespec ts;
        int timeout_ms;

        if (rec->stop_at > 0)
                deadline = rec->stop_at;
        else {
                if (o->duration > 0)
                        deadline = rec->start + o->duration;
                if (o->rotate_time > 0)
                        deadline = earliest(deadline, rec->c->file_start + o->rotate_time);
        }
        if (rec->c->tty)
                deadline = earliest(deadline, now + 1.0);
        timeout_ms = wait_ms(deadline, now);
        ts = (struct timespec){ timeout_ms / 1000, (long) (timeout_ms % 1000) * 1000000L };
        if (ppoll(&pfd, 1, timeout_ms < 0 ? NULL : &ts, unblocked) < 0 && errno != EINTR)
                return log_error_errno(negative_errno(), "cannot wait for tpd: %m");
        return (pfd.revents & (POLLIN | POLLHUP | POLLERR)) != 0;
}

/* Reads more of tpd's frames or lines. 0, or an exit status. */
static int recorder_read(Recorder *rec) {
        ssize_t n;

        if (rec->cap - rec->len < READ_SIZE / 4) {
                uint8_t *b;

                /* Only an NDJSON line without its end holds more than a frame. */
                if (rec->o->format == RECORD_FORMAT_NDJSON && rec->cap >= TPD_FRAME_MAX) {
                        log_error("tpd sent a line longer than %u MiB", TPD_FRAME_MAX >> 20);
                        return EXIT_FAILURE;
                }
                b = realloc(rec->buf, rec->cap * 2);
                if (!b)
                        return exit_status_oom();
                rec->buf = b;
                rec->cap *= 2;
        }
        n = read(rec->fd, rec->buf + rec->len, rec->cap - rec->len);
        if (n < 0 && (errno == EINTR || errno == EAGAIN))
                return 0;
        if (n <= 0 && rec->hung_up) {
                rec->closed = true; /* the last names are in */
                return 0;
        }
        if (n <= 0) {
                log_error("tpd closed the recording");
                rec->status = TPD_EXIT_DAEMON_GONE;
                rec->closed = true; /* what arrived before is written */
                return 0;
        }
        rec->len += (size_t) n;
        return 0;
}

/* What to do next, by the clock: 1 to wait for tpd, 0 to look again at once, -1 to stop, -2 on a
 * failure (printed). */
static int recorder_step(Recorder *rec, double now) {
        const RecordOptions *o = rec->o;
        Capture *c = rec->c;

        if (rec->closed || (c->size_reached && !c->names_only))
                return -1;
        if ((c->names_only || c->synced) && rec->stop_at == 0)
                rec->stop_at = now; /* the pages are in: no flush interval to wait */
        if (rec->stop_at > 0 && now >= rec->stop_at) {
                /* The pages are in: ask for the last names (include/tpd-protocol.h) and read until
                 * tpd closes, or give up after a while. */
                if (rec->hung_up || o->format == RECORD_FORMAT_NDJSON || shutdown(rec->fd, SHUT_WR) < 0)
                        return -1;
                rec->hung_up = true;
                rec->stop_at = now + RECORD_LAST_NAMES_WAIT;
                return 0;
        }
        if (rec->stop_at == 0 && (stop_requested || (o->duration > 0 && now - rec->start >= o->duration))) {
                /* What was written until now reaches tpd's pages within a flush interval. */
                rec->stop_at = now + (rec->flush_ms + 100) / 1000.0;
                return 0;
        }
        if (c->tty && now - rec->last_status >= 1.0) {
                capture_status_line(c, rec->start, false);
                rec->last_status = now;
        }
        if (o->format == RECORD_FORMAT_DAT && o->rotate_time > 0 && !c->size_reached) {
                /* Rotation by time, without waiting for a page. */
                if (capture_room(c, 0) < 0)
                        return -2;
                c->names_only = c->size_reached;
                if (c->size_reached)
                        return 0;
        }
        return 1;
}

/* Records until a stop. Returns the exit status. */
static int recorder_loop(Recorder *rec, const sigset_t *unblocked) {
        for (;;) {
                double now = capture_now();
                int r;

                r = recorder_write(rec);
                if (r != 0)
                        return r;
                r = recorder_step(rec, now);
                if (r == -1)
                        return rec->status;
                if (r < -1)
                        return EXIT_FAILURE;
                if (r == 0)
                        continue;
                r = recorder_wait(rec, now, unblocked);
                if (r < 0)
                        return EXIT_FAILURE;
                if (r == 0)
                        continue;
                r = recorder_read(rec);
                if (r != 0)
                        return r;
        }
}

static void summary_print(const Capture *c) {
        /* Files written, including those rotation removed since. */
        fprintf(stderr, "tpctl: %" PRIu64 " records in %u file%s, %" PRIu64 " lost%s%s\n", c->records,
                c->serial > 0 ? c->serial : (unsigned) c->n_done,
                (c->serial > 0 ? c->serial : c->n_done) == 1 ? "" : "s", c->lost,
                c->lost_unknown ? " (and more: some pages flag losses without a count)" : "",
                c->size_reached ? "; stopped at the size limit" : "");
}

/* Runs a capture with the selection in params (taken over); with cmd, the command's (command.h),
 * released once tpd records, and waited for before its SYNC frame's socket closes. Returns the
 * exit status. */
static int record_run(const char *socket_path, json_object *params, const RecordOptions *o, Command *cmd) {
        _cleanup_(connection_done) Connection conn = CONNECTION_NULL;
        _cleanup_(varlink_reply_done) VarlinkReply reply = {};
        struct sigaction sa = { .sa_handler = on_signal }, sa_ignore = { .sa_handler = SIG_IGN };
        sigset_t blocked, unblocked;
        _cleanup_(capture_done) Capture c = { .o = o, .fd = -1, .dir_fd = -1, .tty = isatty(STDERR_FILENO) };
        Recorder rec = { .o = o, .c = &c, .cap = READ_SIZE, .status = EXIT_SUCCESS };
        int r;

        (void) sigaction(SIGPIPE, &sa_ignore, NULL);
        /* A command's capture ends with the command: the signals go on to it (command.h). */
        if (!cmd) {
                (void) sigaction(SIGINT, &sa, NULL);
                (void) sigaction(SIGTERM, &sa, NULL);
        }
        /* The stop signals are taken only inside ppoll(): one that comes while frames are written is
         * seen at the next wait, never lost between a check and the wait. */
        sigemptyset(&blocked);
        if (!cmd) {
                sigaddset(&blocked, SIGINT);
                sigaddset(&blocked, SIGTERM);
        }
        (void) sigprocmask(SIG_BLOCK, &blocked, &unblocked);

        /* The output's directory is opened once, and its names checked before tpd is asked. */
        r = capdir_open(o->output, &c.dir_fd, &c.name);
        if (r == -EISDIR)
                return log_error("cannot record into %s: -o names a file", o->output), EXIT_FAILURE;
        if (r < 0)
                return log_error_errno(r, "cannot open the directory of %s: %m", o->output), EXIT_FAILURE;
        if (capture_check_names(&c) < 0)
                return EXIT_FAILURE;

        /* Pages for a data file and a Perfetto trace, lines for NDJSON. */
        r = connection_call(&conn, socket_path,
                            o->format == RECORD_FORMAT_NDJSON ? TPD_METHOD("Stream") : TPD_METHOD("Record"),
                            params, true, &reply);
        if (r != 0)
                return r == 1 ? EXIT_FAILURE : TPD_EXIT_DAEMON_GONE;
        r = recorder_reply(&rec, reply.parameters);
        if (r != 0)
                return r;

        rec.fd = conn.fd;
        rec.buf = malloc(rec.cap);
        if (!rec.buf)
                return exit_status_oom();
        rec.len = varlink_buffer_pending(&conn.in);
        if (rec.len > rec.cap)
                rec.len = 0; /* cannot be: a reply is smaller */
        memcpy(rec.buf, conn.in.data + conn.in.consumed, rec.len);

        rec.start = capture_now();
        r = capture_open(&c) < 0 ? EXIT_FAILURE : EXIT_SUCCESS;
        /* The recording is live: what the command does from its exec on is in it. */
        if (r == EXIT_SUCCESS && cmd && command_release(cmd, conn.fd) < 0)
                r = EXIT_FAILURE;
        if (r == EXIT_SUCCESS)
                r = recorder_loop(&rec, &unblocked);
        if (capture_close(&c) < 0 && r == EXIT_SUCCESS)
                r = EXIT_FAILURE;
        if (c.tty)
                capture_status_line(&c, rec.start, true);
        summary_print(&c);
        free(rec.buf);
        if (cmd) {
                /* Its waiter writes to the socket: joined before it closes. */
                int status = command_finish(cmd);

                cmd->pid = -1;
                if (r == EXIT_SUCCESS)
                        r = status;
        }
        return r;
}

/* `tpctl record -o FILE -- CMD`: CMD and what it forks, until it exited and its records are in the
 * file; tpctl exits as CMD did. */
static int record_command(const CommonOptions *c, char **args, size_t n, const RecordOptions *o) {
        Command cmd = COMMAND_NULL;
        CommonOptions own;
        json_object *params;
        int pid, r;

        if (command_start(c->command, &cmd) < 0)
                return EXIT_FAILURE;
        pid = (int) cmd.pid;
        own = common_options_following(c, &pid);
        params = selection_params(&own, args, n);
        r = params ? record_run(c->socket_path, params, o, &cmd) : connection_exit_status(log_oom());
        /* Not released (the recording did not start): it exits without exec. */
        if (cmd.pid > 0)
                (void) command_finish(&cmd);
        return r;
}

static RecordOptions opt = { .kallsyms = true };

enum {
        ARG_OUTPUT,
        ARG_SIZE,
        ARG_ROTATE_SIZE,
        ARG_ROTATE_TIME,
        ARG_KEEP,
        ARG_FILE_VERSION,
        ARG_NO_KALLSYMS,
        ARG_FORCE,
};

#define RECORD_SHOWN "--output, --size, --rotate-*, --keep, --file-version, --no-kallsyms, --force"

static const OptionSpec record_specs[] = {
        { "output", 'o', required_argument, ARG_OUTPUT, 0, RECORD_SHOWN },
        { "size", 0, required_argument, ARG_SIZE, 0, RECORD_SHOWN },
        { "rotate-size", 0, required_argument, ARG_ROTATE_SIZE, 0, RECORD_SHOWN },
        { "rotate-time", 0, required_argument, ARG_ROTATE_TIME, 0, RECORD_SHOWN },
        { "keep", 0, required_argument, ARG_KEEP, 0, RECORD_SHOWN },
        { "file-version", 0, required_argument, ARG_FILE_VERSION, 0, RECORD_SHOWN },
        { "no-kallsyms", 0, no_argument, ARG_NO_KALLSYMS, 0, RECORD_SHOWN },
        { "force", 0, no_argument, ARG_FORCE, 0, RECORD_SHOWN },
};

/* A positive size in MB (MiB), fractions allowed, as bytes. */
static int parse_megabytes(const char *s, uint64_t *ret) {
        double v;

        if (parse_decimal(s, 1e-6, 1e9, &v) < 0)
                return -EINVAL;
        *ret = (uint64_t) (v * 1048576.0);
        return *ret > 0 ? 0 : -EINVAL;
}

static int record_parse_option(const OptionSpec *spec, const char *arg) {
        int k;

        switch (spec->id) {
        case ARG_OUTPUT:
                opt.output = arg;
                return 0;
        case ARG_ROTATE_TIME:
                if (parse_seconds(arg, &opt.rotate_time) < 0)
                        return log_usage("invalid number of seconds '%s'", arg);
                return 0;
        case ARG_SIZE:
        case ARG_ROTATE_SIZE:
                if (parse_megabytes(arg, spec->id == ARG_SIZE ? &opt.max_size : &opt.rotate_size) < 0)
                        return log_usage("invalid size in MB '%s'", arg);
                return 0;
        case ARG_KEEP:
                if (parse_int(arg, &k) < 0 || k < 1)
                        return log_usage("invalid number of files '%s'", arg);
                opt.keep = (unsigned) k;
                return 0;
        case ARG_FILE_VERSION:
                if (parse_int(arg, &opt.file_version) < 0 ||
                    (opt.file_version != 6 && opt.file_version != 7))
                        return log_usage("--file-version takes 6 or 7, not '%s'", arg);
                return 0;
        case ARG_NO_KALLSYMS:
                opt.kallsyms = false;
                return 0;
        case ARG_FORCE:
                opt.force = true;
                return 0;
        }
        return -EINVAL;
}

const OptionTable record_option_table = OPTION_TABLE(record_specs, record_parse_option);

int record_verb(const CommonOptions *c, char **args, size_t n) {
        RecordOptions o = opt;
        json_object *params;

        if (!o.output)
                return usage_error("record needs -o FILE");
        if (!c->format)
                o.format = record_format_for(o.output);
        else if (streq(c->format, "dat"))
                o.format = RECORD_FORMAT_DAT;
        else if (streq(c->format, "ndjson"))
                o.format = RECORD_FORMAT_NDJSON;
        else if (streq(c->format, "perfetto"))
                o.format = RECORD_FORMAT_PERFETTO;
        else
                return usage_error("--format takes dat, ndjson or perfetto, not '%s'", c->format);
        /* A Perfetto trace is one file, whole only at its end. */
        if (o.format == RECORD_FORMAT_PERFETTO &&
            (o.max_size || o.rotate_size || o.rotate_time > 0 || o.keep))
                return usage_error("--size, --rotate-* and --keep are for data files and NDJSON: a Perfetto "
                                   "trace is one file, written whole at the end");
        if (o.file_version == 0)
                o.file_version = 6;
        o.duration = (double) c->duration_usec / 1e6;
        if (c->n_command > 0) {
                if (c->n_pids > 0)
                        return usage_error("-p and -- COMMAND: the command is the process to follow");
                o.until_sync = true;
                return record_command(c, args, n, &o);
        }
        if (c->follow && c->n_pids == 0)
                return usage_error("--follow follows the processes of -p PID: name at least one");
        params = selection_params(c, args, n);
        if (!params)
                return connection_exit_status(log_oom());
        return record_run(c->socket_path, params, &o, NULL);
}
