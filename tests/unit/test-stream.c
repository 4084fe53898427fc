/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Streams and their output queues: selection by event, pid, CPU and filter on real decoded pages,
 * "print" lines, filters refused with their reason, and the queue's writev path (coalescing,
 * partial writes, ring wrap-around) over a real socketpair(). Losses and drops are
 * test-stream-losses'.
 *
 *   test-stream DATADIR
 */

#include <limits.h>
#include <signal.h>
#include <sys/wait.h>

#include "core/decode.h"
#include "stream-helpers.h"

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
        snprintf(path, sizeof(path), "%s/sched_switch/expected.ndjson", test_datadir);
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
        test_datadir = argv[1];

        test_selection();
        test_offer_batch();
        test_filter();
        test_print();
        test_queue_coalescing();
        test_queue_partial_writes();
        test_filter_malformed();
        return EXIT_SUCCESS;
}
