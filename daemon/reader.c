/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdlib.h>
#include <time.h>

#include "log.h"
#include "ratelimit.h"
#include "reader.h"

/* Pages moved per splice: enough to amortise the syscall, small enough for a cache-warm decode. */
#define READER_BATCH_PAGES 64U
/* Splices per wakeup before yielding to the other CPUs' readers and the peers. Few: the streams
 * that read a shared-memory ring ask to be woken on their sockets, and must be heard before tpd
 * has published a large part of the ring (2 × 64 pages of the smallest records make about 4 MiB
 * of lines, an eighth of the default ring); the loop's turn costs microseconds. */
#define READER_MAX_ROUNDS 2U
/* Wake-ups in a row that moved nothing before the reader stops watching its fd. The fd of a CPU
 * without a ring buffer polls ready forever while splice says EAGAIN and read ENODEV (6.18); a
 * healthy fd at most now and then, when the flush timer took the pages first. */
#define READER_MAX_IDLE_WAKEUPS 8U
/* At most one warning per reader and cause in this interval: failures repeat on the record path. */
#define READER_LOG_INTERVAL_USEC (10 * 1000 * 1000ULL)

struct Reader {
        int fd;
        int pipe[2]; /* -1 after a pipe failure that could not be repaired: pages then come by read() */
        unsigned cpu;
        size_t page_size;
        size_t batch_size;
        size_t buf_size; /* a batch plus one page: room for a fragment and a whole batch */
        uint8_t *buf;
        size_t fill;    /* bytes in buf; between calls less than a page (a fragment) */
        size_t in_pipe; /* bytes spliced into the pipe and not read back yet; 0 between calls */

        unsigned idle_wakeups;
        bool polling; /* the caller wants the fd watched */
        bool partial; /* a wake-up with no full page reads the partial one (reader_set_partial()) */
        bool stalled; /* ... but the reader stopped watching it: it polled ready with nothing to read */
        bool warned_stall;
        bool warned_read;
        RateLimit pipe_log_limit;
        RateLimit splice_log_limit;

        ReaderStats stats;
        sd_event_source *source;
        ReaderHandler handler;
        void *userdata;
};

Reader *reader_free(Reader *r) {
        if (!r)
                return NULL;
        /* A fragment can only be the start of a page the kernel never finished handing out. */
        if (r->fill > 0)
                log_debug("CPU %u: discarding %zu bytes of an incomplete page.", r->cpu, r->fill);
        sd_event_source_disable_unref(r->source);
        safe_close(r->fd);
        safe_close(r->pipe[0]);
        safe_close(r->pipe[1]);
        free(r->buf);
        free(r);
        return NULL;
}

DEFINE_TRIVIAL_CLEANUP_FUNC(Reader *, reader_free);

/* Hands every whole page in buf to the handler and keeps the fragment behind them. */
static void reader_deliver(Reader *r) {
        size_t n = r->fill / r->page_size, rest;

        if (n == 0)
                return;
        r->handler(r->userdata, r->cpu, r->buf, n, r->page_size);
        r->stats.pages += n;
        rest = r->fill - n * r->page_size;
        if (rest > 0)
                memmove(r->buf, r->buf + n * r->page_size, rest);
        r->fill = rest;
}

static int reader_open_pipe(Reader *r) {
        int p[2];

        if (pipe2(p, O_CLOEXEC | O_NONBLOCK) < 0)
                return negative_errno();
        /* The pipe must hold a whole batch, or splice moves less than we asked for. */
        if (fcntl(p[1], F_SETPIPE_SZ, (int) r->batch_size) < 0) {
                int k = negative_errno();
                safe_close(p[0]);
                safe_close(p[1]);
                return k;
        }
        r->pipe[0] = p[0];
        r->pipe[1] = p[1];
        return 0;
}

/* Reading spliced pages back failed: what the pipe still holds, and the fragment of a page whose
 * rest is in there, can no longer be put together with the pages around them. Drop them with a
 * fresh pipe rather than hand the decoder a page that starts in the middle of one. */
static int reader_reset_pipe(Reader *r, int error) {
        size_t fragment = r->fill % r->page_size, dropped;
        int k;

        /* Whole pages read back before the failure are good. */
        reader_deliver(r);
        dropped = fragment + r->in_pipe;
        r->fill = 0;
        r->in_pipe = 0;
        r->stats.dropped_bytes += dropped;

        r->pipe[0] = safe_close(r->pipe[0]);
        r->pipe[1] = safe_close(r->pipe[1]);
        k = reader_open_pipe(r);

        if (ratelimit_below(&r->pipe_log_limit))
                log_warning_errno(
                        error,
                        "CPU %u: failed to read spliced pages back (%m); dropped %zu bytes "
                        "(%zu pages, %" PRIu64 " bytes so far)%s",
                        r->cpu, dropped, (dropped + r->page_size - 1) / r->page_size, r->stats.dropped_bytes,
                        k < 0 ? "; no new pipe either, reading pages one by one from now on." : ".");
        return error;
}

/* Empties the pipe into buf, handing over whole pages as they complete. */
static int reader_read_pipe(Reader *r) {
        while (r->in_pipe > 0) {
                size_t room = r->buf_size - r->fill;
                ssize_t k;

                if (room < r->page_size) {
                        reader_deliver(r); /* leaves less than a page: room for a whole batch */
                        continue;
                }
                k = read(r->pipe[0], r->buf + r->fill, MIN(room, r->in_pipe));
                if (k < 0 && errno == EINTR)
                        continue;
                /* EAGAIN included: the pipe holds less than was spliced into it, nothing to wait for. */
                if (k <= 0)
                        return reader_reset_pipe(r, k < 0 ? negative_errno() : -EIO);
                r->fill += (size_t) k;
                r->in_pipe -= (size_t) k;
        }
        reader_deliver(r);
        return 0;
}

/* read()s the rest of the current page from the fd (a whole page when there is no fragment).
 * Returns 1 when a page was completed and handed over, -EAGAIN when the buffer is empty, or a
 * negative errno: -ENODEV for a CPU without a ring buffer. *moved counts the bytes read. */
static int reader_read_page(Reader *r, size_t *moved) {
        for (;;) {
                size_t want = r->page_size - r->fill % r->page_size;
                ssize_t k = read(r->fd, r->buf + r->fill, want);

                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        return negative_errno();
                }
                if (k == 0)
                        return -EAGAIN;
                r->fill += (size_t) k;
                *moved += (size_t) k;
                if (r->fill % r->page_size == 0) {
                        reader_deliver(r);
                        return 1;
                }
                /* A short read: the kernel keeps the rest of the page for the next read() (6.18,
                 * tracing_buffers_read), so ask for exactly the rest. */
        }
}

/* Moves up to one batch of whole pages through the pipe into buf and hands them over. Returns the
 * bytes moved out of the fd, 0 when no full page is waiting. */
static ssize_t reader_splice(Reader *r) {
        ssize_t n;
        int k;

        if (r->pipe[1] < 0) {
                size_t moved = 0;
                k = reader_read_page(r, &moved);
                return k == -EAGAIN ? 0 : k < 0 ? k : (ssize_t) moved;
        }

        do
                n = splice(r->fd, NULL, r->pipe[1], NULL, r->batch_size - r->in_pipe,
                           SPLICE_F_NONBLOCK | SPLICE_F_MOVE);
        while (n < 0 && errno == EINTR);
        if (n < 0)
                return errno == EAGAIN ? 0 : negative_errno();

        /* The pipe holds exactly what was spliced: whole pages, read back in one or few calls. */
        r->in_pipe += (size_t) n;
        k = reader_read_pipe(r);
        /* Dropped and logged; the pages came out of the fd all the same. */
        (void) k;
        return n;
}

static int reader_drain_moved(Reader *r, size_t *moved) {
        for (unsigned round = 0; round < READER_MAX_ROUNDS; round++) {
                ssize_t n = reader_splice(r);
                if (n < 0) {
                        if (ratelimit_below(&r->splice_log_limit))
                                log_warning_errno((int) n, "Failed to splice pages of CPU %u: %m", r->cpu);
                        return (int) n;
                }
                if (n == 0)
                        break;
                *moved += (size_t) n;
        }
        return 0;
}

int reader_drain(Reader *r) {
        size_t moved = 0;
        return reader_drain_moved(r, &moved);
}

static void reader_read_failed(Reader *r, int error) {
        /* Once until reading works again: the flush timer retries ten times a second. */
        if (r->warned_read)
                return;
        r->warned_read = true;
        if (error == -ENODEV)
                log_notice("CPU %u has no ring buffer (it was offline when the instance was made?); "
                           "waiting for it to come online.",
                           r->cpu);
        else
                log_warning_errno(error, "Failed to read CPU %u: %m", r->cpu);
}

/* Reads the pages there are now, the partial one included; *moved counts the bytes. */
static int reader_flush_moved(Reader *r, size_t *moved) {
        /* read() hands out full pages and, unlike splice(), the one the kernel is still writing; it
         * returns EAGAIN when the buffer is empty, so an idle flush costs one syscall per CPU. */
        for (unsigned round = 0; round < READER_BATCH_PAGES; round++) {
                int k = reader_read_page(r, moved);

                if (k == -EAGAIN)
                        break;
                if (k < 0) {
                        reader_read_failed(r, k);
                        return k;
                }
        }
        r->warned_read = false;
        /* The fd had data: a wake-up that found it taken was no sign of a broken fd. */
        if (*moved > 0)
                r->idle_wakeups = 0;
        return 0;
}

int reader_flush(Reader *r) {
        size_t moved = 0;
        return reader_flush_moved(r, &moved);
}

int reader_drain_full(Reader *r, size_t max_pages) {
        uint64_t start = r->stats.pages;

        while (r->stats.pages - start < max_pages) {
                ssize_t n = reader_splice(r);

                if (n == 0)
                        break;
                if (n < 0) {
                        reader_read_failed(r, (int) n);
                        return (int) n;
                }
        }
        return (int) MIN(r->stats.pages - start, (uint64_t) INT_MAX);
}

int reader_drain_all(Reader *r, size_t max_pages) {
        uint64_t start = r->stats.pages;

        while (r->stats.pages - start < max_pages) {
                size_t moved = 0;
                ssize_t n;
                int k;

                n = reader_splice(r);
                if (n > 0)
                        continue;
                k = n < 0 ? (int) n : reader_read_page(r, &moved);
                if (k == 1)
                        continue;
                /* EAGAIN: nothing left. ENODEV: the CPU never had a ring buffer. */
                if (k == -EAGAIN || k == -ENODEV)
                        return 1;
                reader_read_failed(r, k);
                return k;
        }
        return 0;
}

static void reader_stall(Reader *r, const char *why) {
        r->stalled = true;
        r->idle_wakeups = 0;
        (void) sd_event_source_set_enabled(r->source, SD_EVENT_OFF);
        if (!r->warned_stall) {
                r->warned_stall = true;
                log_notice("CPU %u: trace_pipe_raw %s; no longer watching it, only retrying now and then.",
                           r->cpu, why);
        }
}

static int reader_on_io(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        Reader *r = userdata;
        size_t moved = 0;

        (void) reader_drain_moved(r, &moved);
        /* Woken for less than a page, as asked for (buffer_percent 0): that part is what is wanted. */
        if (moved == 0 && r->partial)
                (void) reader_flush_moved(r, &moved);
        if (moved > 0) {
                r->idle_wakeups = 0;
                r->warned_stall = false;
                return 0;
        }
        /* Level-triggered: an fd that is ready for good with nothing to read would wake the loop
         * at once, forever. */
        if (revents & (EPOLLERR | EPOLLHUP))
                reader_stall(r, "reports an error (a CPU without a ring buffer)");
        else if (++r->idle_wakeups >= READER_MAX_IDLE_WAKEUPS)
                reader_stall(r, "keeps polling ready with nothing to read");
        return 0;
}

int reader_set_polling(Reader *r, bool polling) {
        int k;

        if (polling == r->polling && !(polling && r->stalled))
                return 0;
        k = sd_event_source_set_enabled(r->source, polling ? SD_EVENT_ON : SD_EVENT_OFF);
        if (k < 0)
                return k;
        r->polling = polling;
        r->stalled = false;
        r->idle_wakeups = 0;
        return 0;
}

int reader_set_partial(Reader *r, bool partial) {
        int k;

        r->partial = partial;
        if (!partial || !r->polling || r->stalled)
                return 0;
        /* The kernel takes buffer_percent when the fd is polled, that is when it is added to the
         * epoll set and after each wake-up: add it again so that the change applies now. */
        k = sd_event_source_set_enabled(r->source, SD_EVENT_OFF);
        if (k >= 0)
                k = sd_event_source_set_enabled(r->source, SD_EVENT_ON);
        /* Not watched now: as a stalled reader, the check timer watches it again. */
        if (k < 0)
                r->stalled = true;
        return k;
}

bool reader_is_polling(Reader *r) {
        return r->polling && !r->stalled;
}

const ReaderStats *reader_stats(Reader *r) {
        return &r->stats;
}

int reader_new(sd_event *event, int fd, unsigned cpu, size_t page_size, ReaderHandler handler,
               void *userdata, Reader **ret) {
        _cleanup_(reader_freep) Reader *r = NULL;
        int k;

        r = calloc(1, sizeof(Reader));
        if (!r) {
                safe_close(fd);
                return -ENOMEM;
        }
        r->fd = fd;
        r->pipe[0] = r->pipe[1] = -1;
        r->cpu = cpu;
        r->page_size = page_size;
        r->batch_size = page_size * READER_BATCH_PAGES;
        r->buf_size = r->batch_size + page_size;
        r->handler = handler;
        r->userdata = userdata;
        r->pipe_log_limit = r->splice_log_limit = RATELIMIT_INIT(READER_LOG_INTERVAL_USEC, 1);

        k = reader_open_pipe(r);
        if (k < 0)
                return log_error_errno(k, "Failed to make the pipe of CPU %u: %m", cpu);
        r->buf = malloc(r->buf_size);
        if (!r->buf)
                return -ENOMEM;

        k = sd_event_add_io(event, &r->source, r->fd, EPOLLIN, reader_on_io, r);
        if (k < 0)
                return log_error_errno(k, "Failed to watch CPU %u: %m", cpu);
        (void) sd_event_source_set_description(r->source, "reader");
        r->polling = true;

        *ret = TAKE_PTR(r);
        return 0;
}
