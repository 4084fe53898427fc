/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "linereader.h"
#include "lines.h"
#include "message.h"
#include "util.h"

#define LINES_OUT_SIZE (256U * 1024U)
#define LINES_CLOCK_CHANGES 64U
/* While records are held back for ordering, how often the loop looks whether they may go. */
#define LINES_ORDER_POLL_MSEC 10
#define LINES_DELAY_MAX_NS (5ULL * 1000 * 1000 * 1000)

/* A line held back by --ordered. */
typedef struct Pending {
        uint64_t ts;
        uint64_t arrival_ns; /* CLOCK_MONOTONIC, for trace clocks tpctl cannot read */
        char *line;
        size_t len;
} Pending;

/* The held lines of one CPU, oldest first: a CPU's records come in order. */
typedef struct Fifo {
        Pending *items;
        size_t head;
        size_t n;
        size_t cap;
} Fifo;

struct Lines {
        const LinesOptions *o;
        int out;
        char *obuf;
        size_t olen;
        int error; /* of writing, first one */
        uint64_t events;
        bool done;

        bool have_offset;
        int64_t offset_ns;
        struct {
                uint64_t ts;
                int64_t offset_ns;
        } changes[LINES_CLOCK_CHANGES]; /* ring of the last clock records */
        size_t n_changes;
        bool have_start;
        uint64_t start_ts;
        int64_t cached_sec;
        char cached_text[32];
        size_t cached_len;

        Fifo *fifos; /* by CPU */
        size_t n_fifos;
        Fifo other; /* lines with a ts but no CPU: notices, clock records */
        size_t held;
        bool have_last;
        uint64_t last_ts;
        uint64_t late;     /* records that came after a younger one had gone out */
        uint64_t delay_ns; /* the ordering delay now: the option's, or longer while records come late */
        uint64_t delay_decayed_ns; /* CLOCK_MONOTONIC of the last decay */
};

static volatile sig_atomic_t lines_signalled;

static void lines_on_signal(int sig) {
        lines_signalled = 1;
}

static void out_flush(Lines *l) {
        if (l->olen > 0 && l->error == 0)
                l->error = write_all(l->out, l->obuf, l->olen);
        l->olen = 0;
}

static void out_put(Lines *l, const char *p, size_t n) {
        if (l->olen + n > LINES_OUT_SIZE)
                out_flush(l);
        if (n > LINES_OUT_SIZE) {
                if (l->error == 0)
                        l->error = write_all(l->out, p, n);
                return;
        }
        memcpy(l->obuf + l->olen, p, n);
        l->olen += n;
}

/* A clock record: from its ts on, the wall clock is ts + realtime_offset_ns. */
static void clock_record(Lines *l, const char *line, size_t n, uint64_t ts) {
        static const char key[] = "\"realtime_offset_ns\":";
        const char *p = memmem(line, n, key, sizeof(key) - 1), *end = line + n;
        bool negative;
        uint64_t v;

        if (!p)
                return;
        p += sizeof(key) - 1;
        negative = p < end && *p == '-';
        p += negative;
        if (p == end || *p < '0' || *p > '9')
                return;
        for (v = 0; p < end && *p >= '0' && *p <= '9';)
                v = v * 10 + (uint64_t) (*p++ - '0');
        l->changes[l->n_changes % LINES_CLOCK_CHANGES].ts = ts;
        l->changes[l->n_changes % LINES_CLOCK_CHANGES].offset_ns = negative ? -(int64_t) v : (int64_t) v;
        l->n_changes++;
}

static bool offset_for(const Lines *l, uint64_t ts, int64_t *ret) {
        /* Newest first: the last change at or before ts. */
        for (size_t k = 0; k < MIN(l->n_changes, (size_t) LINES_CLOCK_CHANGES); k++) {
                size_t i = (l->n_changes - 1 - k) % LINES_CLOCK_CHANGES;
                if (l->changes[i].ts <= ts) {
                        *ret = l->changes[i].offset_ns;
                        return true;
                }
        }
        *ret = l->offset_ns;
        return l->have_offset;
}

static void put_time(Lines *l, uint64_t ts) {
        char buf[64];
        int64_t wall, sec;
        uint64_t ns, d;
        size_t n;

        if (l->o->time == LINES_TIME_RELATIVE) {
                if (!l->have_start) {
                        l->start_ts = ts;
                        l->have_start = true;
                }
                d = ts >= l->start_ts ? ts - l->start_ts : l->start_ts - ts;
                n = (size_t) snprintf(buf, sizeof(buf), ",\"time\":%s%" PRIu64 ".%09" PRIu64,
                                      ts >= l->start_ts ? "" : "-", d / UINT64_C(1000000000),
                                      d % UINT64_C(1000000000));
                out_put(l, buf, n);
                return;
        }

        if (!offset_for(l, ts, &wall))
                return;
        wall += (int64_t) ts;
        if (wall < 0)
                return;
        sec = wall / 1000000000LL;
        ns = (uint64_t) (wall % 1000000000LL);
        if (sec != l->cached_sec || l->cached_len == 0) {
                time_t t = (time_t) sec;
                struct tm tm;

                if (!gmtime_r(&t, &tm))
                        return;
                l->cached_len = strftime(l->cached_text, sizeof(l->cached_text), "%Y-%m-%dT%H:%M:%S", &tm);
                l->cached_sec = sec;
        }
        out_put(l, ",\"time\":\"", 9);
        out_put(l, l->cached_text, l->cached_len);
        buf[0] = '.';
        for (int i = 9; i >= 1; i--, ns /= 10)
                buf[i] = (char) ('0' + ns % 10);
        memcpy(buf + 10, "Z\"", 2);
        out_put(l, buf, 12);
}

static void emit(Lines *l, const char *line, size_t n, const LineHead *li) {
        if (l->done)
                return;
        if (l->o->sink) {
                if (l->error == 0)
                        l->error = l->o->sink(l->o->sink_userdata, line, n);
        } else if (li->has_ts && l->o->time != LINES_TIME_BOOT) {
                out_put(l, line, (size_t) (li->after_ts - line));
                put_time(l, li->ts);
                out_put(l, li->after_ts, (size_t) (line + n - li->after_ts));
        } else
                out_put(l, line, n);
        if (li->event && ++l->events == l->o->count)
                l->done = true;
}

static Fifo *fifo_for(Lines *l, const LineHead *li) {
        if (!li->has_cpu || li->cpu >= LINES_CPUS_MAX)
                return &l->other;
        if (li->cpu >= l->n_fifos) {
                size_t n = MAX((size_t) li->cpu + 1, l->n_fifos * 2);
                Fifo *f = reallocarray(l->fifos, n, sizeof(Fifo));

                if (!f)
                        return NULL;
                memset(f + l->n_fifos, 0, (n - l->n_fifos) * sizeof(Fifo));
                l->fifos = f;
                l->n_fifos = n;
        }
        return &l->fifos[li->cpu];
}

static int fifo_push(Fifo *f, Pending p) {
        if (f->n == f->cap) {
                size_t cap = MAX(f->cap * 2, (size_t) 64);
                Pending *items = malloc(cap * sizeof(Pending));

                if (!items)
                        return -ENOMEM;
                for (size_t i = 0; i < f->n; i++)
                        items[i] = f->items[(f->head + i) % f->cap];
                free(f->items);
                f->items = items;
                f->head = 0;
                f->cap = cap;
        }
        f->items[(f->head + f->n++) % f->cap] = p;
        return 0;
}

static Pending *fifo_head(Fifo *f) {
        return f->n > 0 ? &f->items[f->head] : NULL;
}

static void fifo_pop(Fifo *f) {
        free(f->items[f->head].line);
        f->head = (f->head + 1) % f->cap;
        f->n--;
}

/* Lets held lines go, oldest first: the oldest head of all CPUs may go once every CPU has one
 * (a CPU's records come in order, so nothing older can follow), or once it is older than the
 * delay (what tpd holds back is delivered within its flush interval); all of them with force. */
static void release(Lines *l, bool force) {
        uint64_t now_tc = l->o->have_clock ? now_nsec(l->o->clock_id) : 0,
                 now_mono = now_nsec(CLOCK_MONOTONIC);

        /* Each second a stretched delay gives back a tenth of what it exceeds the option's by. */
        if (now_mono - l->delay_decayed_ns >= 1000000000ULL) {
                l->delay_ns -= (l->delay_ns - l->o->order_delay_ns) / 10;
                l->delay_decayed_ns = now_mono;
        }

        while (l->held > 0 && !l->done) {
                bool all = l->o->n_cpus > 0 && l->n_fifos >= l->o->n_cpus;
                Fifo *best = fifo_head(&l->other) ? &l->other : NULL;
                Pending *p;
                LineHead li;

                for (size_t c = 0; c < l->n_fifos; c++) {
                        Fifo *f = &l->fifos[c];

                        if (f->n == 0) {
                                if (c < l->o->n_cpus)
                                        all = false;
                                continue;
                        }
                        if (!best || fifo_head(f)->ts < fifo_head(best)->ts)
                                best = f;
                }
                p = fifo_head(best);
                if (!force && !all &&
                    (l->o->have_clock ? p->ts + l->delay_ns > now_tc
                                      : p->arrival_ns + l->delay_ns > now_mono))
                        break;
                if (l->have_last && p->ts < l->last_ts)
                        l->late++;
                else {
                        l->last_ts = p->ts;
                        l->have_last = true;
                }
                line_head_parse(p->line, p->len, &li);
                emit(l, p->line, p->len, &li);
                fifo_pop(best);
                l->held--;
        }
}

int lines_feed(Lines *l, const char *line, size_t n) {
        LineHead li;
        Fifo *f;
        Pending p;

        if (l->done)
                return 0;
        line_head_parse(line, n, &li);
        if (li.sync && l->o->until_sync) {
                l->done = true;
                return 0;
        }
        if (li.clock)
                clock_record(l, line, n, li.ts);
        if (l->o->ordered && li.has_ts && l->o->have_clock) {
                /* Records that come later after their ts than the delay allows (a busy machine, a
                 * tpd catching up) stretch it, up to LINES_DELAY_MAX_NS; it shrinks back slowly. */
                uint64_t now = now_nsec(l->o->clock_id), lag = now > li.ts ? now - li.ts : 0;

                if (lag + lag / 4 > l->delay_ns)
                        l->delay_ns = MIN(lag + lag / 4, MAX(LINES_DELAY_MAX_NS, l->o->order_delay_ns));
        }
        if (!l->o->ordered || !li.has_ts) {
                emit(l, line, n, &li);
                return 0;
        }
        f = fifo_for(l, &li);
        if (!f)
                return -ENOMEM;
        p = (Pending){ .ts = li.ts, .arrival_ns = now_nsec(CLOCK_MONOTONIC), .line = malloc(n), .len = n };
        if (!p.line)
                return -ENOMEM;
        memcpy(p.line, line, n);
        if (fifo_push(f, p) < 0) {
                free(p.line);
                return -ENOMEM;
        }
        l->held++;
        return 0;
}

/* Takes the complete lines read. */
static int receive_all(Lines *l, LineReader *reader) {
        const char *line;
        size_t n;
        int r = 0;

        while (!l->done && (r = line_reader_next(reader, &line, &n)) > 0) {
                r = lines_feed(l, line, n);
                if (r < 0)
                        return r;
        }
        if (r == -E2BIG)
                return log_error_errno(-E2BIG, "a line of the stream is longer than %u bytes",
                                       LINES_LINE_MAX);
        return 0;
}

static void lines_done(Lines *l) {
        for (size_t c = 0; c < l->n_fifos; c++) {
                while (l->fifos[c].n > 0)
                        fifo_pop(&l->fifos[c]);
                free(l->fifos[c].items);
        }
        while (l->other.n > 0)
                fifo_pop(&l->other);
        free(l->other.items);
        free(l->fifos);
        free(l->obuf);
}

/* Signals are taken only inside ppoll(), so that one cannot slip in between the check of the flag
 * and the wait; the lines held back then still go out. *ret_old: the mask to wait with. */
static void signals_take(sigset_t *ret_blocked, sigset_t *ret_old) {
        struct sigaction sa = { .sa_handler = lines_on_signal };

        sigemptyset(ret_blocked);
        sigaddset(ret_blocked, SIGINT);
        sigaddset(ret_blocked, SIGTERM);
        sigprocmask(SIG_BLOCK, ret_blocked, ret_old);
        (void) sigaction(SIGINT, &sa, NULL);
        (void) sigaction(SIGTERM, &sa, NULL);
}

/* Waits for the source's fd until the deadline (0: none), or while lines are held back, at most
 * until the next look at them; not at all when the source has more at once. 1: readable, 0: time
 * to look again, -ETIME: the deadline passed. */
static int wait_readable(Lines *l, int fd, uint64_t deadline, bool more, const sigset_t *mask) {
        struct pollfd pfd = { .fd = fd, .events = POLLIN };
        struct timespec timeout, *t = NULL;
        uint64_t wait_ns = UINT64_MAX, now = now_nsec(CLOCK_MONOTONIC);

        if (deadline > 0) {
                if (now >= deadline)
                        return -ETIME;
                wait_ns = deadline - now;
        }
        if (l->held > 0)
                wait_ns = MIN(wait_ns, (uint64_t) LINES_ORDER_POLL_MSEC * 1000000ULL);
        if (more)
                wait_ns = 0;
        if (wait_ns != UINT64_MAX) {
                timeout = (struct timespec){ (time_t) (wait_ns / 1000000000ULL),
                                             (long) (wait_ns % 1000000000ULL) };
                t = &timeout;
        }
        if (ppoll(&pfd, 1, t, mask) < 0)
                return errno == EINTR ? 0 : -errno;
        return pfd.revents != 0;
}

/* Takes lines until the source ends (1), a bound is reached or a signal comes (0), or a failure. */
static int copy_lines(Lines *l, const LinesSource *src, uint64_t deadline, const sigset_t *mask) {
        int r = src->pull(src->userdata, l, false);

        while (r >= 0 && r != LINES_SOURCE_END && !l->done && !lines_signalled && l->error == 0) {
                int w;

                release(l, false);
                out_flush(l);
                w = wait_readable(l, src->fd, deadline, r == LINES_SOURCE_MORE, mask);
                if (w == -ETIME)
                        return 0;
                if (w < 0)
                        return w;
                r = w > 0 || r == LINES_SOURCE_MORE ? src->pull(src->userdata, l, false) : LINES_SOURCE_WAIT;
        }
        if (r < 0)
                return r;
        return r == LINES_SOURCE_END;
}

int lines_run(const LinesSource *src, int out, const LinesOptions *o) {
        _cleanup_(lines_done) Lines l = { .o = o,
                                          .out = out,
                                          .have_offset = o->have_offset,
                                          .offset_ns = o->realtime_offset_ns,
                                          .have_start = o->start_ts > 0,
                                          .start_ts = o->start_ts,
                                          .delay_ns = o->order_delay_ns };
        uint64_t deadline = o->duration_usec > 0 ? now_nsec(CLOCK_MONOTONIC) + o->duration_usec * 1000 : 0;
        sigset_t blocked, old;
        bool eof = false;
        int r;

        l.obuf = malloc(LINES_OUT_SIZE);
        if (!l.obuf)
                return -ENOMEM;

        /* A command's stream ends with the command: its caller forwards the signals. */
        if (o->until_sync)
                sigprocmask(SIG_SETMASK, NULL, &old);
        else {
                signals_take(&blocked, &old);
                sigdelset(&old, SIGINT);
                sigdelset(&old, SIGTERM);
        }
        r = copy_lines(&l, src, deadline, &old);
        eof = r == 1;
        /* Interrupted: what tpd had already sent still goes out, with what is held back. */
        while (r >= 0 && lines_signalled && !l.done && l.error == 0) {
                int k = src->pull(src->userdata, &l, true);

                if (k < 0)
                        r = k;
                if (k != LINES_SOURCE_MORE)
                        break;
        }
        if (r >= 0)
                release(&l, true);
        out_flush(&l);
        sigprocmask(SIG_SETMASK, &old, NULL);
        if (l.late > 0)
                log_error("%" PRIu64 " records came more than the ordering delay after younger ones "
                          "and went out of order",
                          l.late);
        if (r < 0)
                return r;
        if (l.error < 0)
                return l.error;
        return eof && !l.done ? 0 : 1;
}

/* The socket as the source: tpd's NDJSON as it arrives. Only complete lines are taken; at the end
 * of the stream a line cut short is not. */
static int socket_pull(void *userdata, Lines *l, bool last) {
        LineReader *reader = userdata;
        ssize_t n;
        int r;

        r = receive_all(l, reader);
        if (r < 0)
                return r;
        n = line_reader_fill(reader);
        if (n == 0 || n == -ECONNRESET)
                return LINES_SOURCE_END;
        if (n == -EAGAIN)
                return LINES_SOURCE_WAIT;
        if (n == -E2BIG)
                return log_error_errno(-E2BIG, "a line of the stream is longer than %u bytes",
                                       LINES_LINE_MAX);
        if (n < 0)
                return (int) n;
        r = receive_all(l, reader);
        if (r < 0)
                return r;
        /* While streaming, ppoll() says whether more came; at the end, read until nothing has. */
        return last ? LINES_SOURCE_MORE : LINES_SOURCE_WAIT;
}

int lines_stream(int sock, int out, const char *head, size_t head_len, const LinesOptions *o) {
        _cleanup_(line_reader_done) LineReader reader = {};
        LinesSource src = { .fd = sock, .pull = socket_pull, .userdata = &reader };

        if (line_reader_init(&reader, sock, LINES_LINE_MAX, head, head_len) < 0)
                return -ENOMEM;
        /* Reads only after ppoll() said so, and without waiting once interrupted. */
        (void) fcntl(sock, F_SETFL, fcntl(sock, F_GETFL) | O_NONBLOCK);
        return lines_run(&src, out, o);
}
