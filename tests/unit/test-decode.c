/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The page decoder on real pages recorded by tests/data/record-pages.c, compared byte for byte
 * with the golden NDJSON next to them, and on recorded pages made short, corrupt or flagged with
 * lost events. Synthetic formats and hostile pages are test-decode-hostile's.
 *
 *   test-decode DATADIR                    run the tests
 *   test-decode --generate DATADIR NAME    print what the decoder makes of a dataset (how the
 *                                          golden files were made; see tests/data/README.md)
 *
 * How a dataset is loaded (its formats, comms and overrun only): decode-helpers.c.
 */

#include <json-c/json.h>

#include "decode-helpers.h"

static const char *const dataset_names[] = {
        "sched_switch", "getppid", "print", "exec", "signed", "arrays", "overrun",
};

/* Decodes page after page, CPU after CPU, into NDJSON text; each page must parse. */
static void dataset_decode(Dataset *ds, Decoder *d, JsonBuf *out) {
        Batch *b = batch_new();

        ASSERT(b);
        for (unsigned cpu = 0; cpu < MAX_CPUS; cpu++)
                for (size_t i = 0; i < ds->n_pages[cpu]; i++) {
                        uint8_t *page = page_dup(ds->pages[cpu] + i * PAGE, PAGE);
                        int r;

                        batch_reset(b);
                        r = decoder_decode_page(d, page, PAGE, cpu, b);
                        if (r < 0)
                                TEST_FAIL("%s: cpu%u page %zu: decoder_decode_page() = %d", ds->dir, cpu, i,
                                          r);
                        ASSERT_INT_EQ(r, b->n_records);
                        append_records(out, b, 0);
                        page_free(page, PAGE);
                }
        batch_unref(b);
}

static size_t count_lines(const char *s, size_t len, const char *needle) {
        size_t n = 0;
        for (const char *p = s; p < s + len;) {
                const char *nl = memchr(p, '\n', (size_t) (s + len - p));
                size_t l = nl ? (size_t) (nl - p) : (size_t) (s + len - p);
                if (!needle || memmem(p, l, needle, strlen(needle)))
                        n++;
                p += l + 1;
        }
        return n;
}

static void test_golden(const char *datadir, const char *name) {
        char path[PATH_MAX + 64];
        JsonBuf out = {};
        Dataset ds;
        Decoder *d;
        char *expected;
        size_t expected_len, events, losts, ol = 0, el = 0;
        const DecoderStats *st;

        dataset_load(&ds, datadir, name);
        d = dataset_decoder(&ds, true);
        ASSERT_INT_EQ(jsonbuf_reserve(&out, 1), 0);
        dataset_decode(&ds, d, &out);

        snprintf(path, sizeof(path), "%s/expected.ndjson", ds.dir);
        expected = test_read_file(path, &expected_len);
        if (!expected)
                TEST_FAIL("cannot read %s: %m", path);

        /* Name the first line that differs before comparing the whole. */
        for (size_t line = 1; ol < out.len || el < expected_len; line++) {
                const char *a = memchr(out.data + ol, '\n', out.len - ol);
                const char *e = memchr(expected + el, '\n', expected_len - el);
                size_t al = a ? (size_t) (a - out.data) + 1 - ol : out.len - ol;
                size_t elen = e ? (size_t) (e - expected) + 1 - el : expected_len - el;

                if (al != elen || memcmp(out.data + ol, expected + el, al) != 0) {
                        fprintf(stderr, "%s: line %zu differs\n", path, line);
                        ASSERT_MEM_EQ(out.data + ol, al, expected + el, elen);
                }
                ol += al;
                el += elen;
        }
        ASSERT_MEM_EQ(out.data, out.len, expected, expected_len);
        check_json_lines(out.data, out.len);

        losts = count_lines(out.data, out.len, "\"cause\":\"overrun\"");
        events = count_lines(out.data, out.len, NULL) - losts;
        st = decoder_stats(d);
        ASSERT_U64_EQ(st->records, events);
        ASSERT_U64_EQ(st->unknown, 0);
        ASSERT_U64_EQ(st->bad_pages, 0);
        if (strcmp(name, "overrun") == 0) {
                /* The kernel's own count of overwritten records, not the decoder's. */
                ASSERT(ds.overrun[0] > 0);
                ASSERT_U64_EQ(st->overrun, ds.overrun[0]);
                ASSERT_INT_EQ(losts, 1);
        } else {
                ASSERT_U64_EQ(st->overrun, 0);
                ASSERT_INT_EQ(losts, 0);
        }

        free(expected);
        jsonbuf_done(&out);
        decoder_free(d);
        dataset_done(&ds);
}

/* The kernel's text of each record (after "event: ") from trace.txt, in order. */
static char **trace_infos(const char *dir, const char *event, size_t *ret_n) {
        char path[PATH_MAX + 32], *text, *p, **infos = NULL;
        size_t n = 0;
        char needle[128];

        snprintf(path, sizeof(path), "%s/trace.txt", dir);
        text = test_read_file(path, NULL);
        ASSERT(text);
        snprintf(needle, sizeof(needle), " %s: ", event);
        for (p = text; *p;) {
                char *nl = strchr(p, '\n'), *info;
                if (nl)
                        *nl = 0;
                if (*p != '#' && (info = strstr(p, needle))) {
                        infos = realloc(infos, (n + 1) * sizeof(char *));
                        ASSERT(infos);
                        infos[n++] = strdup(info + strlen(needle));
                }
                if (!nl)
                        break;
                p = nl + 1;
        }
        free(text);
        *ret_n = n;
        return infos;
}

/* decoder_encode_print() must give the kernel's own text (libtraceevent renders sched_switch as
 * the kernel does) and the plain line with only "print" added at the end. */
static void test_print_text(const char *datadir) {
        Dataset ds;
        Decoder *d;
        Batch *b = batch_new();
        size_t n_infos, k = 0;
        char **infos;

        dataset_load(&ds, datadir, "sched_switch");
        infos = trace_infos(ds.dir, "sched_switch", &n_infos);
        ASSERT(n_infos > 100);
        d = dataset_decoder(&ds, true);

        for (size_t i = 0; i < ds.n_pages[0]; i++) {
                uint8_t *page = page_dup(ds.pages[0] + i * PAGE, PAGE);

                batch_reset(b);
                ASSERT(decoder_decode_page(d, page, PAGE, 0, b) > 0);
                for (size_t j = 0; j < b->n_records; j++, k++) {
                        const Record *rec;
                        json_object *o, *v;
                        const char *plain, *line;

                        ASSERT(k < n_infos);
                        ASSERT_INT_EQ(decoder_encode_print(d, b, j), 0);
                        rec = &b->records[j];
                        ASSERT(rec->print_length > 0);
                        plain = b->buf.data + rec->offset;
                        /* Same line up to the closing brace. */
                        line = b->buf.data + rec->print_offset;
                        ASSERT_MEM_EQ(line, rec->length - 2, plain, rec->length - 2);
                        ASSERT_MEM_EQ(line + rec->length - 2, 10, ",\"print\":\"", 10);
                        ASSERT_MEM_EQ(line + rec->print_length - 3, 3, "\"}\n", 3);

                        {
                                json_tokener *tok = json_tokener_new();
                                o = json_tokener_parse_ex(tok, b->buf.data + rec->print_offset,
                                                          (int) rec->print_length - 1);
                                json_tokener_free(tok);
                        }
                        ASSERT(o);
                        ASSERT(json_object_object_get_ex(o, "print", &v));
                        ASSERT_STR_EQ(json_object_get_string(v), infos[k]);
                        json_object_put(o);

                        /* Asking again changes nothing. */
                        ASSERT_INT_EQ(decoder_encode_print(d, b, j), 0);
                        ASSERT_INT_EQ(b->records[j].print_offset, rec->print_offset);
                }
                page_free(page, PAGE);
        }
        ASSERT_INT_EQ(k, n_infos);

        for (size_t i = 0; i < n_infos; i++)
                free(infos[i]);
        free(infos);
        batch_unref(b);
        decoder_free(d);
        dataset_done(&ds);
}

/* Decodes a page that must be refused, checking that nothing was appended. */
static void expect_bad_page(Decoder *d, const uint8_t *src, size_t size) {
        const DecoderStats *st = decoder_stats(d);
        uint64_t bad = st->bad_pages;
        uint8_t *page = page_dup(src, size);
        Batch *b = batch_new();

        ASSERT(b);
        if (decoder_decode_page(d, page, size, 0, b) != -EBADMSG)
                TEST_FAIL("a bad page of %zu bytes was not refused with -EBADMSG", size);
        ASSERT_INT_EQ(b->n_records, 0);
        ASSERT_INT_EQ(b->buf.len, 0);
        ASSERT_U64_EQ(st->bad_pages, bad + 1);
        batch_unref(b);
        page_free(page, size);
}

static void test_truncated(const char *datadir) {
        Dataset ds;
        Decoder *d;
        const uint8_t *full, *partial;
        size_t partial_len;
        Batch *b = batch_new();
        uint8_t *page;

        dataset_load(&ds, datadir, "sched_switch");
        d = dataset_decoder(&ds, true);
        ASSERT_INT_EQ(ds.n_pages[0], 3);
        full = ds.pages[0];
        partial = ds.pages[0] + 2 * PAGE;
        ASSERT_U64_EQ(page_commit(full), PAGE - 16);
        partial_len = 16 + page_commit(partial);

        /* Shorter than its header, or than its commit length says. */
        expect_bad_page(d, full, 0);
        expect_bad_page(d, full, 8);
        expect_bad_page(d, full, 15);
        expect_bad_page(d, full, 16);
        expect_bad_page(d, full, 100);
        expect_bad_page(d, full, PAGE - 1);
        expect_bad_page(d, partial, partial_len - 1);
        expect_bad_page(d, partial, 16);

        /* Exactly the committed bytes are enough. */
        page = page_dup(partial, partial_len);
        ASSERT_INT_EQ(decoder_decode_page(d, page, partial_len, 0, b), 6);
        page_free(page, partial_len);
        page = page_dup(full, PAGE);
        batch_reset(b);
        ASSERT_INT_EQ(decoder_decode_page(d, page, PAGE, 0, b), 60);
        page_free(page, PAGE);
        ASSERT_U64_EQ(decoder_stats(d)->bad_pages, 8);

        batch_unref(b);
        decoder_free(d);
        dataset_done(&ds);
}

static void test_corrupt_commit(const char *datadir) {
        Dataset ds;
        Decoder *d;
        uint8_t page[PAGE];
        uint64_t commit;

        dataset_load(&ds, datadir, "sched_switch");
        d = dataset_decoder(&ds, true);

        memcpy(page, ds.pages[0], PAGE);
        commit = page_commit(page);

        page_set_commit(page, PAGE - 16 + 1);
        expect_bad_page(d, page, PAGE);
        page_set_commit(page, (1ULL << 27) - 1);
        expect_bad_page(d, page, PAGE);
        /* A full page has no room for a stored missed count after its data. */
        page_set_commit(page, commit | COMMIT_MISSED | COMMIT_STORED);
        expect_bad_page(d, page, PAGE);
        /* A partial page that claims a stored count ending past the bytes we hold. */
        memcpy(page, ds.pages[0] + 2 * PAGE, PAGE);
        page_set_commit(page, page_commit(page) | COMMIT_MISSED | COMMIT_STORED);
        expect_bad_page(d, page, 16 + (page_commit(page) & 0xffff) + 7);

        decoder_free(d);
        dataset_done(&ds);
}

static void test_corrupt_record(const char *datadir) {
        Dataset ds;
        Decoder *d;
        uint8_t page[PAGE];
        Batch *b = batch_new();
        JsonBuf out = {};
        char *expected;
        size_t expected_len;
        uint32_t hdr;

        dataset_load(&ds, datadir, "sched_switch");
        d = dataset_decoder(&ds, true);

        /* Page 2 holds records 120..125 of 68 bytes each (4 of header, 64 of sched_switch). Make the
         * fourth one's header say "length in the next word": that word is the payload's first, a
         * huge length. The three before it are kept; the page counts as bad. */
        memcpy(page, ds.pages[0] + 2 * PAGE, PAGE);
        memcpy(&hdr, page + 16 + 3 * 68, 4);
        ASSERT_INT_EQ(hdr & 31, 16);
        hdr &= ~31U;
        memcpy(page + 16 + 3 * 68, &hdr, 4);
        ASSERT_INT_EQ(decoder_decode_page(d, page, PAGE, 0, b), -EBADMSG);
        ASSERT_INT_EQ(b->n_records, 3);
        ASSERT_INT_EQ(jsonbuf_reserve(&out, 1), 0);
        append_records(&out, b, 0);
        expected = golden_lines(ds.dir, 120, 123, &expected_len);
        ASSERT_MEM_EQ(out.data, out.len, expected, expected_len);
        ASSERT_U64_EQ(decoder_stats(d)->bad_pages, 1);
        free(expected);

        /* A sched_switch record of 8 bytes, shorter than its 64-byte format: nothing half-written
         * stays in the batch. */
        memset(page, 0, sizeof(page));
        {
                uint32_t h = 2; /* type_len 2: 8 bytes of payload, delta 0 */
                uint16_t id = 372;
                int32_t pid = 1;
                memcpy(page + 16, &h, 4);
                memcpy(page + 20, &id, 2);
                memcpy(page + 24, &pid, 4);
                page_set_commit(page, 12);
        }
        expect_bad_page(d, page, PAGE);

        jsonbuf_done(&out);
        batch_unref(b);
        decoder_free(d);
        dataset_done(&ds);
}

static void test_missed(const char *datadir) {
        Dataset ds;
        Decoder *d, *d_nocb;
        uint64_t count = 1234;

        dataset_load(&ds, datadir, "sched_switch");
        d = dataset_decoder(&ds, true);
        d_nocb = dataset_decoder(&ds, false);
        ds.overrun[0] = 77; /* what the "missed" callback answers */

        /* The count stored after the data wins over the callback. */
        check_missed(d, &ds, COMMIT_MISSED | COMMIT_STORED, &count, 1234);
        /* No stored count: ask the callback. */
        check_missed(d, &ds, COMMIT_MISSED, NULL, 77);
        /* As the kernel writes it: RB_MISSED_EVENTS is an int, sign-extended into the 64-bit word. */
        check_missed(d, &ds, 0xffffffff80000000ULL, NULL, 77);
        /* No callback, no count: no lost record rather than a made-up one. */
        check_missed(d_nocb, &ds, COMMIT_MISSED, NULL, 0);
        /* The callback knows of no loss. */
        ds.overrun[0] = 0;
        check_missed(d, &ds, COMMIT_MISSED, NULL, 0);
        /* A stored count of 0 is no loss either. */
        count = 0;
        check_missed(d, &ds, COMMIT_MISSED | COMMIT_STORED, &count, 0);

        decoder_free(d_nocb);
        decoder_free(d);
        dataset_done(&ds);
}

static void test_unknown(const char *datadir) {
        Dataset ds;
        Decoder *d;
        struct tep_handle *bare;
        DecoderCallbacks cb = {};
        uint8_t page[PAGE];
        Batch *b = batch_new();
        JsonBuf out = {}, want = {};
        char *lines;
        size_t len;
        uint16_t id = 9999;

        dataset_load(&ds, datadir, "getppid");

        /* A tep handle without any format: every record is skipped and counted, and the run of
         * one id and pid becomes one lost record with cause "unknown". */
        bare = tep_from_dir(ds.dir, false);
        ASSERT_INT_EQ(decoder_new(bare, &cb, &d), 0);
        memcpy(page, ds.pages[1], PAGE);
        ASSERT_INT_EQ(decoder_decode_page(d, page, PAGE, 1, b), 1);
        ASSERT_INT_EQ(b->n_records, 1);
        ASSERT_INT_EQ(b->records[0].kind, TPD_LOST_UNKNOWN);
        ASSERT_U64_EQ(b->records[0].lost, 204);
        ASSERT_INT_EQ(b->records[0].event_id, 305);
        {
                static const char line[] = ",\"cpu\":1,\"lost\":204,\"cause\":\"unknown\"}\n";
                ASSERT(memmem(b->buf.data, b->buf.len, line, sizeof(line) - 1));
        }
        ASSERT_U64_EQ(decoder_stats(d)->unknown, 204);
        ASSERT_U64_EQ(decoder_stats(d)->records, 0);
        ASSERT_U64_EQ(decoder_stats(d)->bad_pages, 0);
        ASSERT(decoder_event_name(d, 305) == NULL);
        decoder_free(d);
        tep_free(bare);

        /* One record of an unknown id among known ones: only it is missing from the output. */
        d = dataset_decoder(&ds, true);
        ASSERT_STR_EQ(decoder_event_name(d, 305), "syscalls:sys_enter_getppid");
        ASSERT(decoder_event_name(d, 9999) == NULL);
        ASSERT(decoder_event_name(d, 0) == NULL);
        memcpy(page, ds.pages[1], PAGE);
        /* Records are 20 bytes (a 4-byte header, 16 of payload); the id leads the payload. */
        memcpy(page + 16 + 5 * 20 + 4, &id, 2);
        batch_reset(b);
        ASSERT_INT_EQ(decoder_decode_page(d, page, PAGE, 1, b), 204);
        ASSERT_INT_EQ(b->records[5].kind, TPD_LOST_UNKNOWN);
        ASSERT_INT_EQ(b->records[5].event_id, 9999);
        ASSERT_U64_EQ(b->records[5].lost, 1);
        ASSERT_U64_EQ(decoder_stats(d)->unknown, 1);
        ASSERT_U64_EQ(decoder_stats(d)->records, 203);
        ASSERT_INT_EQ(jsonbuf_reserve(&out, 1), 0);
        append_records(&out, b, 0);
        lines = golden_lines(ds.dir, 0, 5, &len);
        ASSERT_INT_EQ(jsonbuf_reserve(&want, 1 << 16), 0);
        jsonbuf_put(&want, lines, len);
        free(lines);
        /* In its place, the lost record. */
        jsonbuf_put(&want, b->buf.data + b->records[5].offset, b->records[5].length);
        lines = golden_lines(ds.dir, 6, 204, &len);
        jsonbuf_put(&want, lines, len);
        free(lines);
        ASSERT_MEM_EQ(out.data, out.len, want.data, want.len);

        /* Plans are compiled again after a reset, to the same output. */
        decoder_reset_plans(d);
        batch_reset(b);
        ASSERT_INT_EQ(decoder_decode_page(d, page, PAGE, 1, b), 204);
        ASSERT_MEM_EQ(b->buf.data, b->buf.len, want.data, want.len);

        jsonbuf_done(&out);
        jsonbuf_done(&want);
        batch_unref(b);
        decoder_free(d);
        dataset_done(&ds);
}

static int generate(const char *datadir, const char *name) {
        JsonBuf out = {};
        Dataset ds;
        Decoder *d;

        dataset_load(&ds, datadir, name);
        d = dataset_decoder(&ds, true);
        ASSERT_INT_EQ(jsonbuf_reserve(&out, 1), 0);
        dataset_decode(&ds, d, &out);
        fwrite(out.data, 1, out.len, stdout);
        jsonbuf_done(&out);
        decoder_free(d);
        dataset_done(&ds);
        return 0;
}

int main(int argc, char **argv) {
        const char *datadir;

        if (argc == 4 && strcmp(argv[1], "--generate") == 0)
                return generate(argv[2], argv[3]);
        if (argc != 2) {
                fprintf(stderr, "usage: test-decode DATADIR | --generate DATADIR NAME\n");
                return EXIT_FAILURE;
        }
        datadir = argv[1];

        for (size_t i = 0; i < sizeof(dataset_names) / sizeof(dataset_names[0]); i++)
                test_golden(datadir, dataset_names[i]);
        test_print_text(datadir);
        test_truncated(datadir);
        test_corrupt_commit(datadir);
        test_corrupt_record(datadir);
        test_missed(datadir);
        test_unknown(datadir);
        return EXIT_SUCCESS;
}
