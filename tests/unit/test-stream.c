/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Streams and their output queues: selection by event, pid, CPU and filter on real decoded pages,
 * overrun losses reaching every stream that watches the CPU, the bounded queue that drops, counts
 * and reports exactly once there is room, Varlink "more" framing, and the queue's writev path
 * (coalescing, partial writes, ring wrap-around) over a real socketpair().
 *
 *   test-stream DATADIR
 */

#include <limits.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include <traceevent/event-parse.h>

#include "core/decode.h"
#include "core/encode.h"
#include "core/queue.h"
#include "core/stream.h"
#include "tpd-test.h"

#define PAGE 4096U

static const char *datadir;

typedef struct Pair {
        int w, r;
} Pair;

static Pair pair_new(int sndbuf) {
        int fds[2];

        ASSERT(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, fds) == 0);
        if (sndbuf > 0)
                ASSERT(setsockopt(fds[0], SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf)) == 0);
        return (Pair){ fds[0], fds[1] };
}

static void pair_close(Pair *p) {
        if (p->w >= 0)
                close(p->w);
        if (p->r >= 0)
                close(p->r);
}

/* Appends everything waiting on fd to out. */
static size_t drain(int fd, JsonBuf *out) {
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
static void flush_queue(Queue *q, JsonBuf *out) {
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

#define ASSERT_OUT(out, text) ASSERT_MEM_EQ((out)->data, (out)->len, text, strlen(text))

/* An event record with a fixed line of text, as the decoder would have appended it. */
static size_t add_event(Batch *b, unsigned cpu, uint16_t id, int32_t pid, uint64_t ts, const char *text) {
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

static Stream *stream_make(StreamMode mode, unsigned n_cpus, size_t max_bytes) {
        Stream *s = NULL;

        ASSERT_INT_EQ(stream_new(mode, n_cpus, max_bytes, &s), 0);
        ASSERT(s);
        return s;
}

/* Sets a filter on one event, as a call naming it does. */
static int set_filter(Stream *s, struct tep_handle *tep, const char *filter, const char *event,
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

static void test_selection(void) {
        Batch *b = batch_new();
        Stream *all = stream_make(STREAM_RAW, 4, 1 << 20);
        Stream *ev = stream_make(STREAM_RAW, 4, 1 << 20);
        Stream *pid = stream_make(STREAM_RAW, 4, 1 << 20);
        Stream *cpu = stream_make(STREAM_RAW, 4, 1 << 20);
        Stream *both = stream_make(STREAM_RAW, 4, 1 << 20);
        size_t e0, e1, e2, e3, lost0, lost3;

        ASSERT(b);
        e0 = add_event(b, 0, 372, 10, 1, "{\"e\":0}\n");
        e1 = add_event(b, 1, 305, 20, 2, "{\"e\":1}\n");
        e2 = add_event(b, 3, 372, 30, 3, "{\"e\":2}\n");
        e3 = add_event(b, 2, 5000, 10, 4, "{\"e\":3}\n");
        ASSERT_INT_EQ(batch_add_lost(b, 5, 0, 9, TPD_LOST_OVERRUN), 0);
        lost0 = b->n_records - 1;
        ASSERT_INT_EQ(batch_add_lost(b, 6, 3, 9, TPD_LOST_OVERRUN), 0);
        lost3 = b->n_records - 1;

        /* Nothing selected: everything. */
        for (size_t i = 0; i < b->n_records; i++)
                ASSERT(selection_matches(&all->selection, NULL, &b->records[i]));

        /* Events: ids far apart grow the bitmap without losing earlier bits. */
        ASSERT_INT_EQ(selection_select_event(&ev->selection, 372), 0);
        ASSERT_INT_EQ(selection_select_event(&ev->selection, 5000), 0);
        ASSERT_INT_EQ(selection_select_event(&ev->selection, 3), 0);
        ASSERT(selection_matches(&ev->selection, NULL, &b->records[e0]));
        ASSERT(!selection_matches(&ev->selection, NULL, &b->records[e1]));
        ASSERT(selection_matches(&ev->selection, NULL, &b->records[e2]));
        ASSERT(selection_matches(&ev->selection, NULL, &b->records[e3]));
        /* Losses concern every event of the CPU. */
        ASSERT(selection_matches(&ev->selection, NULL, &b->records[lost0]));

        ASSERT_INT_EQ(selection_select_pid(&pid->selection, 10), 0);
        ASSERT_INT_EQ(selection_select_pid(&pid->selection, 30), 0);
        ASSERT(selection_matches(&pid->selection, NULL, &b->records[e0]));
        ASSERT(!selection_matches(&pid->selection, NULL, &b->records[e1]));
        ASSERT(selection_matches(&pid->selection, NULL, &b->records[e2]));
        ASSERT(selection_matches(&pid->selection, NULL, &b->records[e3]));
        ASSERT(selection_matches(&pid->selection, NULL, &b->records[lost0]));

        ASSERT_INT_EQ(selection_select_cpu(&cpu->selection, 3), 0);
        ASSERT_INT_EQ(selection_select_cpu(&cpu->selection, 1), 0);
        ASSERT(!selection_matches(&cpu->selection, NULL, &b->records[e0]));
        ASSERT(selection_matches(&cpu->selection, NULL, &b->records[e1]));
        ASSERT(selection_matches(&cpu->selection, NULL, &b->records[e2]));
        ASSERT(!selection_matches(&cpu->selection, NULL, &b->records[e3]));
        /* A loss on a CPU the stream does not watch is not its concern. */
        ASSERT(!selection_matches(&cpu->selection, NULL, &b->records[lost0]));
        ASSERT(selection_matches(&cpu->selection, NULL, &b->records[lost3]));

        /* All conditions hold at once. */
        ASSERT_INT_EQ(selection_select_event(&both->selection, 372), 0);
        ASSERT_INT_EQ(selection_select_pid(&both->selection, 30), 0);
        ASSERT_INT_EQ(selection_select_cpu(&both->selection, 3), 0);
        ASSERT(!selection_matches(&both->selection, NULL, &b->records[e0]));
        ASSERT(!selection_matches(&both->selection, NULL, &b->records[e1]));
        ASSERT(selection_matches(&both->selection, NULL, &b->records[e2]));
        ASSERT(!selection_matches(&both->selection, NULL, &b->records[e3]));
        ASSERT(selection_matches(&both->selection, NULL, &b->records[lost3]));
        ASSERT(!selection_matches(&both->selection, NULL, &b->records[lost0]));

        /* What stream_offer() queues follows the same selection, in order. */
        {
                JsonBuf out = {};
                for (size_t i = 0; i < b->n_records; i++)
                        ASSERT_INT_EQ(stream_offer(cpu, NULL, b, i), i == e1 || i == e2 || i == lost3);
                flush_queue(&cpu->queue, &out);
                ASSERT_OUT(&out, "{\"e\":1}\n{\"e\":2}\n"
                                 "{\"ts\":6,\"cpu\":3,\"lost\":9,\"cause\":\"overrun\"}\n");
                /* Two event records; the lost record is queued but not counted as delivered. */
                ASSERT_U64_EQ(cpu->delivered, 2);
                ASSERT_U64_EQ(cpu->lost_client, 0);
                jsonbuf_done(&out);
        }

        stream_free(all);
        stream_free(ev);
        stream_free(pid);
        stream_free(cpu);
        stream_free(both);
        ASSERT(stream_free(NULL) == NULL);
        batch_unref(b);
}

/* A tep with the formats of a dataset, as test-decode builds it. */
static struct tep_handle *load_tep(const char *name) {
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
        snprintf(path, sizeof(path), "%s/%s/header_page", datadir, name);
        buf = test_read_file(path, &len);
        ASSERT(buf);
        ASSERT(tep_parse_header_page(tep, buf, len, 8) == 0);
        free(buf);
        for (size_t i = 0; i < 2; i++) {
                snprintf(path, sizeof(path), "%s/%s/%s", datadir, name, files[i]);
                buf = test_read_file(path, &len);
                if (!buf)
                        continue;
                ASSERT_INT_EQ(tep_parse_event(tep, buf, len, i == 0 ? "sched" : "syscalls"), 0);
                free(buf);
        }
        return tep;
}

static uint8_t *load_pages(const char *name, const char *file, size_t *ret_n) {
        char path[PATH_MAX];
        uint8_t *pages;
        size_t len = 0;

        snprintf(path, sizeof(path), "%s/%s/%s", datadir, name, file);
        pages = (uint8_t *) test_read_file(path, &len);
        if (!pages)
                TEST_FAIL("cannot read %s: %m", path);
        ASSERT(len % PAGE == 0);
        *ret_n = len / PAGE;
        return pages;
}

static uint64_t missed_2652(void *userdata, unsigned cpu, const uint64_t *stored) {
        return cpu == 0 ? 2652 : 0;
}

/* The overrun dataset's first page: the kernel overwrote 2652 records before it. Every stream
 * watching CPU 0 hears of it, whatever events or pids it selected. */
static void test_overrun_fanout(void) {
        struct tep_handle *tep = load_tep("overrun");
        DecoderCallbacks cb = { .missed = missed_2652 };
        static const char lost[] = "{\"ts\":753202202212,\"cpu\":0,\"lost\":2652,\"cause\":\"overrun\"}\n";
        const char *getppid = "syscalls:sys_enter_getppid";
        Stream *s[6];
        Decoder *d;
        Batch *b = batch_new();
        uint8_t *pages;
        size_t n_pages;

        pages = load_pages("overrun", "cpu0.pages", &n_pages);
        ASSERT_INT_EQ(decoder_new(tep, &cb, &d), 0);
        ASSERT_INT_EQ(decoder_decode_page(d, pages, PAGE, 0, b), 205);
        ASSERT_INT_EQ(b->records[0].kind, TPD_LOST_OVERRUN);

        for (size_t i = 0; i < 6; i++)
                s[i] = stream_make(STREAM_RAW, 2, 1 << 20);
        ASSERT_INT_EQ(selection_select_event(&s[0]->selection, 305), 0); /* its events */
        ASSERT_INT_EQ(selection_select_event(&s[1]->selection, 372), 0); /* other events */
        ASSERT_INT_EQ(selection_select_pid(&s[2]->selection, 1), 0);     /* another pid */
        ASSERT_INT_EQ(selection_select_cpu(&s[3]->selection, 1), 0);     /* another CPU: nothing */
        ASSERT_INT_EQ(selection_select_cpu(&s[4]->selection, 0), 0);
        ASSERT_INT_EQ(selection_select_pid(&s[4]->selection, 8497), 0);
        /* A filter that no record passes; the loss still does. */
        ASSERT_INT_EQ(set_filter(s[5], tep, "__syscall_nr == 1", getppid, NULL), 0);

        for (size_t k = 0; k < 6; k++)
                for (size_t i = 0; i < b->n_records; i++)
                        ASSERT(stream_offer(s[k], d, b, i) >= 0);

        for (size_t k = 0; k < 6; k++) {
                JsonBuf out = {};
                size_t expect_lines = k == 0 || k == 4 ? 205 : k == 3 ? 0 : 1;

                /* Contiguous slices of one batch make one queue entry. */
                ASSERT_INT_EQ(s[k]->queue.n, expect_lines > 0 ? 1 : 0);
                /* The lost record is one of the lines, not a delivered event. */
                ASSERT_U64_EQ(s[k]->delivered, expect_lines > 0 ? expect_lines - 1 : 0);
                flush_queue(&s[k]->queue, &out);
                if (expect_lines == 0)
                        ASSERT_INT_EQ(out.len, 0);
                else if (expect_lines == 1)
                        ASSERT_OUT(&out, lost);
                else {
                        ASSERT_MEM_EQ(out.data, out.len, b->buf.data, b->buf.len);
                        ASSERT_MEM_EQ(out.data, sizeof(lost) - 1, lost, sizeof(lost) - 1);
                }
                jsonbuf_done(&out);
                stream_free(s[k]);
        }
        /* Every queue let go of the batch. */
        ASSERT_INT_EQ(b->refs, 1);

        batch_unref(b);
        decoder_free(d);
        free(pages);
        tep_free(tep);
}

static size_t count_substr(const char *s, const char *needle) {
        size_t n = 0;
        for (const char *p = s; (p = strstr(p, needle)); p++)
                n++;
        return n;
}

/* A userspace filter on real sched_switch records: exactly the records the golden file says
 * match, and events the filter does not name pass untouched. */
static void test_filter(void) {
        struct tep_handle *tep = load_tep("sched_switch");
        const char *ev = "sched:sched_switch";
        SelectionError err;
        char path[PATH_MAX], *golden;
        size_t n_pages, matched = 0, total = 0;
        DecoderCallbacks cb = {};
        Stream *s = stream_make(STREAM_RAW, 2, 1 << 20);
        Decoder *d;
        uint8_t *pages;
        Batch *b = batch_new();

        /* Refused by the kernel's grammar: the event is named by the caller. */
        ASSERT_INT_EQ(set_filter(s, tep, "next_pid == (", ev, &err), -EINVAL);
        ASSERT_INT_EQ(err.failure, SELECTION_FILTER_INVALID);
        ASSERT_INT_EQ(err.event, 0);
        ASSERT(err.message && strstr(err.message, "column 13"));
        free(err.message);
        /* Taken by the kernel, not by libtraceevent: the message names the event. */
        ASSERT_INT_EQ(set_filter(s, tep, "prev_comm ~ \"a*\"", ev, &err), -EINVAL);
        ASSERT_INT_EQ(err.failure, SELECTION_FILTER_STREAM);
        ASSERT_INT_EQ(err.event, 0);
        ASSERT(err.message && strstr(err.message, "sched:sched_switch: ") &&
               strstr(err.message, "only supported in kernel filters"));
        free(err.message);
        /* Without named events, the events it makes no sense for are left out: here, all. */
        {
                struct tep_event *e = tep_find_event_by_name(tep, "sched", "sched_switch");
                ASSERT_INT_EQ(
                        selection_set_filter(&s->selection, tep, "no_such_field == 1", &e, 1, false, &err),
                        -EINVAL);
                ASSERT_INT_EQ(err.failure, SELECTION_FILTER_NONE);
                ASSERT(err.message == NULL && err.event == SIZE_MAX);
        }
        ASSERT(s->selection.filter == NULL);

        ASSERT_INT_EQ(set_filter(s, tep, "next_pid == 8481 && prev_state == 1", ev, NULL), 0);
        ASSERT(s->selection.filter != NULL);

        pages = load_pages("sched_switch", "cpu0.pages", &n_pages);
        ASSERT_INT_EQ(decoder_new(tep, &cb, &d), 0);
        for (size_t i = 0; i < n_pages; i++) {
                batch_reset(b);
                ASSERT(decoder_decode_page(d, pages + i * PAGE, PAGE, 0, b) > 0);
                for (size_t j = 0; j < b->n_records; j++, total++)
                        matched += selection_matches(&s->selection, NULL, &b->records[j]);
        }
        snprintf(path, sizeof(path), "%s/sched_switch/expected.ndjson", datadir);
        golden = test_read_file(path, NULL);
        ASSERT(golden);
        ASSERT_INT_EQ(total, 126);
        ASSERT(matched > 0);
        ASSERT_INT_EQ(matched, count_substr(golden, "\"prev_state\":1,\"next_comm\":\"tpd-ping\","
                                                    "\"next_pid\":8481,"));

        /* Records of events outside the filter's list do not pass it; losses always do. */
        {
                static const uint8_t raw[16] = { 305 & 0xff, 305 >> 8, 0, 0, 1 };
                Batch *o = batch_new();
                add_event(o, 0, 305, 1, 1, "{}\n");
                o->records[0].raw = raw;
                o->records[0].raw_size = sizeof(raw);
                ASSERT_INT_EQ(batch_add_lost(o, 1, 0, 1, TPD_LOST_OVERRUN), 0);
                ASSERT(!selection_matches(&s->selection, NULL, &o->records[0]));
                ASSERT(selection_matches(&s->selection, NULL, &o->records[1]));
                batch_unref(o);
        }

        /* A new filter replaces the old one. */
        ASSERT_INT_EQ(set_filter(s, tep, "next_pid == 1", ev, NULL), 0);
        batch_reset(b);
        ASSERT(decoder_decode_page(d, pages, PAGE, 0, b) > 0);
        for (size_t j = 0; j < b->n_records; j++)
                ASSERT(!selection_matches(&s->selection, NULL, &b->records[j]));

        free(golden);
        free(pages);
        batch_unref(b);
        decoder_free(d);
        stream_free(s);
        tep_free(tep);
}

/* A stream that asked for "print" gets the line with the kernel-style text. */
static void test_print(void) {
        struct tep_handle *tep = load_tep("sched_switch");
        DecoderCallbacks cb = {};
        Stream *s = stream_make(STREAM_RAW, 1, 1 << 20), *plain = stream_make(STREAM_RAW, 1, 1 << 20);
        JsonBuf out = {}, out_plain = {};
        size_t n_pages;
        uint8_t *pages = load_pages("sched_switch", "cpu0.pages", &n_pages);
        Batch *b = batch_new();
        Decoder *d;

        s->selection.print = true;
        ASSERT_INT_EQ(decoder_new(tep, &cb, &d), 0);
        ASSERT_INT_EQ(decoder_decode_page(d, pages + 2 * PAGE, PAGE, 0, b), 6);
        for (size_t i = 0; i < b->n_records; i++) {
                ASSERT_INT_EQ(stream_offer(s, d, b, i), 1);
                ASSERT_INT_EQ(stream_offer(plain, d, b, i), 1);
        }
        flush_queue(&s->queue, &out);
        flush_queue(&plain->queue, &out_plain);
        ASSERT_INT_EQ(count_substr(out.data, ",\"print\":\"prev_comm="), 6);
        ASSERT_INT_EQ(count_substr(out.data, "\n"), 6);
        ASSERT_INT_EQ(count_substr(out_plain.data, "\"print\""), 0);
        ASSERT_MEM_EQ(out_plain.data, out_plain.len, b->buf.data + b->records[0].offset,
                      (size_t) (b->records[5].offset + b->records[5].length - b->records[0].offset));

        jsonbuf_done(&out);
        jsonbuf_done(&out_plain);
        batch_unref(b);
        decoder_free(d);
        stream_free(s);
        stream_free(plain);
        free(pages);
        tep_free(tep);
}

/* Ten-byte lines, so that the limit arithmetic is plain. */
static size_t add_line(Batch *b, unsigned cpu, uint64_t ts) {
        char text[16];
        snprintf(text, sizeof(text), "{\"n\":%03u}\n", (unsigned) ts);
        ASSERT_INT_EQ(strlen(text), 10);
        return add_event(b, cpu, 1, 1, ts, text);
}

static void test_queue_limit(void) {
        Stream *s = stream_make(STREAM_RAW, 2, 100);
        Batch *b = batch_new();
        JsonBuf out = {};
        uint64_t ts = 1;

        /* Ten lines fill the 100 bytes exactly; the next five are dropped and counted. */
        for (int i = 0; i < 15; i++, ts++)
                ASSERT_INT_EQ(stream_offer(s, NULL, b, add_line(b, 0, ts)), i < 10);
        ASSERT_U64_EQ(s->delivered, 10);
        ASSERT_U64_EQ(s->lost_client, 5);
        ASSERT_U64_EQ(s->dropped[0], 5);
        ASSERT(s->drops_pending);
        ASSERT_INT_EQ(s->queue.bytes, 100);

        /* Once a drop is pending nothing passes it, even on another CPU: the client must learn
         * of the gap before it sees what came after. */
        for (int i = 0; i < 2; i++, ts++)
                ASSERT_INT_EQ(stream_offer(s, NULL, b, add_line(b, 1, ts)), 0);
        ASSERT_U64_EQ(s->dropped[1], 2);
        ASSERT_U64_EQ(s->lost_client, 7);

        /* No room yet: nothing is reported. */
        ASSERT_INT_EQ(stream_report_drops(s), 0);
        ASSERT_INT_EQ(s->queue.bytes, 100);
        ASSERT(s->drops_pending);

        flush_queue(&s->queue, &out);
        ASSERT_OUT(&out, "{\"n\":001}\n{\"n\":002}\n{\"n\":003}\n{\"n\":004}\n{\"n\":005}\n"
                         "{\"n\":006}\n{\"n\":007}\n{\"n\":008}\n{\"n\":009}\n{\"n\":010}\n");
        out.len = 0;

        /* Room again: one lost record per CPU, with the exact count and the last dropped ts. */
        ASSERT_INT_EQ(stream_report_drops(s), 0);
        ASSERT(!s->drops_pending);
        ASSERT_U64_EQ(s->dropped[0], 0);
        ASSERT_U64_EQ(s->dropped[1], 0);
        ASSERT_U64_EQ(s->delivered, 10); /* lost records are not deliveries */
        ASSERT_U64_EQ(s->lost_client, 7);
        ASSERT_INT_EQ(s->queue.bytes, 2 * 44);
        /* Reported once only. */
        ASSERT_INT_EQ(stream_report_drops(s), 0);
        ASSERT_INT_EQ(s->queue.bytes, 2 * 44);

        ASSERT_INT_EQ(stream_offer(s, NULL, b, add_line(b, 0, ts)), 1);
        ts++;
        flush_queue(&s->queue, &out);
        ASSERT_OUT(&out, "{\"ts\":15,\"cpu\":0,\"lost\":5,\"cause\":\"client\"}\n"
                         "{\"ts\":17,\"cpu\":1,\"lost\":2,\"cause\":\"client\"}\n"
                         "{\"n\":018}\n");
        /* Every record offered is either delivered or counted as lost: 18 = 11 + 7. */
        ASSERT_U64_EQ(s->delivered + s->lost_client, ts - 1);
        out.len = 0;

        /* Drops again, reported once there is room. A lost
         * record of the kernel that cannot be queued keeps its own cause: the kernel overwrote
         * those records, the client is not to blame for them. */
        for (int i = 0; i < 10; i++, ts++)
                ASSERT_INT_EQ(stream_offer(s, NULL, b, add_line(b, 1, ts)), 1);
        ASSERT_INT_EQ(batch_add_lost(b, ts, 1, 1000, TPD_LOST_OVERRUN), 0);
        ASSERT_INT_EQ(stream_offer(s, NULL, b, b->n_records - 1), 0);
        ASSERT_INT_EQ(stream_offer(s, NULL, b, add_line(b, 1, 30)), 0);
        ASSERT_U64_EQ(s->dropped[1], 1);
        ASSERT_U64_EQ(s->carried[1 * _RECORD_KIND_MAX + TPD_LOST_OVERRUN], 1000);
        ASSERT_U64_EQ(s->lost_client, 8);
        flush_queue(&s->queue, &out);
        out.len = 0;
        ASSERT_INT_EQ(stream_report_drops(s), 0);
        ASSERT(!s->drops_pending);
        flush_queue(&s->queue, &out);
        ASSERT_INT_EQ(stream_offer(s, NULL, b, add_line(b, 0, 31)), 1);
        flush_queue(&s->queue, &out);
        ASSERT_OUT(&out, "{\"ts\":29,\"cpu\":1,\"lost\":1000,\"cause\":\"overrun\"}\n"
                         "{\"ts\":30,\"cpu\":1,\"lost\":1,\"cause\":\"client\"}\n{\"n\":031}\n");

        jsonbuf_done(&out);
        stream_free(s);
        batch_unref(b);
}

/* Lost records go out once the queue is down to half of its limit, not before. */
static void test_queue_threshold(void) {
        for (int lines = 5; lines <= 6; lines++) {
                Stream *s = stream_make(STREAM_RAW, 1, 100);
                Batch *b = batch_new();
                JsonBuf out = {};
                size_t big;

                for (int i = 0; i < lines; i++)
                        ASSERT_INT_EQ(stream_offer(s, NULL, b, add_line(b, 0, (uint64_t) i)), 1);
                /* A 77-byte line does not fit beside 50 or 60 bytes. */
                ASSERT_INT_EQ(
                        batch_add_lost(b, 1000000000000000000ULL, 0, 1000000000000000ULL, TPD_LOST_OVERRUN),
                        0);
                big = b->n_records - 1;
                ASSERT_INT_EQ(b->records[big].length, 77);
                ASSERT_INT_EQ(stream_offer(s, NULL, b, big), 0);
                ASSERT(s->drops_pending);

                ASSERT_INT_EQ(stream_report_drops(s), 0);
                if (lines == 5) {
                        /* 50 bytes is half of 100: reported at once, after what was queued. */
                        ASSERT(!s->drops_pending);
                        flush_queue(&s->queue, &out);
                        ASSERT_OUT(&out, "{\"n\":000}\n{\"n\":001}\n{\"n\":002}\n{\"n\":003}\n{\"n\":004}\n"
                                         "{\"ts\":1000000000000000000,\"cpu\":0,\"lost\":1000000000000000,"
                                         "\"cause\":\"overrun\"}\n");
                } else {
                        ASSERT(s->drops_pending);
                        ASSERT_INT_EQ(s->queue.bytes, 60);
                }
                jsonbuf_done(&out);
                stream_free(s);
                batch_unref(b);
        }
}

static void test_more_mode(void) {
        Stream *s = stream_make(STREAM_MORE, 1, 200);
        Batch *b = batch_new();
        JsonBuf out = {};
        static const char want[] = "{\"continues\":true,\"parameters\":{\"record\":{\"n\":001}}}\0"
                                   "{\"continues\":true,\"parameters\":{\"record\":{\"n\":002}}}\0";

        ASSERT_INT_EQ(stream_offer(s, NULL, b, add_line(b, 0, 1)), 1);
        ASSERT_INT_EQ(stream_offer(s, NULL, b, add_line(b, 0, 2)), 1);
        flush_queue(&s->queue, &out);
        ASSERT_MEM_EQ(out.data, out.len, want, sizeof(want) - 1);
        out.len = 0;

        /* Lost records are replies too, with the exact count. */
        for (uint64_t ts = 3; ts < 30; ts++)
                (void) stream_offer(s, NULL, b, add_line(b, 0, ts));
        ASSERT(s->lost_client > 0);
        ASSERT_U64_EQ(s->delivered + s->lost_client, 29);
        flush_queue(&s->queue, &out);
        out.len = 0;
        ASSERT_INT_EQ(stream_report_drops(s), 0);
        flush_queue(&s->queue, &out);
        {
                char lost[128];
                int n = snprintf(lost, sizeof(lost),
                                 "{\"continues\":true,\"parameters\":{\"record\":"
                                 "{\"ts\":29,\"cpu\":0,\"lost\":%" PRIu64 ",\"cause\":\"client\"}}}",
                                 s->lost_client);
                ASSERT_MEM_EQ(out.data, out.len, lost, (size_t) n + 1);
        }

        jsonbuf_done(&out);
        stream_free(s);
        batch_unref(b);
}

static void test_queue_coalescing(void) {
        Queue q = {};
        Batch *a = batch_new(), *c = batch_new();
        JsonBuf out = {};
        size_t r[6];

        for (int i = 0; i < 6; i++)
                r[i] = add_line(a, 0, (uint64_t) i);
        add_line(c, 0, 99);

        /* Slices that continue each other merge; a gap, another batch or static text does not. */
        ASSERT_INT_EQ(queue_push_batch(&q, a, a->records[r[0]].offset, a->records[r[0]].length), 0);
        ASSERT_INT_EQ(queue_push_batch(&q, a, a->records[r[1]].offset, a->records[r[1]].length), 0);
        ASSERT_INT_EQ(queue_push_batch(&q, a, a->records[r[2]].offset, a->records[r[2]].length), 0);
        ASSERT_INT_EQ(q.n, 1);
        ASSERT_INT_EQ(q.entries[0].length, 30);
        ASSERT_INT_EQ(a->refs, 2); /* one reference per entry, not per slice */
        ASSERT_INT_EQ(queue_push_batch(&q, a, a->records[r[4]].offset, a->records[r[4]].length), 0);
        ASSERT_INT_EQ(q.n, 2);
        ASSERT_INT_EQ(queue_push_batch(&q, a, a->records[r[5]].offset, a->records[r[5]].length), 0);
        ASSERT_INT_EQ(q.n, 2);
        ASSERT_INT_EQ(queue_push_batch(&q, c, c->records[0].offset, c->records[0].length), 0);
        ASSERT_INT_EQ(q.n, 3);
        ASSERT_INT_EQ(queue_push_static(&q, "<static>", 8), 0);
        ASSERT_INT_EQ(queue_push_batch(&q, c, c->records[0].offset + 10, 0), 0);
        ASSERT_INT_EQ(q.n, 5);
        ASSERT_INT_EQ(a->refs, 3);
        ASSERT_INT_EQ(c->refs, 3);
        ASSERT_INT_EQ(q.bytes, 68);

        {
                char copy[] = "copied\n";
                ASSERT_INT_EQ(queue_push_copy(&q, copy, 7), 0);
                copy[0] = 'X'; /* the queue holds its own bytes */
        }
        flush_queue(&q, &out);
        ASSERT_OUT(&out, "{\"n\":000}\n{\"n\":001}\n{\"n\":002}\n{\"n\":004}\n{\"n\":005}\n{\"n\":099}\n"
                         "<static>copied\n");
        ASSERT_INT_EQ(a->refs, 1);
        ASSERT_INT_EQ(c->refs, 1);
        queue_done(&q);

        /* queue_done() releases what was never written. */
        ASSERT_INT_EQ(queue_push_batch(&q, a, 0, 10), 0);
        ASSERT_INT_EQ(queue_push_batch(&q, c, 0, 10), 0);
        ASSERT_INT_EQ(a->refs, 2);
        queue_done(&q);
        ASSERT_INT_EQ(a->refs, 1);
        ASSERT_INT_EQ(c->refs, 1);
        ASSERT(q.entries == NULL && q.n == 0 && q.bytes == 0);

        jsonbuf_done(&out);
        batch_unref(a);
        batch_unref(c);
}

/* Partial writes, more entries than one writev takes, and a ring that wraps and then grows. */
static void test_queue_partial_writes(void) {
        Pair p = pair_new(4096);
        Queue q = {};
        JsonBuf want = {}, got = {};
        char text[32];
        int r, blocked = 0;

        ASSERT_INT_EQ(jsonbuf_reserve(&want, 1 << 20), 0);
        /* 5000 static entries of 16 bytes: many writev() calls of at most 256 entries, most
         * ending inside an entry since the socket takes only so much. */
        for (int i = 0; i < 5000; i++) {
                static char texts[5000][17];
                snprintf(texts[i], sizeof(texts[i]), "entry %09d\n", i);
                ASSERT_INT_EQ(queue_push_static(&q, texts[i], 16), 0);
                jsonbuf_put(&want, texts[i], 16);
        }
        ASSERT_INT_EQ(q.bytes, 80000);
        while ((r = queue_write(&q, p.w)) == 1) {
                blocked++;
                ASSERT(q.bytes > 0);
                drain(p.r, &got);
                /* Keep pushing while the head is half written: the ring wraps and grows. */
                if (blocked < 20) {
                        snprintf(text, sizeof(text), "late %02d\n", blocked);
                        ASSERT_INT_EQ(queue_push_copy(&q, text, 8), 0);
                        jsonbuf_put(&want, text, 8);
                }
        }
        ASSERT_INT_EQ(r, 0);
        drain(p.r, &got);
        ASSERT(blocked > 2);
        ASSERT_MEM_EQ(got.data, got.len, want.data, want.len);
        ASSERT(queue_is_empty(&q));
        queue_done(&q);

        /* A peer that went away is an error, not a signal. */
        {
                struct sigaction sa = { .sa_handler = SIG_IGN }, old;
                ASSERT(sigaction(SIGPIPE, &sa, &old) == 0);
                close(p.r);
                p.r = -1;
                ASSERT_INT_EQ(queue_push_static(&q, "x", 1), 0);
                ASSERT_INT_EQ(queue_write(&q, p.w), -EPIPE);
                ASSERT(sigaction(SIGPIPE, &old, NULL) == 0);
                queue_done(&q);
        }

        jsonbuf_done(&want);
        jsonbuf_done(&got);
        pair_close(&p);
}

/* Filter text comes from clients: a malformed one must be refused, never crash the daemon.
 * selection_set_filter() parses it with tpd's own grammar (filter.c) and hands libtraceevent only the
 * canonical text of what passes. Each filter is tried in a child, so that a crash names its input
 * and the others are still tried. */
static void test_filter_malformed(void) {
        static const char *const filters[] = {
                "next_pid ==",
                "next_pid == 1 &&",
                "prev_comm ~",
                "==",
                "(",
                "next_pid == (",
                "next_pid",
                /* Unterminated strings pass libtracefs's check. */
                "prev_comm == \"a",
                "prev_comm != \"",
                "prev_comm ~ \"a*",
                "prev_comm == 'a",
                "prev_comm == \"a\\\"",
                "next_pid == \"1",
                "next_pid == 1 && prev_comm == \"x",
        };
        unsigned failures = 0;

        for (size_t i = 0; i < sizeof(filters) / sizeof(filters[0]); i++) {
                int status;
                pid_t pid;

                fflush(stderr);
                pid = fork();
                ASSERT(pid >= 0);
                if (pid == 0) {
                        struct tep_handle *tep = load_tep("sched_switch");
                        Stream *s = stream_make(STREAM_RAW, 1, 1024);
                        int r;

                        r = set_filter(s, tep, filters[i], "sched:sched_switch", NULL);
                        stream_free(s);
                        tep_free(tep);
                        _exit(r == -EINVAL ? 0 : 1);
                }
                ASSERT(waitpid(pid, &status, 0) == pid);
                if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
                        continue;
                fprintf(stderr, "filter '%s' %s\n", filters[i],
                        WIFEXITED(status) ? "was accepted" : strsignal(WTERMSIG(status)));
                failures++;
        }
        if (failures > 0)
                TEST_FAIL("%u malformed filters were not refused cleanly", failures);
}

/* A stream that selects every record of a batch takes it as one slice; others take record by
 * record, and both see the same bytes. */
static void test_offer_batch(void) {
        Batch *b = batch_new();
        Stream *all = stream_make(STREAM_RAW, 2, 1 << 20);
        Stream *both = stream_make(STREAM_RAW, 2, 1 << 20);
        Stream *one = stream_make(STREAM_RAW, 2, 1 << 20);
        Stream *other_cpu = stream_make(STREAM_RAW, 2, 1 << 20);
        Stream *small = stream_make(STREAM_RAW, 2, 20);
        static const char lines[] = "{\"e\":0}\n{\"e\":1}\n{\"e\":2}\n";

        ASSERT(b);
        add_event(b, 1, 372, 10, 1, "{\"e\":0}\n");
        batch_note_event(b, 372);
        add_event(b, 1, 305, 10, 2, "{\"e\":1}\n");
        batch_note_event(b, 305);
        add_event(b, 1, 372, 10, 3, "{\"e\":2}\n");
        batch_note_event(b, 372);
        ASSERT_INT_EQ(b->n_ids, 2);
        b->plain_end = b->buf.len;

        ASSERT_INT_EQ(selection_select_event(&both->selection, 372), 0);
        ASSERT_INT_EQ(selection_select_event(&both->selection, 305), 0);
        ASSERT_INT_EQ(selection_select_event(&one->selection, 305), 0);
        ASSERT_INT_EQ(selection_select_cpu(&other_cpu->selection, 0), 0);

        ASSERT_INT_EQ(stream_offer_batch(all, NULL, b), 3);
        ASSERT_INT_EQ(all->queue.n, 1);
        ASSERT_MEM_EQ(b->buf.data + all->queue.entries[0].offset, all->queue.entries[0].length, lines,
                      sizeof(lines) - 1);
        ASSERT_INT_EQ(stream_offer_batch(both, NULL, b), 3);
        ASSERT_INT_EQ(both->queue.n, 1);
        ASSERT_U64_EQ(both->delivered, 3);
        ASSERT_INT_EQ(stream_offer_batch(one, NULL, b), 1);
        ASSERT_INT_EQ(one->queue.bytes, 8);
        ASSERT_INT_EQ(stream_offer_batch(other_cpu, NULL, b), 0);
        ASSERT_INT_EQ(other_cpu->queue.bytes, 0);
        /* No room for the whole batch: record by record, the rest counted as lost. */
        ASSERT_INT_EQ(stream_offer_batch(small, NULL, b), 2);
        ASSERT_U64_EQ(small->lost_client, 1);

        stream_free(all);
        stream_free(both);
        stream_free(one);
        stream_free(other_cpu);
        stream_free(small);
        batch_unref(b);
}

int main(int argc, char **argv) {
        if (argc != 2) {
                fprintf(stderr, "usage: test-stream DATADIR\n");
                return EXIT_FAILURE;
        }
        datadir = argv[1];

        test_selection();
        test_offer_batch();
        test_overrun_fanout();
        test_filter();
        test_print();
        test_queue_limit();
        test_queue_threshold();
        test_more_mode();
        test_queue_coalescing();
        test_queue_partial_writes();
        test_filter_malformed();
        return EXIT_SUCCESS;
}
