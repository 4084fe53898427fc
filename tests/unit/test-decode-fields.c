/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * A record's fields read without JSON, by the decoder's plans (decoder_plan_* of core/decode.h), as
 * tpctl writes a Perfetto trace from Record's pages: every record of the recorded datasets of
 * tests/data, and records of the synthetic formats (a field of every kind), written back as JSON
 * with decoder_value_json() under the plan's field names, make the "fields" of the line the decoder
 * makes of the record, byte for byte, and its pid is the line's. A record cut short at every length,
 * or whose __data_loc and __rel_loc words point past it, is read where the decoder reads it (the
 * ranges clamped to the record, the same values) and refused (-EBADMSG) where the decoder refuses
 * it; each copy ends at an inaccessible page, so that a read past it faults.
 *
 *   test-decode-fields DATADIR
 */

#include "decode-helpers.h"
#include "util.h"

static const char *const dataset_names[] = {
        "sched_switch", "getppid", "print", "exec", "signed", "arrays", "overrun",
};

/* `"fields":{…}` of a record of p's event, by the plan: 0, or the first field's error. */
static int fields_json(const EventPlan *p, const uint8_t *raw, size_t size, JsonBuf *out) {
        out->len = 0;
        ASSERT(jsonbuf_reserve(out, 16) >= 0);
        jsonbuf_put(out, "\"fields\":{", 10);
        for (unsigned i = 0; i < decoder_plan_n_fields(p); i++) {
                DecoderValue v;
                size_t len;
                const char *name = decoder_plan_field_name(p, i, &len);
                int r = decoder_plan_read(p, i, raw, size, &v);

                if (r < 0)
                        return r;
                ASSERT(jsonbuf_reserve(out, len + 4) >= 0);
                if (i > 0)
                        jsonbuf_putc(out, ',');
                jsonbuf_putc(out, '"');
                jsonbuf_put(out, name, len);
                jsonbuf_put(out, "\":", 2);
                ASSERT(decoder_value_json(&v, out) >= 0);
                if (v.kind == DECODER_VALUE_STRING)
                        ASSERT(!memchr(v.p, 0, v.len));
        }
        ASSERT(jsonbuf_reserve(out, 2) >= 0);
        jsonbuf_putc(out, '}');
        return 0;
}

/* The record (its payload, size bytes, at the end of an accessible range) read both ways: the
 * decoder's line and the plan's fields agree, or both refuse it. Returns whether it was read. */
static bool check_record(Decoder *d, Batch *b, const uint8_t *raw, size_t size, JsonBuf *fields) {
        DecoderUnknownRun unknown = {};
        const EventPlan *p;
        const Record *rec;
        const char *line;
        int32_t pid;
        int r;

        batch_reset(b);
        r = decoder_decode_record(d, 1000, 0, raw, size, &unknown, b);
        ASSERT(r == 1 || r == -EBADMSG);
        p = size >= 2 ? decoder_plan(d, (unsigned) load_unsigned(raw, 2)) : NULL;
        ASSERT(p || r < 0);
        if (r < 0) {
                /* Too short for its pid, or for one of its fields. */
                if (p && decoder_plan_pid(p, raw, size, &pid) >= 0)
                        ASSERT_INT_EQ(fields_json(p, raw, size, fields), -EBADMSG);
                return false;
        }
        ASSERT_INT_EQ(b->n_records, 1);
        rec = &b->records[0];
        line = b->buf.data + rec->offset;
        ASSERT_INT_EQ(decoder_plan_pid(p, raw, size, &pid), 0);
        ASSERT_INT_EQ(pid, rec->pid);
        ASSERT(strstr(line, decoder_plan_name(p)));
        ASSERT_INT_EQ(fields_json(p, raw, size, fields), 0);
        if (!memmem(line, rec->length, fields->data, fields->len)) {
                fprintf(stderr, "line:   %.*s\nfields: %.*s\n", (int) rec->length, line, (int) fields->len,
                        fields->data);
                ASSERT(false);
        }
        return true;
}

/* The record cut at every length, each copy at the end of an accessible range. */
static void check_cut(Decoder *d, Batch *b, const uint8_t *raw, size_t size, JsonBuf *fields,
                      unsigned *ret_read, unsigned *ret_refused) {
        for (size_t n = 0; n <= size; n++) {
                uint8_t *copy = page_dup(raw, n);

                if (check_record(d, b, copy, n, fields))
                        (*ret_read)++;
                else
                        (*ret_refused)++;
                page_free(copy, n);
        }
}

static void test_dataset(const char *datadir, const char *name) {
        JsonBuf fields = {};
        Batch *b = batch_new(), *page_batch = batch_new();
        unsigned n = 0, read = 0, refused = 0;
        Dataset ds;
        Decoder *d;

        ASSERT(b && page_batch);
        dataset_load(&ds, datadir, name);
        d = dataset_decoder(&ds, false);
        for (unsigned cpu = 0; cpu < MAX_CPUS; cpu++)
                for (size_t i = 0; i < ds.n_pages[cpu]; i++) {
                        ASSERT(decoder_decode_page(d, ds.pages[cpu] + i * PAGE, PAGE, cpu, page_batch) >= 0);
                        for (size_t k = 0; k < page_batch->n_records; k++) {
                                const Record *rec = &page_batch->records[k];
                                uint8_t *copy;

                                if (rec->kind != RECORD_EVENT || !rec->raw)
                                        continue;
                                copy = page_dup(rec->raw, rec->raw_size);
                                ASSERT(check_record(d, b, copy, rec->raw_size, &fields));
                                /* The first record of each page, cut. */
                                if (k == 0 || (k == 1 && page_batch->records[0].kind != RECORD_EVENT))
                                        check_cut(d, b, copy, rec->raw_size, &fields, &read, &refused);
                                page_free(copy, rec->raw_size);
                                n++;
                        }
                        batch_reset(page_batch);
                }
        ASSERT(n > 0);
        ASSERT(read > 0 && refused > 0);
        printf("%s: %u records read by their plans as decoded; cut short, %u read alike, %u refused alike\n",
               name, n, read, refused);
        jsonbuf_done(&fields);
        decoder_free(d);
        batch_unref(b);
        batch_unref(page_batch);
        dataset_done(&ds);
}

/* tpdtest:kinds, every kind of field; its locations in range, then pointing past the record. */
static void test_synthetic(const char *datadir) {
        char dir[PATH_MAX];
        struct tep_handle *tep;
        uint8_t rec[112] = {};
        unsigned read = 0, refused = 0;
        JsonBuf fields = {};
        Batch *b = batch_new();
        Decoder *d;

        ASSERT(b);
        snprintf(dir, sizeof(dir), "%s/synthetic", datadir);
        tep = tep_from_dir(dir, true);
        ASSERT(decoder_new(tep, NULL, &d) >= 0);

        put16(rec + 0, 900);
        put32(rec + 4, (uint32_t) -5);
        rec[8] = 200;
        rec[9] = 0x81;
        put16(rec + 10, 0x8001);
        put16(rec + 12, 0xfffe);
        rec[14] = 9;
        put32(rec + 20, 0x80000000U);
        put32(rec + 24, 0xfffffffeU);
        put64(rec + 28, 0x8000000000000000ULL);
        put64(rec + 36, UINT64_MAX);
        put64(rec + 44, 0xffffffff81000000ULL);
        memcpy(rec + 52, "nul\0rest", 8); /* cut at its NUL */
        put32(rec + 60, (uint32_t) -1), put32(rec + 64, 0), put32(rec + 68, 7);
        rec[72] = 1, rec[75] = 255;
        put32(rec + 76, 6U << 16 | 96);         /* "h\xffi" and what follows its NUL */
        put32(rec + 80, 4U << 16 | (100 - 84)); /* relative to the end of the field: 100 */
        put32(rec + 84, 8U << 16 | 104);        /* two u32 at 104 */
        put64(rec + 88, 0x1234);
        memcpy(rec + 96, "h\xffi\0", 4);
        memcpy(rec + 100, "rel!", 4); /* no NUL: up to the record's end */
        put32(rec + 104, 0xffffffffU), put32(rec + 108, 5);
        ASSERT(check_record(d, b, rec, sizeof(rec), &fields));
        ASSERT(strstr(fields.data, "\"name\":\"nul\""));
        ASSERT(strstr(fields.data, "\"ptr\":\"0xffffffff81000000\""));
        ASSERT(strstr(fields.data, "\"darr\":[4294967295,5]"));
        check_cut(d, b, rec, sizeof(rec), &fields, &read, &refused);

        /* Locations past the record: clamped, as the decoder clamps them. */
        put32(rec + 76, 200U << 16 | 90);
        put32(rec + 80, 0xffffU << 16 | 0xff00);
        put32(rec + 84, 7U << 16 | 110);
        ASSERT(check_record(d, b, rec, sizeof(rec), &fields));
        check_cut(d, b, rec, sizeof(rec), &fields, &read, &refused);
        ASSERT(read > 0 && refused > 0);
        printf("synthetic: every kind of field read by its plan as decoded; cut short, %u read alike, "
               "%u refused alike\n",
               read, refused);

        jsonbuf_done(&fields);
        decoder_free(d);
        tep_free(tep);
        batch_unref(b);
}

int main(int argc, char **argv) {
        ASSERT(argc == 2);
        for (size_t i = 0; i < ELEMENTSOF(dataset_names); i++)
                test_dataset(argv[1], dataset_names[i]);
        test_synthetic(argv[1]);
        return 0;
}
