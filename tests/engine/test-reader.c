/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The reader's page transport, with a pipe standing in for trace_pipe_raw: a pipe gives what
 * trace_pipe_raw never does on its own (splices and reads that end in the middle of a page), so
 * that every way bytes can arrive is tried. Whatever the pieces, the handler must see whole pages,
 * in order, each starting where a page starts. A source that polls ready for good (EOF here, a
 * CPU without a ring buffer in the kernel) must make the reader stop watching it, not spin.
 */
#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <systemd/sd-event.h>

#include "reader.h"
#include "tpd-test.h"
#include "util.h"

#define PAGE 4096U
#define CPU 3U

static uint64_t delivered; /* pages seen by the handler */
static uint64_t written;   /* bytes of the stream written into the source */

/* Byte p of the endless test stream: every page different, every offset within it too. */
static uint8_t stream_byte(uint64_t p) {
        uint64_t page = p / PAGE, i = p % PAGE;
        return (uint8_t) (page * 31 + i * 7 + (i >> 8));
}

static void handler(void *userdata, unsigned cpu, const void *pages, size_t n_pages, size_t page_size) {
        const uint8_t *b = pages;

        ASSERT_INT_EQ(cpu, CPU);
        ASSERT_INT_EQ(page_size, PAGE);
        ASSERT(n_pages > 0);
        for (size_t k = 0; k < n_pages; k++, delivered++)
                for (size_t i = 0; i < PAGE; i++)
                        if (b[k * PAGE + i] != stream_byte(delivered * PAGE + i))
                                TEST_FAIL("page %" PRIu64 " byte %zu: 0x%02x, expected 0x%02x (misaligned?)",
                                          delivered, i, b[k * PAGE + i], stream_byte(delivered * PAGE + i));
}

static void source_write(int fd, uint64_t n) {
        uint8_t buf[PAGE];

        while (n > 0) {
                size_t k = MIN(n, sizeof(buf));
                ssize_t w;

                for (size_t i = 0; i < k; i++)
                        buf[i] = stream_byte(written + i);
                w = write(fd, buf, k);
                ASSERT(w == (ssize_t) k);
                written += k;
                n -= k;
        }
}

/* Writes up to the next page boundary. */
static void source_complete_page(int fd) {
        if (written % PAGE)
                source_write(fd, PAGE - written % PAGE);
}

/* The reader's own pipe: the read end among the fds that reader_new() opened. */
static int find_new_pipe_read_end(const bool *before) {
        int found = -1;

        for (int fd = 0; fd < 1024; fd++) {
                char link[64], target[64];
                ssize_t n;

                if (before[fd])
                        continue;
                snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
                n = readlink(link, target, sizeof(target) - 1);
                if (n <= 0)
                        continue;
                target[n] = 0;
                if (strncmp(target, "pipe:", 5) == 0 && (fcntl(fd, F_GETFL) & O_ACCMODE) == O_RDONLY) {
                        ASSERT(found < 0);
                        found = fd;
                }
        }
        return found;
}

static void open_fds(bool *ret) {
        for (int fd = 0; fd < 1024; fd++)
                ret[fd] = fcntl(fd, F_GETFD) >= 0;
}

/* Splices that end inside a page, and odd pieces from one byte to almost a page: each fragment
 * waits for the rest. */
static void test_partial_splices(Reader *r, int fd) {
        source_write(fd, 2 * PAGE + PAGE / 2);
        ASSERT(reader_drain(r) == 0);
        ASSERT_U64_EQ(delivered, 2);
        source_write(fd, PAGE / 2 + PAGE);
        ASSERT(reader_drain(r) == 0);
        ASSERT_U64_EQ(delivered, 4);

        for (unsigned piece = 1; piece < 3 * PAGE; piece = piece * 3 + 1) {
                source_write(fd, piece);
                ASSERT(reader_drain(r) == 0);
                ASSERT_U64_EQ(delivered, written / PAGE);
        }
        source_complete_page(fd);
        ASSERT(reader_drain(r) == 0);
        ASSERT_U64_EQ(delivered, written / PAGE);
}

/* Short reads on the flush path: the rest of a page is asked for, not a whole page. */
static void test_flush_short_reads(Reader *r, int fd) {
        source_write(fd, 100);
        ASSERT(reader_flush(r) == 0);
        ASSERT_U64_EQ(delivered, written / PAGE);
        source_write(fd, PAGE - 100 + PAGE + 10);
        ASSERT(reader_flush(r) == 0);
        ASSERT_U64_EQ(delivered, written / PAGE);
        /* ... and a splice continues the same stream after it. */
        source_write(fd, 3 * PAGE);
        ASSERT(reader_drain(r) == 0);
        ASSERT_U64_EQ(delivered, written / PAGE);
        source_complete_page(fd);
}

static void test_drain_bounds(Reader *r, int fd) {
        /* More than one batch in one drain, and a bounded number (the loop serves the peers in
         * between): the rest comes with the next drains. */
        uint64_t before = delivered;

        source_write(fd, 200 * PAGE);
        ASSERT(reader_drain(r) == 0);
        ASSERT(delivered - before > 64 && delivered - before < 200);
        for (unsigned i = 0; i < 4 && delivered < written / PAGE; i++)
                ASSERT(reader_drain(r) == 0);
        ASSERT_U64_EQ(delivered, written / PAGE);

        /* Draining a CPU that went offline: bounded per call, 1 once empty. */
        source_write(fd, 100 * PAGE + 5);
        ASSERT_INT_EQ(reader_drain_all(r, 10), 0);
        ASSERT(delivered >= written / PAGE - 90);
        ASSERT_INT_EQ(reader_drain_all(r, 1000), 1);
        ASSERT_U64_EQ(delivered, written / PAGE);
        source_complete_page(fd);
        ASSERT_INT_EQ(reader_drain_all(r, 1000), 1);
        ASSERT_U64_EQ(delivered, written / PAGE);
}

static void test_event_loop(sd_event *e, Reader *r, int fd) {
        /* Pages arrive, the reader wakes and moves them. */
        source_write(fd, 3 * PAGE);
        ASSERT(sd_event_run(e, 1000 * 1000) > 0);
        ASSERT_U64_EQ(delivered, written / PAGE);

        /* Not polling: the loop does not wake for it; reader_drain_all still reads. */
        ASSERT(reader_set_polling(r, false) == 0);
        ASSERT(!reader_is_polling(r));
        source_write(fd, PAGE);
        ASSERT_INT_EQ(sd_event_run(e, 50 * 1000), 0);
        ASSERT_INT_EQ(reader_drain_all(r, 1000), 1);
        ASSERT_U64_EQ(delivered, written / PAGE);
        ASSERT(reader_set_polling(r, true) == 0);
        ASSERT(reader_is_polling(r));
}

/* Reading spliced pages back fails (the pipe's read end is swapped for a write-only fd): what was
 * in the pipe is dropped and counted, a fresh pipe takes over, and the pages after it are whole
 * and aligned again. */
static void test_failed_read_back(Reader *r, int fd, int pipe_read_end) {
        int devnull, keep;

        keep = dup(pipe_read_end); /* the pipe keeps a reader: no EPIPE, no SIGPIPE */
        ASSERT(keep >= 0);
        devnull = open("/dev/null", O_WRONLY | O_CLOEXEC);
        ASSERT(devnull >= 0);
        ASSERT(dup2(devnull, pipe_read_end) == pipe_read_end);
        safe_close(devnull);
        source_write(fd, 2 * PAGE);
        ASSERT(reader_drain(r) == 0);
        ASSERT_U64_EQ(reader_stats(r)->dropped_bytes, 2 * PAGE);
        ASSERT_U64_EQ(delivered, written / PAGE - 2);
        delivered += 2; /* the handler expects the pages after the dropped ones */
        source_write(fd, 3 * PAGE + 100);
        ASSERT(reader_drain(r) == 0);
        source_complete_page(fd);
        ASSERT(reader_flush(r) == 0);
        ASSERT_U64_EQ(delivered, written / PAGE);
        ASSERT_U64_EQ(reader_stats(r)->dropped_bytes, 2 * PAGE);
        safe_close(keep);
}

/* A source that polls ready forever with nothing to read (EOF): one wake-up, then the reader stops
 * watching it, and the loop sleeps. Asked to poll again, it tries once more. Closes fd. */
static void test_source_at_eof(sd_event *e, Reader *r, int fd) {
        source_write(fd, 7); /* a fragment that will never complete */
        ASSERT(reader_drain(r) == 0);
        safe_close(fd);
        ASSERT(sd_event_run(e, 1000 * 1000) > 0);
        ASSERT(!reader_is_polling(r));
        ASSERT_INT_EQ(sd_event_run(e, 100 * 1000), 0);
        ASSERT(reader_set_polling(r, true) == 0);
        ASSERT(reader_is_polling(r));
        ASSERT(sd_event_run(e, 1000 * 1000) > 0);
        ASSERT(!reader_is_polling(r));
        ASSERT_INT_EQ(sd_event_run(e, 100 * 1000), 0);
        ASSERT_INT_EQ(reader_drain_all(r, 1000), 1);
}

/* The steps run in order on one stream: each continues where the last one left the source. */
int main(void) {
        static bool fds_before[1024];
        int pipe_read_end;
        sd_event *e = NULL;
        Reader *r = NULL;
        int src[2];

        ASSERT(sd_event_new(&e) >= 0);
        ASSERT(pipe2(src, O_CLOEXEC | O_NONBLOCK) == 0);
        /* Room for a few hundred pages, so that one drain has more than a batch to move. */
        ASSERT(fcntl(src[1], F_SETPIPE_SZ, 1 << 20) >= (1 << 20));
        open_fds(fds_before);
        ASSERT(reader_new(e, src[0], CPU, PAGE, handler, NULL, &r) == 0);
        pipe_read_end = find_new_pipe_read_end(fds_before);
        ASSERT(pipe_read_end >= 0);
        ASSERT(reader_is_polling(r));

        test_partial_splices(r, src[1]);
        test_flush_short_reads(r, src[1]);
        test_drain_bounds(r, src[1]);
        test_event_loop(e, r, src[1]);
        test_failed_read_back(r, src[1], pipe_read_end);
        test_source_at_eof(e, r, TAKE_FD(src[1]));

        ASSERT_U64_EQ(reader_stats(r)->pages, delivered - 2);
        ASSERT_U64_EQ(delivered, written / PAGE);

        reader_free(r);
        sd_event_unref(e);
        return 0;
}
