/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * `tpctl top`. One connection asks GetCounters every delay; tpd counts per event and per process
 * only while such a connection is open, and the rates are the differences between two replies over
 * the time between them (tpd's CLOCK_MONOTONIC "usec" of each reply).
 *
 * The screen is drawn with a handful of ANSI/VT100 sequences (alternate screen, cursor home, erase
 * line, reverse video) that every terminal emulator of the last 30 years and tmux understand: one
 * table redrawn in place does not need ncurses' window model or its dependency.
 */

#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "command.h"
#include "connection.h"
#include "linereader.h"
#include "lines.h"
#include "message.h"
#include "top.h"
#include "topsample.h"
#include "tpd-protocol.h"

/* On the screen, processes are shown for this many events (the first in the sort order), at most
 * this many each; the rest of an event's processes make its "other" row. */
#define TOP_PROCESS_EVENTS 3U
#define TOP_PROCESSES 5U

/* --- not a terminal: one block of lines per refresh */

/* A value of a key=value line: no spaces. */
static void print_value(const char *s) {
        for (; *s; s++)
                if (*s == ' ')
                        fputs("\\x20", stdout);
                else
                        putchar(*s);
}

static int top_print_lines(const TopSample *s) {
        struct timespec now;
        struct tm tm;
        char when[64];
        uint64_t total = s->other_records, lost = s->other_lost;

        clock_gettime(CLOCK_REALTIME, &now);
        gmtime_r(&now.tv_sec, &tm);
        strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%S", &tm);
        for (size_t i = 0; i < s->n_events; i++) {
                total += s->events[i].total;
                lost += s->events[i].lost;
        }
        printf("top time=%s.%03dZ interval=%.3f events=%zu rate=%.1f total=%" PRIu64 " lost=%" PRIu64
               " overrun=%" PRIu64 " dropped=%" PRIu64 "\n",
               when, (int) (now.tv_nsec / 1000000), s->interval, s->n_events, s->rate, total, lost,
               s->overrun, s->dropped);
        for (size_t i = 0; i < s->n_events; i++) {
                const TopEvent *e = &s->events[i];

                printf("event name=%s id=%" PRIi64 " rate=%.1f total=%" PRIu64 " lost=%" PRIu64 "\n",
                       e->name, e->id, e->rate, e->total, e->lost);
                for (size_t j = 0; j < e->n_procs; j++) {
                        const TopProc *t = &e->procs[j];

                        if (t->pid < 0) {
                                if (t->total > 0 || t->lost > 0)
                                        printf("process name=%s pid=other rate=%.1f total=%" PRIu64
                                               " lost=%" PRIu64 "\n",
                                               e->name, t->rate, t->total, t->lost);
                                continue;
                        }
                        if (s->by != TOP_BY_PID) {
                                printf("%s name=%s %s=", s->by == TOP_BY_UNIT ? "unit" : "cgroup", e->name,
                                       s->by == TOP_BY_UNIT ? "unit" : "cgroup");
                                print_value(t->comm);
                                printf(" rate=%.1f total=%" PRIu64 " lost=%" PRIu64 "\n", t->rate, t->total,
                                       t->lost);
                                continue;
                        }
                        printf("process name=%s pid=%d comm=", e->name, t->pid);
                        print_value(t->comm);
                        printf(" rate=%.1f total=%" PRIu64 " lost=%" PRIu64 "\n", t->rate, t->total,
                               t->lost);
                }
        }
        if (s->other_records > 0 || s->other_lost > 0)
                printf("event name=other total=%" PRIu64 " lost=%" PRIu64 "\n", s->other_records,
                       s->other_lost);
        putchar('\n');
        if (fflush(stdout) != 0 || ferror(stdout))
                return -errno;
        return 0;
}

/* --- a terminal: the full-screen table */

static struct termios saved_termios;
static bool termios_saved, screen_up;
static int saved_stderr = -1;
static FILE *stderr_capture;
static volatile sig_atomic_t quit_requested, resized;

static void top_on_signal(int sig) {
        if (sig == SIGWINCH)
                resized = 1;
        else
                quit_requested = 1;
}

static void screen_restore(void) {
        if (screen_up) {
                static const char leave[] = "\033[?25h\033[?1049l";
                (void) write_all(STDOUT_FILENO, leave, sizeof(leave) - 1);
                screen_up = false;
        }
        if (termios_saved) {
                (void) tcsetattr(STDIN_FILENO, TCSAFLUSH, &saved_termios);
                termios_saved = false;
        }
        /* Messages written while the screen was up would have vanished with it: show them now. */
        if (saved_stderr >= 0) {
                char buf[4096];
                size_t n;

                fflush(stderr);
                (void) dup2(saved_stderr, STDERR_FILENO);
                saved_stderr = safe_close(saved_stderr);
                rewind(stderr_capture);
                while ((n = fread(buf, 1, sizeof(buf), stderr_capture)) > 0)
                        (void) write_all(STDERR_FILENO, buf, n);
        }
        if (stderr_capture) {
                fclose(stderr_capture);
                stderr_capture = NULL;
        }
}

static void screen_setup(bool keys) {
        static const char enter[] = "\033[?1049h\033[?25l\033[H\033[2J";

        if (keys && tcgetattr(STDIN_FILENO, &saved_termios) >= 0) {
                struct termios t = saved_termios;

                /* Keys one at a time, unechoed; ^C still sends SIGINT. */
                t.c_lflag &= ~(ICANON | ECHO);
                t.c_cc[VMIN] = 1;
                t.c_cc[VTIME] = 0;
                if (tcsetattr(STDIN_FILENO, TCSANOW, &t) >= 0)
                        termios_saved = true;
        }
        stderr_capture = tmpfile();
        if (stderr_capture) {
                saved_stderr = fcntl(STDERR_FILENO, F_DUPFD_CLOEXEC, 3);
                if (saved_stderr >= 0)
                        (void) dup2(fileno(stderr_capture), STDERR_FILENO);
        }
        (void) write_all(STDOUT_FILENO, enter, sizeof(enter) - 1);
        screen_up = true;
}

static void screen_size(unsigned *ret_rows, unsigned *ret_cols) {
        struct winsize ws = {};

        if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) < 0 || ws.ws_row == 0 || ws.ws_col == 0)
                ws = (struct winsize){ .ws_row = 24, .ws_col = 80 };
        *ret_rows = ws.ws_row;
        *ret_cols = ws.ws_col;
}

typedef struct Frame {
        FILE *f;
        unsigned rows, cols, row;
} Frame;

/* One screen line, cut at the screen's width (the text is ASCII: see top_escape()). */
_printf_(3, 4) static void frame_line(Frame *fr, bool reverse, const char *format, ...) {
        char line[1024];
        va_list ap;
        int n;

        if (fr->row >= fr->rows)
                return;
        va_start(ap, format);
        n = vsnprintf(line, sizeof(line), format, ap);
        va_end(ap);
        if (n < 0)
                return;
        if ((unsigned) n > fr->cols)
                line[fr->cols] = 0;
        /* Move explicitly rather than by newline: the last row must not scroll the screen. */
        fprintf(fr->f, "\033[%u;1H%s%-*s\033[m\033[K", fr->row + 1, reverse ? "\033[7m" : "",
                reverse ? (int) fr->cols : 0, line);
        fr->row++;
}

static void format_rate(char *buf, size_t size, double rate) {
        if (isnan(rate))
                snprintf(buf, size, "-");
        else
                snprintf(buf, size, "%.1f", rate);
}

static void top_draw(const TopSample *s, TopSort sort) {
        _cleanup_free_ char *text = NULL;
        Frame fr = {};
        size_t size = 0;
        char rate[32], clock[16];
        uint64_t lost = s->other_lost;
        time_t now = time(NULL);
        struct tm tm;

        screen_size(&fr.rows, &fr.cols);
        fr.f = open_memstream(&text, &size);
        if (!fr.f)
                return;

        for (size_t i = 0; i < s->n_events; i++)
                lost += s->events[i].lost;
        localtime_r(&now, &tm);
        strftime(clock, sizeof(clock), "%H:%M:%S", &tm);
        format_rate(rate, sizeof(rate), s->interval > 0 ? s->rate : NAN);
        frame_line(&fr, false,
                   "tpctl top - %s  %zu events, %s records/s, %" PRIu64 " lost by streams, %" PRIu64
                   " overrun, %" PRIu64 " dropped",
                   clock, s->n_events, rate, lost, s->overrun, s->dropped);
        frame_line(&fr, false, "Sort: %s    keys: r rate  t total  l lost  n name  q quit",
                   top_sort_name(sort));
        frame_line(&fr, false, "%s", "");
        frame_line(&fr, true, "%12s %14s %12s  %s", "RATE/s", "TOTAL", "LOST",
                   s->by == TOP_BY_UNIT     ? "EVENT / UNIT"
                   : s->by == TOP_BY_CGROUP ? "EVENT / CGROUP"
                                            : "EVENT / PID COMM");

        for (size_t i = 0; i < s->n_events; i++) {
                const TopEvent *e = &s->events[i];
                TopProc other;
                size_t shown = 0;

                format_rate(rate, sizeof(rate), e->rate);
                frame_line(&fr, false, "%12s %14" PRIu64 " %12" PRIu64 "  %s", rate, e->total, e->lost,
                           e->name);
                if (i >= TOP_PROCESS_EVENTS || e->n_procs <= 1)
                        continue;

                /* The busiest processes, then the rest under "other". */
                other = e->procs[e->n_procs - 1];
                for (size_t j = 0; j + 1 < e->n_procs; j++) {
                        const TopProc *t = &e->procs[j];

                        if (shown >= TOP_PROCESSES) {
                                other.total += t->total;
                                other.lost += t->lost;
                                if (!isnan(t->rate) && !isnan(other.rate))
                                        other.rate += t->rate;
                                continue;
                        }
                        format_rate(rate, sizeof(rate), t->rate);
                        if (s->by != TOP_BY_PID)
                                frame_line(&fr, false, "%12s %14" PRIu64 " %12" PRIu64 "    %s", rate,
                                           t->total, t->lost, t->comm);
                        else
                                frame_line(&fr, false, "%12s %14" PRIu64 " %12" PRIu64 "    %7d %s", rate,
                                           t->total, t->lost, t->pid, t->comm);
                        shown++;
                }
                if (other.total > 0 || other.lost > 0) {
                        format_rate(rate, sizeof(rate), other.rate);
                        frame_line(&fr, false, "%12s %14" PRIu64 " %12" PRIu64 "    %7s %s", rate,
                                   other.total, other.lost, "-", "other");
                }
        }
        if (s->other_records > 0 || s->other_lost > 0)
                frame_line(&fr, false, "%12s %14" PRIu64 " %12" PRIu64 "  %s", "-", s->other_records,
                           s->other_lost, "other events");
        /* Erase what the previous frame had below. */
        fprintf(fr.f, "\033[%u;1H\033[J", MIN(fr.row + 1, fr.rows));
        if (fclose(fr.f) != 0)
                return;
        (void) write_all(STDOUT_FILENO, text, size);
}

/* Shows s, on the terminal or as lines, its processes grouped as --by says. */
static int top_show(const TopSample *s, const TopOptions *o, bool tty) {
        TopSample *g = NULL;
        int r = 0;

        if (o->by != TOP_BY_PID) {
                g = top_group(s, o->by);
                if (!g)
                        return -ENOMEM;
                top_sort(g, o->sort);
                s = g;
        }
        if (tty)
                top_draw(s, o->sort);
        else
                r = top_print_lines(s);
        top_sample_free(g);
        return r;
}

/* One GetCounters call; its sample with rates against prev. */
static int top_sample(Connection *c, const TopOptions *o, bool first, const TopSample *prev,
                      TopSample **ret) {
        _cleanup_(varlink_reply_done) VarlinkReply reply = {};
        json_object *params = json_object_new_object();
        int r;

        if (!params)
                return log_oom();
        if (first)
                r = connection_call(c, o->socket_path, TPD_METHOD("GetCounters"), params, false, &reply);
        else
                r = connection_call_again(c, TPD_METHOD("GetCounters"), params, &reply);
        if (r != 0)
                return r;
        r = top_parse(reply.parameters, ret);
        if (r < 0)
                return log_oom();
        top_rates(*ret, prev);
        top_sort(*ret, o->sort);
        return 0;
}

/* Waits until the next refresh is due; returns 1 for a key that quits, 2 after a key or a resize
 * that wants a redraw, 0 when it is time. */
static int top_wait(uint64_t due, bool keys, TopSort *sort) {
        for (;;) {
                struct pollfd p = { .fd = STDIN_FILENO, .events = POLLIN };
                uint64_t now = now_usec(CLOCK_MONOTONIC);
                int timeout, n;
                char key;

                if (quit_requested)
                        return 1;
                if (resized) {
                        resized = 0;
                        return 2;
                }
                if (now >= due)
                        return 0;
                timeout = (int) MIN((due - now + 999) / 1000, (uint64_t) INT32_MAX);
                n = poll(&p, keys ? 1 : 0, timeout);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return -errno;
                if (n == 0)
                        continue;
                if (p.revents & (POLLHUP | POLLERR)) {
                        keys = false; /* the terminal went away: refresh until a signal */
                        continue;
                }
                if (read(STDIN_FILENO, &key, 1) != 1)
                        continue;
                switch (key) {
                case 'q':
                case 'Q':
                        return 1;
                case 'r':
                        *sort = TOP_SORT_RATE;
                        return 2;
                case 't':
                        *sort = TOP_SORT_TOTAL;
                        return 2;
                case 'l':
                        *sort = TOP_SORT_LOST;
                        return 2;
                case 'n':
                        *sort = TOP_SORT_NAME;
                        return 2;
                case ' ':
                case '\f': /* ^L */
                        return 2;
                default:
                        break;
                }
        }
}

int top_run(const TopOptions *options) {
        _cleanup_(connection_done) Connection c = CONNECTION_NULL;
        TopOptions o = *options;
        TopSample *prev = NULL, *cur = NULL;
        struct sigaction sa = { .sa_handler = top_on_signal }, sa_ignore = { .sa_handler = SIG_IGN };
        bool tty = isatty(STDOUT_FILENO), keys = tty && isatty(STDIN_FILENO);
        uint64_t done = 0, due, now;
        int r, status = EXIT_SUCCESS;

        /* No SA_RESTART: a signal ends the wait in poll() at once. */
        (void) sigaction(SIGINT, &sa, NULL);
        (void) sigaction(SIGTERM, &sa, NULL);
        (void) sigaction(SIGWINCH, &sa, NULL);
        (void) sigaction(SIGPIPE, &sa_ignore, NULL);

        /* The first call starts tpd's count; rates need a second one. */
        r = top_sample(&c, &o, true, NULL, &prev);
        if (r != 0)
                return connection_exit_status(r);
        due = now_usec(CLOCK_MONOTONIC) + o.delay_usec;
        if (tty) {
                screen_setup(keys);
                (void) top_show(prev, &o, true);
        }

        for (;;) {
                r = top_wait(due, keys, &o.sort);
                if (r < 0) {
                        log_error_errno(r, "cannot wait for input: %m");
                        status = EXIT_FAILURE;
                        break;
                }
                if (r == 1)
                        break;
                if (r == 2) {
                        top_sort(prev, o.sort);
                        if (tty)
                                (void) top_show(prev, &o, true);
                        continue;
                }

                r = top_sample(&c, &o, false, prev, &cur);
                if (r != 0) {
                        status = connection_exit_status(r);
                        break;
                }
                top_sample_free(prev);
                prev = TAKE_PTR(cur);
                r = top_show(prev, &o, tty);
                if (r == -EPIPE)
                        break;
                if (r == -ENOMEM) {
                        (void) log_oom();
                        status = EXIT_FAILURE;
                        break;
                }
                if (r < 0) {
                        log_error_errno(r, "cannot write to standard output: %m");
                        status = EXIT_FAILURE;
                        break;
                }
                if (o.iterations > 0 && ++done >= o.iterations)
                        break;
                /* Keep the beat; after a stall (a stopped terminal) start a new one. */
                now = now_usec(CLOCK_MONOTONIC);
                due += o.delay_usec;
                if (due < now)
                        due = now + o.delay_usec;
        }

        screen_restore();
        top_sample_free(prev);
        return status;
}

/* --- `top [EVENT...] -- CMD`: the counts of a stream of the command's records */

/* Shows what was counted up to now, with rates against *prev, which it becomes. */
static int top_command_show(const TopSample *acc, TopSample **prev, const TopOptions *o, bool tty) {
        TopSample *cur = top_sample_copy(acc);

        if (!cur)
                return -ENOMEM;
        cur->usec = now_usec(CLOCK_MONOTONIC);
        top_rates(cur, *prev);
        top_sort(cur, o->sort);
        top_sample_free(*prev);
        *prev = cur;
        return top_show(cur, o, tty);
}

/* Reads the stream's lines until the "sync" notice: 1 then, 0 for more to come, or a negative
 * errno (-ECONNRESET: tpd closed the stream). */
static int top_command_read(LineReader *lr, TopSample *acc) {
        const char *line;
        size_t len;
        ssize_t k = line_reader_fill(lr);
        int r;

        if (k == 0)
                return -ECONNRESET;
        if (k < 0 && k != -EAGAIN && k != -EINTR)
                return (int) k;
        while ((r = line_reader_next(lr, &line, &len)) != 0) {
                LineHead h;

                if (r == -E2BIG) {
                        line_reader_drop(lr);
                        continue;
                }
                line_head_parse(line, len, &h);
                if (h.sync)
                        return 1;
                if (h.event && h.name && h.has_pid)
                        r = top_count(acc, &h);
                else if (h.lost)
                        top_count_lost(acc, &h);
                if (r < 0)
                        return r;
        }
        return 0;
}

/* The Stream call of the command's records (command_start_streamed()). */
typedef struct TopCommandCall {
        Connection *conn;
        const CommonOptions *c;
        char **args;
        size_t n;
        VarlinkReply *reply;
} TopCommandCall;

static int top_command_call(void *userdata, pid_t pid, int *ret_fd) {
        TopCommandCall *t = userdata;
        int p = (int) pid, r;
        CommonOptions own = common_options_following(t->c, &p);
        json_object *params = selection_params(&own, t->args, t->n);

        r = params ? connection_call(t->conn, t->c->socket_path, TPD_METHOD("Stream"), params, true,
                                     t->reply)
                   : log_oom();
        if (r != 0)
                return connection_exit_status(r);
        *ret_fd = t->conn->fd;
        return 0;
}

/* `tpctl top [EVENT...] -- CMD`: CMD and what it forks, counted by tpctl from a stream of their
 * records (named events, or every one enabled), shown every delay; at the end, after what it wrote
 * was read, the last counts, and tpctl exits as CMD did. */
static int top_command(const CommonOptions *c, char **args, size_t n, const TopOptions *o) {
        _cleanup_(connection_done) Connection conn = CONNECTION_NULL;
        _cleanup_(varlink_reply_done) VarlinkReply reply = {};
        _cleanup_(line_reader_done) LineReader lr = {};
        struct sigaction sa_ignore = { .sa_handler = SIG_IGN };
        bool tty = isatty(STDOUT_FILENO);
        TopSample *acc = NULL, *prev = NULL;
        Command cmd = COMMAND_NULL;
        uint64_t due;
        int r = 0, status;

        if (c->n_pids > 0)
                return usage_error("-p and -- COMMAND: the command is the process to follow");
        (void) sigaction(SIGPIPE, &sa_ignore, NULL);
        r = command_start_streamed(c->command, &cmd, top_command_call,
                                   &(TopCommandCall){ &conn, c, args, n, &reply });
        if (r != 0)
                return r;
        acc = calloc(1, sizeof(TopSample));
        /* Rates from the start: the first refresh has one. */
        prev = calloc(1, sizeof(TopSample));
        if (prev)
                prev->usec = now_usec(CLOCK_MONOTONIC);
        r = acc && prev ? line_reader_init(&lr, conn.fd, LINES_LINE_MAX, conn.in.data + conn.in.consumed,
                                           varlink_buffer_pending(&conn.in))
                        : -ENOMEM;
        varlink_reply_done(&reply);
        /* The terminal's keys are the command's. */
        if (tty)
                screen_setup(false);
        due = now_usec(CLOCK_MONOTONIC) + o->delay_usec;
        while (r == 0) {
                struct pollfd p = { .fd = conn.fd, .events = POLLIN };
                uint64_t now = now_usec(CLOCK_MONOTONIC);

                if (now >= due) {
                        r = top_command_show(acc, &prev, o, tty);
                        due = MAX(due + o->delay_usec, now + 1);
                        continue;
                }
                if (poll(&p, 1, (int) MIN((due - now + 999) / 1000, (uint64_t) INT32_MAX)) > 0)
                        r = top_command_read(&lr, acc);
        }
        if (r == 1)
                r = top_command_show(acc, &prev, o, tty);
        screen_restore();
        /* The last counts stay on the terminal. */
        if (r >= 0 && tty && prev)
                r = top_print_lines(prev);
        status = command_finish(&cmd);
        top_sample_free(prev);
        top_sample_free(acc);
        if (r == -ECONNRESET) {
                log_error("tpd closed the stream");
                return TPD_EXIT_DAEMON_GONE;
        }
        if (r == -ENOMEM) {
                (void) log_oom();
                return EXIT_FAILURE;
        }
        if (r < 0 && r != -EPIPE)
                log_error_errno(r, "cannot read the stream or write the counts: %m");
        return status;
}

static TopOptions opt;

enum {
        ARG_ITERATIONS,
        ARG_DELAY,
        ARG_SORT,
};

static const OptionSpec top_specs[] = {
        { "iterations", 'n', required_argument, ARG_ITERATIONS },
        { "delay", 'd', required_argument, ARG_DELAY },
        { "sort", 0, required_argument, ARG_SORT },
};

/* Seconds from 0.1 to a day, in microseconds. */
static int parse_delay(const char *s, uint64_t *ret_usec) {
        double v;

        if (parse_decimal(s, 0.1, 86400, &v) < 0)
                return -EINVAL;
        *ret_usec = (uint64_t) (v * 1e6 + 0.5);
        return 0;
}

static int top_parse_option(const OptionSpec *spec, const char *arg) {
        int iterations;

        switch (spec->id) {
        case ARG_ITERATIONS:
                if (parse_int(arg, &iterations) < 0 || iterations == 0)
                        return log_usage("invalid number of iterations '%s'", arg);
                opt.iterations = (uint64_t) iterations;
                return 0;
        case ARG_DELAY:
                if (parse_delay(arg, &opt.delay_usec) < 0)
                        return log_usage("invalid delay '%s': seconds from 0.1 to 86400", arg);
                return 0;
        case ARG_SORT:
                if (top_sort_from_string(arg, &opt.sort) < 0)
                        return log_usage("invalid sort key '%s': rate, total, lost or name", arg);
                return 0;
        }
        return -EINVAL;
}

const OptionTable top_option_table = OPTION_TABLE(top_specs, top_parse_option);

int top_verb(const CommonOptions *c, char **args, size_t n) {
        TopOptions o = opt;

        o.socket_path = c->socket_path;
        /* --by is shared with the aggregations, which take other keys. */
        if (c->by && top_by_from_string(c->by, &o.by) < 0)
                return usage_error("invalid --by '%s': pid, cgroup or unit", c->by);
        if (o.delay_usec == 0)
                o.delay_usec = 1000000;
        if (c->n_command > 0)
                return top_command(c, args, n, &o);
        if (n > 0 || c->n_events > 0)
                return usage_error("EVENT applies to top -- COMMAND: top shows every enabled event");
        return top_run(&o);
}
