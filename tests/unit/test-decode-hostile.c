/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The page decoder on crafted pages: the synthetic formats of tests/data/synthetic with a field of
 * every kind the plan compiler knows, then pages that once broke the decoder, each in a child.
 *
 *   test-decode-hostile DATADIR
 */

#include <sys/wait.h>

#include "decode-helpers.h"

/* --- Synthetic formats (tests/data/synthetic): one field of every kind the plan compiler knows --- */

static const char *synthetic_datadir;

static struct tep_handle *synthetic_tep(void) {
        char dir[PATH_MAX];

        snprintf(dir, sizeof(dir), "%s/synthetic", synthetic_datadir);
        return tep_from_dir(dir, true);
}

typedef struct PageBuilder {
        uint8_t page[PAGE];
        size_t len; /* of the data after the 16-byte header */
} PageBuilder;

static void pb_init(PageBuilder *pb, uint64_t ts) {
        memset(pb->page, 0, sizeof(pb->page));
        memcpy(pb->page, &ts, 8);
        pb->len = 0;
}

static void pb_put32(PageBuilder *pb, uint32_t v) {
        ASSERT(16 + pb->len + 4 <= PAGE);
        memcpy(pb->page + 16 + pb->len, &v, 4);
        pb->len += 4;
}

/* Appends a data record the way the kernel lays one out: small ones carry their length in the
 * header's type_len (in 4-byte words), others in the word after it. */
static void pb_add(PageBuilder *pb, uint32_t delta, const void *payload, size_t n) {
        size_t padded = (n + 3) & ~(size_t) 3;

        if (padded <= 28 * 4 && padded > 0)
                pb_put32(pb, (uint32_t) (padded / 4) | delta << 5);
        else {
                pb_put32(pb, delta << 5);
                pb_put32(pb, (uint32_t) padded + 4);
        }
        ASSERT(16 + pb->len + padded <= PAGE);
        memcpy(pb->page + 16 + pb->len, payload, n);
        pb->len += padded;
}

static void pb_add_extend(PageBuilder *pb, uint64_t delta) {
        pb_put32(pb, TYPE_TIME_EXTEND | (uint32_t) (delta & ((1U << 27) - 1)) << 5);
        pb_put32(pb, (uint32_t) (delta >> 27));
}

static void pb_finish(PageBuilder *pb, uint64_t flags) {
        page_set_commit(pb->page, pb->len | flags);
}

static const char *fixed_comm(void *userdata, int pid, uint64_t ts) {
        /* Longer than the kernel's 16 bytes and not UTF-8: the decoder cuts at 16 and escapes. */
        return pid == 4242 ? "q\"uo\\te\xff"
                             "7890abcdefXYZ"
                           : NULL;
}

/* One record of every kind, tail arrays and strings, a time extend: the exact lines. */
static void synthetic_every_kind(Decoder *d, Batch *b) {
        uint8_t rec[120] = {};
        PageBuilder pb;
        JsonBuf out = {};
        uint8_t *page;
        int r;

        /* kinds: 96 bytes of fields, then the dynamic data. */
        put16(rec + 0, 900);
        put32(rec + 4, 4242);
        rec[8] = 0xff;
        rec[9] = 0x80;
        put16(rec + 10, 0x8000);
        put16(rec + 12, 0xffff);
        rec[14] = 1, rec[15] = 2, rec[16] = 0xfe;
        put32(rec + 20, 0x80000000U);
        put32(rec + 24, 0xffffffffU);
        put64(rec + 28, 0x8000000000000000ULL);
        put64(rec + 36, UINT64_MAX);
        put64(rec + 44, 0xffffffff81000000ULL);
        memcpy(rec + 52, "abcdefgh", 8); /* no NUL: all 8 bytes */
        put32(rec + 60, (uint32_t) -1), put32(rec + 64, 0), put32(rec + 68, 7);
        rec[72] = 1, rec[73] = 2, rec[74] = 3, rec[75] = 255;
        put32(rec + 76, 3U << 16 | 96);         /* "hi\0" at 96 */
        put32(rec + 80, 4U << 16 | (100 - 84)); /* relative to the end of the field: 100 */
        put32(rec + 84, 8U << 16 | 104);        /* two u32 at 104 */
        put64(rec + 88, 0);
        memcpy(rec + 96, "hi\0", 4);
        memcpy(rec + 100, "rel\0", 4);
        put32(rec + 104, 0xffffffffU), put32(rec + 108, 5);

        pb_init(&pb, 1000);
        pb_add(&pb, 0, rec, 112);
        /* tail: n, then three unsigned longs to the end of the record. */
        memset(rec, 0, sizeof(rec));
        put16(rec + 0, 901);
        put32(rec + 4, 1);
        put32(rec + 8, (uint32_t) -3);
        put64(rec + 16, 1), put64(rec + 24, 2), put64(rec + 32, UINT64_MAX);
        pb_add(&pb, 5, rec, 40);
        /* tailstr: the rest of the record is the string; it has no NUL. */
        memset(rec, 0, sizeof(rec));
        put16(rec + 0, 902);
        put32(rec + 4, -7);
        memcpy(rec + 8, "tail\tend", 8);
        pb_add(&pb, 1U << 26, rec, 16);
        /* A time extend of 2^27 + 3 ns before the last record: ts adds up across it. */
        pb_add_extend(&pb, (1ULL << 27) + 3);
        memset(rec, 0, sizeof(rec));
        put16(rec + 0, 901);
        put32(rec + 4, 2);
        put32(rec + 8, 0);
        pb_add(&pb, 0, rec, 16); /* no elements */
        pb_finish(&pb, 0);

        page = page_dup(pb.page, 16 + pb.len);
        r = decoder_decode_page(d, page, 16 + pb.len, 3, b);
        ASSERT_INT_EQ(r, 4);
        ASSERT_INT_EQ(jsonbuf_reserve(&out, 1), 0);
        append_records(&out, b, 0);
        static const char expected[] =
                "{\"ts\":1000,\"cpu\":3,\"event\":\"tpdtest:kinds\",\"pid\":4242,"
                "\"comm\":\"q\\\"uo\\\\te\xef\xbf\xbd"
                "7890abcd\",\"fields\":{"
                "\"u8v\":255,\"s8v\":-128,\"s16\":-32768,\"u16\":65535,\"odd\":[1,2,254],"
                "\"s32\":-2147483648,\"u32\":4294967295,\"s64\":-9223372036854775808,"
                "\"u64v\":18446744073709551615,\"ptr\":\"0xffffffff81000000\",\"name\":\"abcdefgh\","
                "\"arr\":[-1,0,7],\"bytes\":[1,2,3,255],\"str\":\"hi\",\"rstr\":\"rel\","
                "\"darr\":[4294967295,5],\"cptr\":\"0x0\"}}\n"
                "{\"ts\":1005,\"cpu\":3,\"event\":\"tpdtest:tail\",\"pid\":1,\"fields\":{\"n\":-3,"
                "\"vals\":[1,2,18446744073709551615]}}\n"
                "{\"ts\":67109869,\"cpu\":3,\"event\":\"tpdtest:tailstr\",\"pid\":-7,\"fields\":{"
                "\"msg\":\"tail\\tend\"}}\n"
                "{\"ts\":201327600,\"cpu\":3,\"event\":\"tpdtest:tail\",\"pid\":2,\"fields\":{\"n\":0,"
                "\"vals\":[]}}\n";
        ASSERT_MEM_EQ(out.data, out.len, expected, sizeof(expected) - 1);
        check_json_lines(out.data, out.len);
        ASSERT_INT_EQ(b->records[0].pid, 4242);
        ASSERT_INT_EQ(b->records[0].event_id, 900);
        ASSERT_INT_EQ(b->records[0].raw_size, 112);
        ASSERT_INT_EQ(b->records[2].pid, -7);
        page_free(page, 16 + pb.len);
        jsonbuf_done(&out);
}

/* Locations that point outside the record are cut to it, never followed. */
static void synthetic_locations_outside(Decoder *d, Batch *b) {
        uint8_t rec[120] = {};
        PageBuilder pb;
        uint8_t *page;

        put16(rec + 0, 900);
        put32(rec + 76, 200U << 16 | 104);       /* starts inside, runs far past the end */
        put32(rec + 80, 4U << 16 | 0xfff0);      /* starts past the end */
        put32(rec + 84, 0xffffU << 16 | 0xffff); /* both */
        memcpy(rec + 104, "12345678", 8);
        pb_init(&pb, 0);
        pb_add(&pb, 0, rec, 112);
        pb_finish(&pb, 0);
        page = page_dup(pb.page, 16 + pb.len);
        batch_reset(b);
        ASSERT_INT_EQ(decoder_decode_page(d, page, 16 + pb.len, 0, b), 1);
        static const char clamped[] = "\"str\":\"12345678\",\"rstr\":\"\",\"darr\":[],";
        ASSERT(memmem(b->buf.data, b->buf.len, clamped, sizeof(clamped) - 1));
        page_free(page, 16 + pb.len);
}

/* A record id that no format has (and id 0) is skipped; the page still parses. */
static void synthetic_unknown_ids(Decoder *d, Batch *b) {
        uint8_t rec[8] = {};
        PageBuilder pb;

        pb_init(&pb, 0);
        put16(rec, 999);
        pb_add(&pb, 0, rec, 8);
        put16(rec, 0);
        pb_add(&pb, 0, rec, 8);
        pb_finish(&pb, 0);
        batch_reset(b);
        ASSERT_INT_EQ(decoder_decode_page(d, pb.page, PAGE, 0, b), 2);
        ASSERT_INT_EQ(b->records[0].kind, TPD_LOST_UNKNOWN);
        ASSERT_INT_EQ(b->records[1].kind, TPD_LOST_UNKNOWN);
        ASSERT_U64_EQ(decoder_stats(d)->unknown, 2);
}

/* Padding of a discarded record (non-zero delta, as rb_event_discard() ensures) is skipped,
 * without moving the time stamp, as the kernel's reader does. */
static void synthetic_discarded_padding(Decoder *d, Batch *b) {
        static const char padded[] = "{\"ts\":9,\"cpu\":0,\"event\":\"tpdtest:tailstr\",\"pid\":0,"
                                     "\"fields\":{\"msg\":\"x\"}}\n";
        uint8_t rec[12] = {};
        PageBuilder pb;

        pb_init(&pb, 0);
        pb_put32(&pb, TYPE_PADDING | (1U << 5));
        pb_put32(&pb, 12); /* what follows the header: 12 bytes of the discarded record */
        pb_put32(&pb, 0);
        pb_put32(&pb, 0);
        put16(rec, 902);
        memcpy(rec + 8, "x", 2);
        pb_add(&pb, 9, rec, 12);
        pb_finish(&pb, 0);
        batch_reset(b);
        ASSERT_INT_EQ(decoder_decode_page(d, pb.page, PAGE, 0, b), 1);
        ASSERT_MEM_EQ(b->buf.data, b->buf.len, padded, sizeof(padded) - 1);
}

/* The steps share one decoder: its "unknown" counter adds up across them. */
static void test_synthetic(void) {
        struct tep_handle *tep = synthetic_tep();
        DecoderCallbacks cb = { .comm = fixed_comm };
        Batch *b = batch_new();
        Decoder *d;

        ASSERT_INT_EQ(decoder_new(tep, &cb, &d), 0);
        synthetic_every_kind(d, b);
        synthetic_locations_outside(d, b);
        synthetic_unknown_ids(d, b);
        synthetic_discarded_padding(d, b);

        batch_unref(b);
        decoder_free(d);
        tep_free(tep);
}

/* Corrupt and unusual pages that once broke the decoder (a hang, reads past the page, lost losses,
 * wrong element sizes); each runs in a child of its own, so that one failure or hang does not hide
 * the others. */
static void test_missed_after_time_extend(void) {
        struct tep_handle *tep = synthetic_tep();
        DecoderCallbacks cb = {};
        uint8_t rec[12] = {};
        uint64_t count = 5;
        PageBuilder pb;
        Batch *b = batch_new();
        Decoder *d;

        ASSERT_INT_EQ(decoder_new(tep, &cb, &d), 0);

        /* A page whose first entry is a time extend, flagged with 5 lost events before it. */
        pb_init(&pb, 100);
        pb_add_extend(&pb, 1ULL << 27);
        put16(rec, 902);
        pb_add(&pb, 0, rec, 12);
        memcpy(pb.page + 16 + pb.len, &count, 8);
        pb_finish(&pb, COMMIT_MISSED | COMMIT_STORED);
        ASSERT_INT_EQ(decoder_decode_page(d, pb.page, PAGE, 0, b), 2);
        ASSERT_INT_EQ(b->records[0].kind, TPD_LOST_OVERRUN);
        ASSERT_U64_EQ(b->records[0].lost, 5);

        batch_unref(b);
        decoder_free(d);
        tep_free(tep);
}

static void test_missed_count_above_int(const char *datadir) {
        Dataset ds;
        Decoder *d;
        uint64_t count = 1ULL << 32;

        dataset_load(&ds, datadir, "sched_switch");
        d = dataset_decoder(&ds, true);
        ds.overrun[0] = 0;
        check_missed(d, &ds, COMMIT_MISSED | COMMIT_STORED, &count, 1ULL << 32);
        decoder_free(d);
        dataset_done(&ds);
}

/* "u32 vals[]" at the end of a record: three u32 elements, not twelve bytes. */
static void test_tail_u32_array(void) {
        struct tep_handle *tep = synthetic_tep();
        DecoderCallbacks cb = {};
        uint8_t rec[20] = {};
        PageBuilder pb;
        Batch *b = batch_new();
        Decoder *d;
        static const char want[] = "\"fields\":{\"vals\":[1,2,4294967295]}}\n";

        ASSERT_INT_EQ(decoder_new(tep, &cb, &d), 0);
        pb_init(&pb, 0);
        put16(rec, 903);
        put32(rec + 8, 1), put32(rec + 12, 2), put32(rec + 16, 0xffffffffU);
        pb_add(&pb, 0, rec, 20);
        pb_finish(&pb, 0);
        ASSERT_INT_EQ(decoder_decode_page(d, pb.page, PAGE, 0, b), 1);
        ASSERT(b->buf.len >= sizeof(want) - 1);
        ASSERT_MEM_EQ(b->buf.data + b->buf.len - (sizeof(want) - 1), sizeof(want) - 1, want,
                      sizeof(want) - 1);

        batch_unref(b);
        decoder_free(d);
        tep_free(tep);
}

/* The "print" text of a record whose __data_loc string has no NUL before the record ends:
 * libtraceevent's __get_str() reads on past the record (and here past the page). */
static void test_print_unterminated_string(void) {
        struct tep_handle *tep = synthetic_tep();
        DecoderCallbacks cb = {};
        uint8_t rec[112] = {};
        PageBuilder pb;
        Batch *b = batch_new();
        uint8_t *page;
        Decoder *d;

        ASSERT_INT_EQ(decoder_new(tep, &cb, &d), 0);
        put16(rec, 900);
        put32(rec + 76, 16U << 16 | 96); /* "str": the last 16 bytes, no NUL among them */
        memset(rec + 96, 'x', 16);
        pb_init(&pb, 0);
        pb_add(&pb, 0, rec, sizeof(rec));
        pb_finish(&pb, 0);
        page = page_dup(pb.page, 16 + pb.len);
        ASSERT_INT_EQ(decoder_decode_page(d, page, 16 + pb.len, 0, b), 1);
        ASSERT(memmem(b->buf.data, b->buf.len, "\"str\":\"xxxxxxxxxxxxxxxx\"", 24));
        ASSERT_INT_EQ(decoder_encode_print(d, b, 0), 0);
        page_free(page, 16 + pb.len);

        batch_unref(b);
        decoder_free(d);
        tep_free(tep);
}

/* A padding entry whose length word is -4 points back at itself. */
static void test_padding_loop(void) {
        struct tep_handle *tep = synthetic_tep();
        DecoderCallbacks cb = {};
        PageBuilder pb;
        Batch *b = batch_new();
        Decoder *d;

        ASSERT_INT_EQ(decoder_new(tep, &cb, &d), 0);
        pb_init(&pb, 0);
        pb_put32(&pb, TYPE_PADDING | (1U << 5)); /* a discarded entry: its length counts */
        pb_put32(&pb, (uint32_t) -4);
        pb_finish(&pb, 0);
        alarm(5);
        ASSERT_INT_EQ(decoder_decode_page(d, pb.page, PAGE, 0, b), -EBADMSG);
        alarm(0);

        batch_unref(b);
        decoder_free(d);
        tep_free(tep);
}

/* The last entry header of a full page may be read past the page's end. */
static void test_header_past_end(void) {
        struct tep_handle *tep = synthetic_tep();
        DecoderCallbacks cb = {};
        PageBuilder pb;
        Batch *b = batch_new();
        uint8_t rec[8] = {};
        uint8_t *page;
        Decoder *d;

        ASSERT_INT_EQ(decoder_new(tep, &cb, &d), 0);
        pb_init(&pb, 0);
        put16(rec, 902);
        pb_add(&pb, 0, rec, 8);
        /* The commit ends 1 byte into the next entry header: kbuffer reads its 4 (or 8) bytes. */
        pb_finish(&pb, 0);
        page_set_commit(pb.page, pb.len + 1);
        page = page_dup(pb.page, 16 + pb.len + 1);
        /* The copy ends at an inaccessible page: a read past its 29 bytes faults. */
        (void) decoder_decode_page(d, page, 16 + pb.len + 1, 0, b);
        page_free(page, 16 + pb.len + 1);

        batch_unref(b);
        decoder_free(d);
        tep_free(tep);
}

static const char *hostile_datadir;

static void test_missed_count_above_int_here(void) {
        test_missed_count_above_int(hostile_datadir);
}

/* Each case in a child of its own, so that one failure (or hang) does not hide the others. */
static int run_hostile_pages(const char *datadir) {
        static const struct {
                const char *name;
                void (*fn)(void);
        } cases[] = {
                { "tail-u32-array", test_tail_u32_array },
                { "missed-count-above-int", test_missed_count_above_int_here },
                { "missed-after-time-extend", test_missed_after_time_extend },
                { "padding-loop", test_padding_loop },
                { "header-past-end", test_header_past_end },
                { "print-unterminated-string", test_print_unterminated_string },
        };
        int failed = 0;

        hostile_datadir = datadir;
        synthetic_datadir = datadir;
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                int status;
                pid_t pid;

                fflush(stdout);
                pid = fork();

                ASSERT(pid >= 0);
                if (pid == 0) {
                        cases[i].fn();
                        _exit(EXIT_SUCCESS);
                }
                ASSERT(waitpid(pid, &status, 0) == pid);
                if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
                        printf("%-28s passes\n", cases[i].name);
                else {
                        printf("%-28s FAILS (%s %d)\n", cases[i].name, WIFEXITED(status) ? "exit" : "signal",
                               WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
                        failed = 1;
                }
        }
        return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

int main(int argc, char **argv) {
        if (argc != 2) {
                fprintf(stderr, "usage: test-decode-hostile DATADIR\n");
                return EXIT_FAILURE;
        }
        synthetic_datadir = argv[1];

        test_synthetic();
        if (run_hostile_pages(argv[1]) != EXIT_SUCCESS)
                TEST_FAIL("a corrupt or unusual page was mishandled");
        return EXIT_SUCCESS;
}
