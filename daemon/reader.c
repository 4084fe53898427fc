/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <fcntl.h>
#include <stdlib.h>

#include "log.h"
#include "reader.h"

/* Pages moved per splice: enough to amortise the syscall, small enough for a cache-warm decode. */
#define READER_BATCH_PAGES 64U
/* Splices per wakeup before yielding to the other CPUs' readers and the clients. */
#define READER_MAX_ROUNDS 16U

struct Reader {
        int fd;
        int pipe[2];
        unsigned cpu;
        size_t page_size;
        size_t batch_size;
        void *buf;
        sd_event_source *source;
        ReaderHandler handler;
        void *userdata;
};

Reader *reader_free(Reader *r) {
        if (!r)
                return NULL;
        sd_event_source_disable_unref(r->source);
        safe_close(r->fd);
        safe_close(r->pipe[0]);
        safe_close(r->pipe[1]);
        free(r->buf);
        free(r);
        return NULL;
}

DEFINE_TRIVIAL_CLEANUP_FUNC(Reader *, reader_free);

/* Moves up to one batch of whole pages through the pipe into buf. Returns the bytes moved, 0 when
 * no full page is waiting. */
static ssize_t reader_splice(Reader *r) {
        ssize_t n, got = 0;

        n = splice(r->fd, NULL, r->pipe[1], NULL, r->batch_size, SPLICE_F_NONBLOCK | SPLICE_F_MOVE);
        if (n < 0)
                return errno == EAGAIN || errno == EINTR ? 0 : negative_errno();

        /* The pipe holds exactly what was spliced: whole pages, read back in one or few calls. */
        while (got < n) {
                ssize_t k = read(r->pipe[0], (char *) r->buf + got, (size_t) (n - got));
                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        return negative_errno();
                }
                if (k == 0)
                        return -EIO;
                got += k;
        }
        return n;
}

int reader_drain(Reader *r) {
        for (unsigned round = 0; round < READER_MAX_ROUNDS; round++) {
                ssize_t n = reader_splice(r);
                if (n < 0)
                        return log_error_errno((int) n, "Failed to splice pages of CPU %u: %m", r->cpu);
                if (n == 0)
                        break;
                r->handler(r->userdata, r->cpu, r->buf, (size_t) n / r->page_size, r->page_size);
        }
        return 0;
}

int reader_flush(Reader *r) {
        /* read() hands out full pages and, unlike splice(), the one the kernel is still writing; it
         * returns EAGAIN when the buffer is empty, so an idle flush costs one syscall per CPU. */
        for (unsigned round = 0; round < READER_BATCH_PAGES; round++) {
                ssize_t n = read(r->fd, r->buf, r->page_size);

                if (n < 0)
                        return errno == EAGAIN || errno == EINTR
                                       ? 0
                                       : log_error_errno(negative_errno(), "Failed to read CPU %u: %m", r->cpu);
                if ((size_t) n != r->page_size)
                        return 0;
                r->handler(r->userdata, r->cpu, r->buf, 1, r->page_size);
        }
        return 0;
}

static int reader_on_io(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        Reader *r = userdata;

        (void) reader_drain(r);
        return 0;
}

int reader_new(sd_event *event, int fd, unsigned cpu, size_t page_size, ReaderHandler handler, void *userdata,
               Reader **ret) {
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
        r->handler = handler;
        r->userdata = userdata;

        if (pipe2(r->pipe, O_CLOEXEC | O_NONBLOCK) < 0)
                return negative_errno();
        /* The pipe must hold a whole batch, or splice moves less than we asked for. */
        if (fcntl(r->pipe[1], F_SETPIPE_SZ, (int) r->batch_size) < 0)
                return log_error_errno(negative_errno(), "Failed to size the pipe of CPU %u: %m", cpu);
        r->buf = malloc(r->batch_size);
        if (!r->buf)
                return -ENOMEM;

        k = sd_event_add_io(event, &r->source, r->fd, EPOLLIN, reader_on_io, r);
        if (k < 0)
                return log_error_errno(k, "Failed to watch CPU %u: %m", cpu);
        (void) sd_event_source_set_description(r->source, "reader");

        *ret = TAKE_PTR(r);
        return 0;
}
