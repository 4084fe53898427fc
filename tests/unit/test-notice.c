/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Notice records (stream_queue_notice()): the exact line in both stream modes, escaping of a
 * message that carries quotes, backslashes, control bytes and invalid UTF-8 (text another process
 * wrote to tracefs), and that a notice goes out even when the stream's queue is over its bound.
 */

#include <sys/socket.h>

#include "encode.h"
#include "queue.h"
#include "stream.h"
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

int main(void) {
        test_raw();
        test_more();
        test_full_queue();
        return EXIT_SUCCESS;
}
