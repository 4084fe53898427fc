/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Record by record, as `tpctl replay` decodes a trace-cmd data file, against page by page, as tpd
 * decodes live: the recorded pages of tests/data walked with libtraceevent's kbuffer (what
 * libtracecmd reads files with), each record given to decoder_decode_record() and each page's loss
 * to decoder_decode_missed(), must make byte for byte what decoder_decode_page() makes of the same
 * pages: the records, the "overrun" losses, and, with the formats left out, the "unknown" runs.
 *
 *   test-decode-record DATADIR
 */

#include <traceevent/kbuffer.h>

#include "decode-helpers.h"

static const char *const dataset_names[] = {
        "sched_switch", "getppid", "print", "exec", "signed", "arrays", "overrun",
};

/* Appends b's lines to out and empties b. */
static void take_records(JsonBuf *out, Batch *b) {
        append_records(out, b, 0);
        batch_reset(b);
}

/* One page, the way tpctl replay goes through libtracecmd's records: the loss with the first
 * record, then each record; the page's run of unknown records ends with the page. Returns the
 * number of records kbuffer found. */
static size_t decode_by_records(Decoder *d, struct kbuffer *kbuf, uint8_t *page, unsigned cpu, Batch *b) {
        DecoderUnknownRun unknown = {};
        unsigned long long ts;
        size_t n = 0;
        void *data;

        ASSERT_INT_EQ(kbuffer_load_subbuffer(kbuf, page), 0);
        for (data = kbuffer_read_event(kbuf, &ts); data; data = kbuffer_next_event(kbuf, NULL)) {
                int missed = kbuffer_missed_events(kbuf);
                int r;

                (void) kbuffer_read_event(kbuf, &ts);
                if (missed != 0) {
                        uint64_t stored = (uint64_t) missed;
                        ASSERT(decoder_decode_missed(d, kbuffer_subbuf_timestamp(kbuf, page), cpu,
                                                     missed > 0 ? &stored : NULL, b) >= 0);
                }
                r = decoder_decode_record(d, ts, cpu, data, (size_t) kbuffer_event_size(kbuf), &unknown, b);
                ASSERT(r == 0 || r == 1);
                n++;
        }
        ASSERT_INT_EQ(decoder_flush_unknown(&unknown, b, cpu), 0);
        return n;
}

static void test_dataset(const char *datadir, const char *name, bool formats) {
        struct kbuffer *kbuf = kbuffer_alloc(KBUFFER_LSIZE_8, KBUFFER_ENDIAN_LITTLE);
        JsonBuf by_page = {}, by_record = {};
        Decoder *d = NULL;
        Batch *b = batch_new();
        size_t records = 0;
        Dataset ds;

        ASSERT(kbuf && b);
        dataset_load(&ds, datadir, name);
        if (!formats) {
                tep_free(ds.tep);
                ds.tep = tep_from_dir(ds.dir, false);
        }
        d = dataset_decoder(&ds, true);
        for (unsigned cpu = 0; cpu < MAX_CPUS; cpu++)
                for (size_t i = 0; i < ds.n_pages[cpu]; i++) {
                        uint8_t *page = ds.pages[cpu] + i * PAGE;

                        ASSERT(decoder_decode_page(d, page, PAGE, cpu, b) >= 0);
                        take_records(&by_page, b);
                        records += decode_by_records(d, kbuf, page, cpu, b);
                        take_records(&by_record, b);
                }

        ASSERT(records > 0);
        ASSERT(by_page.len > 0);
        ASSERT_MEM_EQ(by_record.data, by_record.len, by_page.data, by_page.len);
        printf("%s%s: %zu records, %zu bytes of NDJSON, the same by records as by pages\n", name,
               formats ? "" : " (no formats)", records, by_page.len);

        jsonbuf_done(&by_page);
        jsonbuf_done(&by_record);
        decoder_free(d);
        batch_unref(b);
        kbuffer_free(kbuf);
        dataset_done(&ds);
}

/* Formats read from a file are not the kernel's: a field beyond what a record can hold makes the
 * event one without a plan (its records unknown), and a common_pid past the record's end makes the
 * record one shorter than its format, never a read past it. */
static void test_hostile_formats(void) {
        static const char far[] =
                "name: far\nID: 7\nformat:\n"
                "\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n"
                "\tfield:int common_pid;\toffset:70000;\tsize:4;\tsigned:1;\n\n"
                "\tfield:int x;\toffset:8;\tsize:4;\tsigned:1;\n\nprint fmt: \"%d\", REC->x\n";
        static const char past[] =
                "name: past\nID: 8\nformat:\n"
                "\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n"
                "\tfield:int common_pid;\toffset:4000;\tsize:4;\tsigned:1;\n\n"
                "\tfield:int x;\toffset:8;\tsize:4;\tsigned:1;\n\nprint fmt: \"%d\", REC->x\n";
        static const char type[] =
                "name: type\nID: 9\nformat:\n"
                "\tfield:unsigned short common_type;\toffset:2;\tsize:2;\tsigned:0;\n"
                "\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\n"
                "\tfield:int x;\toffset:8;\tsize:4;\tsigned:1;\n\nprint fmt: \"%d\", REC->x\n";
        struct tep_handle *tep = tep_alloc();
        DecoderUnknownRun unknown = {};
        const char *field;
        uint8_t rec[12] = { 0 };
        Batch *b = batch_new();
        Decoder *d;

        ASSERT(tep && b);
        tep_set_loglevel(TEP_LOG_NONE);
        ASSERT_INT_EQ(tep_parse_event(tep, far, sizeof(far) - 1, "hostile"), TEP_ERRNO__SUCCESS);
        ASSERT_INT_EQ(tep_parse_event(tep, past, sizeof(past) - 1, "hostile"), TEP_ERRNO__SUCCESS);
        ASSERT_INT_EQ(tep_parse_event(tep, type, sizeof(type) - 1, "hostile"), TEP_ERRNO__SUCCESS);
        ASSERT_INT_EQ(decoder_check_event(tep_find_event(tep, 7), &field), -EBADMSG);
        ASSERT_STR_EQ(field, "common_pid");
        ASSERT_INT_EQ(decoder_check_event(tep_find_event(tep, 8), &field), 0);
        ASSERT_INT_EQ(decoder_check_event(tep_find_event(tep, 9), &field), -EBADMSG);
        ASSERT_STR_EQ(field, "common_type");
        ASSERT_INT_EQ(decoder_new(tep, NULL, &d), 0);

        /* A record of 12 bytes (the ASan build sees a read past it). */
        rec[0] = 7;
        ASSERT_INT_EQ(decoder_decode_record(d, 1, 0, rec, sizeof(rec), &unknown, b), 0);
        ASSERT_U64_EQ(unknown.count, 1);
        ASSERT(decoder_event_name(d, 7) == NULL);
        rec[0] = 8;
        ASSERT_INT_EQ(decoder_decode_record(d, 2, 0, rec, sizeof(rec), &unknown, b), -EBADMSG);
        ASSERT_STR_EQ(decoder_event_name(d, 8), "hostile:past");
        ASSERT_INT_EQ(decoder_flush_unknown(&unknown, b, 0), 0);
        ASSERT_U64_EQ(b->n_records, 1);
        ASSERT_INT_EQ(b->records[0].kind, TPD_LOST_UNKNOWN);

        decoder_free(d);
        batch_unref(b);
        tep_free(tep);
}

int main(int argc, char **argv) {
        test_hostile_formats();
        if (argc != 2) {
                fprintf(stderr, "usage: test-decode-record DATADIR\n");
                return EXIT_FAILURE;
        }
        for (size_t i = 0; i < sizeof(dataset_names) / sizeof(dataset_names[0]); i++) {
                test_dataset(argv[1], dataset_names[i], true);
                test_dataset(argv[1], dataset_names[i], false);
        }
        return EXIT_SUCCESS;
}
