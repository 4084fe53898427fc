/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Notice records (stream_queue_notice()): the exact line in both stream modes, escaping of a
 * message that carries quotes, backslashes, control bytes and invalid UTF-8 (text another process
 * wrote to tracefs), and that a notice goes out even when the stream's queue is over its bound. A
 * recording gets a NOTICE frame, charged to its queue: with no room it waits (the latest one) and
 * goes out once the queue has room again, before anything else.
 */

#include <sys/socket.h>

#include "core/encode.h"
#include "core/queue.h"
#include "core/recording.h"
#include "core/stream.h"
#include "tpd-protocol.h"
#include "tpd-test.h"

static void written(Stream *s, JsonBuf *out) {
        int fds[2];
        ssize_t n;

        ASSERT(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, fds) == 0);
        ASSERT_INT_EQ(queue_write(&s->queue, fds[0]), 0);
        ASSERT_INT_EQ(jsonbuf_reserve(out, 65536), 0);
        n = read(fds[1], out->data + out->len, 65536);
        ASSERT(n >= 0);
        out->len += (size_t) n;
        close(fds[0]);
        close(fds[1]);
}

static void test_raw(void) {
        static const char want[] =
                "{\"ts\":83417660001,\"notice\":\"instance-changed\",\"message\":\"sched:sched_switch was "
                "disabled, re-enabled; the filter was changed to 'a \\\"b\\\" \\\\ \\n\\u001b[0m "
                "\xef\xbf\xbd'\"}\n";
        JsonBuf out = {};
        Stream *s;

        ASSERT_INT_EQ(stream_new(STREAM_RAW, 2, 1 << 20, &s), 0);
        ASSERT_INT_EQ(
                stream_queue_notice(s, 83417660001ULL, "instance-changed",
                                    "sched:sched_switch was disabled, re-enabled; the filter was changed "
                                    "to 'a \"b\" \\ \n\x1b[0m \xff'"),
                0);
        ASSERT_INT_EQ(s->delivered, 0); /* not an event record */
        written(s, &out);
        ASSERT_MEM_EQ(out.data, out.len, want, sizeof(want) - 1);
        jsonbuf_done(&out);
        stream_free(s);
}

static void test_more(void) {
        static const char want[] =
                "{\"continues\":true,\"parameters\":{\"record\":"
                "{\"ts\":1,\"notice\":\"instance-changed\",\"message\":\"tracing_on was changed\"}}}";
        JsonBuf out = {};
        Stream *s;

        ASSERT_INT_EQ(stream_new(STREAM_MORE, 1, 1 << 20, &s), 0);
        ASSERT_INT_EQ(stream_queue_notice(s, 1, "instance-changed", "tracing_on was changed"), 0);
        written(s, &out);
        /* One Varlink message: the NUL terminator included. */
        ASSERT_MEM_EQ(out.data, out.len, want, sizeof(want));
        jsonbuf_done(&out);
        stream_free(s);
}

static void test_full_queue(void) {
        static const char filler[64] = "x";
        JsonBuf out = {};
        Stream *s;

        /* A queue already over its bound still takes the notice: it is rare and small. */
        ASSERT_INT_EQ(stream_new(STREAM_RAW, 1, 16, &s), 0);
        ASSERT_INT_EQ(queue_push_static(&s->queue, filler, sizeof(filler)), 0);
        ASSERT(s->queue.bytes > s->max_bytes);
        ASSERT_INT_EQ(stream_queue_notice(s, 2, "instance-changed", "m"), 0);
        written(s, &out);
        ASSERT(out.len > sizeof(filler));
        ASSERT(memcmp(out.data + sizeof(filler), "{\"ts\":2,", 8) == 0);
        jsonbuf_done(&out);
        stream_free(s);
}

/* The frame of a notice of a recording: header, then the object without a newline. */
static void assert_notice_frame(const char *data, size_t len, const char *want) {
        TpdFrame f;

        ASSERT(len >= sizeof(f));
        memcpy(&f, data, sizeof(f));
        ASSERT_INT_EQ(f.type, TPD_FRAME_NOTICE);
        ASSERT_INT_EQ(f.cpu, 0);
        ASSERT_INT_EQ(f.arg, 0);
        ASSERT_MEM_EQ(data + sizeof(f), len - sizeof(f), want, strlen(want));
        ASSERT_INT_EQ(f.length, strlen(want));
}

static void test_pages(void) {
        JsonBuf out = {};
        Recording *rec;
        Stream *s;

        ASSERT_INT_EQ(recording_new(2, 1 << 20, &rec), 0);
        s = &rec->stream;
        ASSERT_INT_EQ(recording_queue_notice(rec, 7, "instance-changed", "tracing_on \"x\""), 0);
        written(s, &out);
        assert_notice_frame(
                out.data, out.len,
                "{\"ts\":7,\"notice\":\"instance-changed\",\"message\":\"tracing_on \\\"x\\\"\"}");
        jsonbuf_done(&out);
        recording_free(rec);
}

static void test_pages_full(void) {
        static const char name[16] = "0123456789abcdef";
        JsonBuf out = {};
        size_t frames = 0;
        Recording *rec;
        Stream *s;
        int r;

        /* Names fill the queue to its bound: one more frame is refused, nothing queued for it. */
        ASSERT_INT_EQ(recording_new(1, 1024, &rec), 0);
        s = &rec->stream;
        while ((r = recording_queue_frame(rec, TPD_FRAME_COMM, 0, 1, name, sizeof(name), NULL, 0)) == 0)
                frames++;
        ASSERT_INT_EQ(r, -ENOBUFS);
        ASSERT_INT_EQ(frames, 1024 / (sizeof(TpdFrame) + sizeof(name)));
        ASSERT(s->queue.held <= s->max_bytes);

        /* The notices wait; the latest one goes out once there is room. */
        ASSERT_INT_EQ(recording_queue_notice(rec, 1, "instance-changed", "first"), 0);
        ASSERT_INT_EQ(recording_queue_notice(rec, 2, "instance-changed", "second"), 0);
        ASSERT(s->drops_pending);
        ASSERT(s->queue.held <= s->max_bytes);
        written(s, &out);
        ASSERT_INT_EQ(out.len, frames * (sizeof(TpdFrame) + sizeof(name)));
        out.len = 0;
        ASSERT_INT_EQ(recording_report_losses(rec), 0);
        ASSERT(!s->drops_pending);
        written(s, &out);
        assert_notice_frame(out.data, out.len,
                            "{\"ts\":2,\"notice\":\"instance-changed\",\"message\":\"second\"}");
        jsonbuf_done(&out);
        recording_free(rec);
}

int main(void) {
        test_raw();
        test_more();
        test_full_queue();
        test_pages();
        test_pages_full();
        return EXIT_SUCCESS;
}
