/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Records, streams, datasets and socketpairs for test-stream and test-stream-losses (see
 * stream-helpers.h).
 */

#include <limits.h>
#include <sys/socket.h>

#include "stream-helpers.h"

const char *test_datadir;

Pair pair_new(int sndbuf) {
        int fds[2];

        ASSERT(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, fds) == 0);
        if (sndbuf > 0)
                ASSERT(setsockopt(fds[0], SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf)) == 0);
        return (Pair){ fds[0], fds[1] };
}

void pair_close(Pair *p) {
        if (p->w >= 0)
                close(p->w);
        if (p->r >= 0)
                close(p->r);
}

/* Appends everything waiting on fd to out. */
size_t drain(int fd, JsonBuf *out) {
        size_t total = 0;

        for (;;) {
                ssize_t n;

                ASSERT_INT_EQ(jsonbuf_reserve(out, 65536 + 1), 0);
                n = read(fd, out->data + out->len, 65536);
                if (n < 0 && errno == EAGAIN)
                        break;
                ASSERT(n >= 0);
                if (n == 0)
                        break;
                out->len += (size_t) n;
                total += (size_t) n;
        }
        out->data[out->len] = 0;
        return total;
}

/* Writes the whole queue through a socketpair and returns what came out. */
void flush_queue(Queue *q, JsonBuf *out) {
        Pair p = pair_new(0);

        for (;;) {
                int r = queue_write(q, p.w);
                ASSERT(r >= 0);
                drain(p.r, out);
                if (r == 0)
                        break;
        }
        ASSERT(queue_is_empty(q));
        ASSERT_INT_EQ(q->bytes, 0);
        pair_close(&p);
}

/* An event record with a fixed line of text, as the decoder would have appended it. */
size_t add_event(Batch *b, unsigned cpu, uint16_t id, int32_t pid, uint64_t ts, const char *text) {
        size_t len = strlen(text);
        Record *r;

        ASSERT_INT_EQ(jsonbuf_reserve(&b->buf, len), 0);
        r = batch_add_record(b);
        ASSERT(r);
        r->offset = (uint32_t) b->buf.len;
        r->length = (uint32_t) len;
        r->cpu = cpu;
        r->event_id = id;
        r->pid = pid;
        r->ts = ts;
        r->kind = RECORD_EVENT;
        jsonbuf_put(&b->buf, text, len);
        return b->n_records - 1;
}

Stream *stream_make(StreamMode mode, unsigned n_cpus, size_t max_bytes) {
        Stream *s = NULL;

        ASSERT_INT_EQ(stream_new(mode, n_cpus, max_bytes, &s), 0);
        ASSERT(s);
        return s;
}

/* Sets a filter on one event, as a call naming it does. */
int set_filter(Stream *s, struct tep_handle *tep, const char *filter, const char *event,
               SelectionError *ret_error) {
        const char *colon = strchr(event, ':');
        char system[64];
        struct tep_event *e;
        SelectionError err = {};
        int r;

        ASSERT(colon);
        snprintf(system, sizeof(system), "%.*s", (int) (colon - event), event);
        e = tep_find_event_by_name(tep, system, colon + 1);
        ASSERT(e);
        r = selection_set_filter(&s->selection, tep, filter, &e, 1, true, &err);
        if (ret_error)
                *ret_error = err;
        else
                free(err.message);
        return r;
}

/* A tep with the formats of a dataset, as test-decode builds it. */
struct tep_handle *load_tep(const char *name) {
        struct tep_handle *tep = tep_alloc();
        static const char *const files[] = {
                "sched.sched_switch.format",
                "syscalls.sys_enter_getppid.format",
        };
        char path[PATH_MAX];
        char *buf;
        size_t len;

        ASSERT(tep);
        tep_set_long_size(tep, 8);
        snprintf(path, sizeof(path), "%s/%s/header_page", test_datadir, name);
        buf = test_read_file(path, &len);
        ASSERT(buf);
        ASSERT(tep_parse_header_page(tep, buf, len, 8) == 0);
        free(buf);
        for (size_t i = 0; i < 2; i++) {
                snprintf(path, sizeof(path), "%s/%s/%s", test_datadir, name, files[i]);
                buf = test_read_file(path, &len);
                if (!buf)
                        continue;
                ASSERT_INT_EQ(tep_parse_event(tep, buf, len, i == 0 ? "sched" : "syscalls"), 0);
                free(buf);
        }
        return tep;
}

uint8_t *load_pages(const char *name, const char *file, size_t *ret_n) {
        char path[PATH_MAX];
        uint8_t *pages;
        size_t len = 0;

        snprintf(path, sizeof(path), "%s/%s/%s", test_datadir, name, file);
        pages = (uint8_t *) test_read_file(path, &len);
        if (!pages)
                TEST_FAIL("cannot read %s: %m", path);
        ASSERT(len % PAGE == 0);
        *ret_n = len / PAGE;
        return pages;
}

/* Ten-byte lines, so that the limit arithmetic is plain. */
size_t add_line(Batch *b, unsigned cpu, uint64_t ts) {
        char text[16];
        snprintf(text, sizeof(text), "{\"n\":%03u}\n", (unsigned) ts);
        ASSERT_INT_EQ(strlen(text), 10);
        return add_event(b, cpu, 1, 1, ts, text);
}
