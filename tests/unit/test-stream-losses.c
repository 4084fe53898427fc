/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Losses and drops of streams: an overrun loss reaching every stream that watches the CPU, the
 * bounded queue that drops, counts and reports exactly once there is room, and the lost records
 * of Varlink "more" framing.
 *
 *   test-stream-losses DATADIR
 */

#include "core/decode.h"
#include "stream-helpers.h"

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
        ASSERT_INT_EQ(stream_report_drops(s, false), 0);
        ASSERT_INT_EQ(s->queue.bytes, 100);
        ASSERT(s->drops_pending);

        flush_queue(&s->queue, &out);
        ASSERT_OUT(&out, "{\"n\":001}\n{\"n\":002}\n{\"n\":003}\n{\"n\":004}\n{\"n\":005}\n"
                         "{\"n\":006}\n{\"n\":007}\n{\"n\":008}\n{\"n\":009}\n{\"n\":010}\n");
        out.len = 0;

        /* Room again: one lost record per CPU, with the exact count and the last dropped ts. */
        ASSERT_INT_EQ(stream_report_drops(s, false), 0);
        ASSERT(!s->drops_pending);
        ASSERT_U64_EQ(s->dropped[0], 0);
        ASSERT_U64_EQ(s->dropped[1], 0);
        ASSERT_U64_EQ(s->delivered, 10); /* lost records are not deliveries */
        ASSERT_U64_EQ(s->lost_client, 7);
        ASSERT_INT_EQ(s->queue.bytes, 2 * 44);
        /* Reported once only. */
        ASSERT_INT_EQ(stream_report_drops(s, false), 0);
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
        ASSERT_INT_EQ(stream_report_drops(s, false), 0);
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

                ASSERT_INT_EQ(stream_report_drops(s, false), 0);
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
        ASSERT_INT_EQ(stream_report_drops(s, false), 0);
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

/* A line that must follow every loss (the answer to a sync) finds the queue full: the pending lost
 * records go before it all the same, past the bound, rather than after it or never. */
static void test_report_before_sync(void) {
        Stream *s = stream_make(STREAM_RAW, 1, 100);
        Batch *b = batch_new();
        JsonBuf out = {};

        for (uint64_t ts = 1; ts <= 12; ts++)
                (void) stream_offer(s, NULL, b, add_line(b, 0, ts));
        ASSERT_U64_EQ(s->lost_client, 2);
        ASSERT_INT_EQ(stream_report_drops(s, false), 0);
        ASSERT(s->drops_pending);
        ASSERT_INT_EQ(stream_report_drops(s, true), 0);
        ASSERT(!s->drops_pending);
        ASSERT_INT_EQ(stream_queue_notice(s, 13, "sync", "m"), 0);
        flush_queue(&s->queue, &out);
        ASSERT_OUT(&out, "{\"n\":001}\n{\"n\":002}\n{\"n\":003}\n{\"n\":004}\n{\"n\":005}\n"
                         "{\"n\":006}\n{\"n\":007}\n{\"n\":008}\n{\"n\":009}\n{\"n\":010}\n"
                         "{\"ts\":12,\"cpu\":0,\"lost\":2,\"cause\":\"client\"}\n"
                         "{\"ts\":13,\"notice\":\"sync\",\"message\":\"m\"}\n");
        jsonbuf_done(&out);
        stream_free(s);
        batch_unref(b);
}

int main(int argc, char **argv) {
        if (argc != 2) {
                fprintf(stderr, "usage: test-stream-losses DATADIR\n");
                return EXIT_FAILURE;
        }
        test_datadir = argv[1];

        test_overrun_fanout();
        test_queue_limit();
        test_queue_threshold();
        test_more_mode();
        test_report_before_sync();
        return EXIT_SUCCESS;
}
