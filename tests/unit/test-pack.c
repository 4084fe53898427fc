/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The decoder's inverse (core/pack.c) and pages written record by record (page_build_* of
 * core/page.c), as `tpctl convert` writes NDJSON into a data file: the recorded pages of tests/data
 * decoded into lines, each event line packed and put into new pages at its time, and those pages
 * decoded again must give the same lines, byte for byte. A record that does not fit its format
 * (a missing, extra or mistyped field, a value out of range) is refused with the field named; a
 * page takes time extends for long gaps and says when it is full or time goes back.
 *
 *   test-pack DATADIR
 */

#include <json-c/json.h>

#include "core/pack.h"
#include "core/page.h"
#include "decode-helpers.h"

static const char *const dataset_names[] = {
        "sched_switch", "getppid", "print", "exec", "signed", "arrays", "overrun",
};

/* The event lines of text (NUL-terminated lines of a JsonBuf), in order. */
static void event_lines(const char *text, size_t len, JsonBuf *out) {
        for (const char *l = text, *e; l < text + len; l = e + 1) {
                e = memchr(l, '\n', (size_t) (text + len - l));
                ASSERT(e);
                if (memmem(l, (size_t) (e - l), "\"event\":", 8)) {
                        ASSERT(jsonbuf_reserve(out, (size_t) (e - l) + 1) >= 0);
                        jsonbuf_put(out, l, (size_t) (e - l) + 1);
                }
        }
}

typedef struct Built {
        uint8_t *pages;
        size_t n;
        PageBuild b;
        bool open;
} Built;

static void built_add(Built *p, uint64_t ts, const JsonBuf *rec) {
        int r = p->open ? page_build_add(&p->b, ts, rec->data, rec->len) : -ENOSPC;

        if (r == -ENOSPC) {
                p->pages = realloc(p->pages, (p->n + 1) * PAGE);
                ASSERT(p->pages);
                page_build_init(&p->b, p->pages + p->n * PAGE, PAGE, ts);
                p->n++;
                p->open = true;
                r = page_build_add(&p->b, ts, rec->data, rec->len);
        }
        ASSERT_INT_EQ(r, 0);
}

static void test_dataset(const char *datadir, const char *name) {
        JsonBuf decoded = {}, original = {}, packed = {}, again = {}, again_events = {};
        Built built[MAX_CPUS] = {};
        Batch *b = batch_new();
        Decoder *d;
        Dataset ds;
        size_t n = 0;

        ASSERT(b);
        dataset_load(&ds, datadir, name);
        d = dataset_decoder(&ds, false);
        for (unsigned cpu = 0; cpu < MAX_CPUS; cpu++)
                for (size_t i = 0; i < ds.n_pages[cpu]; i++) {
                        ASSERT(decoder_decode_page(d, ds.pages[cpu] + i * PAGE, PAGE, cpu, b) >= 0);
                        append_records(&decoded, b, 0);
                        batch_reset(b);
                }
        event_lines(decoded.data, decoded.len, &original);
        ASSERT(original.len > 0);

        for (const char *l = original.data, *e; l < original.data + original.len; l = e + 1, n++) {
                json_object *o, *v;
                const char *field, *event, *colon;
                char system[64];
                struct tep_event *ev;
                uint64_t ts, cpu;

                e = memchr(l, '\n', (size_t) (original.data + original.len - l));
                o = json_tokener_parse(strndupa(l, (size_t) (e - l)));
                ASSERT(o);
                ASSERT(json_object_object_get_ex(o, "event", &v));
                event = json_object_get_string(v);
                colon = strchr(event, ':');
                ASSERT(colon && (size_t) (colon - event) < sizeof(system));
                memcpy(system, event, (size_t) (colon - event));
                system[colon - event] = 0;
                ev = tep_find_event_by_name(ds.tep, system, colon + 1);
                ASSERT(ev);
                ts = json_object_get_uint64(json_object_object_get(o, "ts"));
                cpu = json_object_get_uint64(json_object_object_get(o, "cpu"));
                ASSERT(cpu < MAX_CPUS);
                ASSERT_INT_EQ(decoder_pack(d, (unsigned) ev->id, o, &packed, &field), 0);
                ASSERT(field == NULL);
                built_add(&built[cpu], ts, &packed);
                json_object_put(o);
        }

        for (unsigned cpu = 0; cpu < MAX_CPUS; cpu++)
                for (size_t i = 0; i < built[cpu].n; i++) {
                        ASSERT(decoder_decode_page(d, built[cpu].pages + i * PAGE, PAGE, cpu, b) >= 0);
                        append_records(&again, b, 0);
                        batch_reset(b);
                }
        event_lines(again.data, again.len, &again_events);
        ASSERT_MEM_EQ(again_events.data, again_events.len, original.data, original.len);
        printf("%s: %zu records packed and decoded again, the same %zu bytes of NDJSON\n", name, n,
               original.len);

        for (unsigned cpu = 0; cpu < MAX_CPUS; cpu++)
                free(built[cpu].pages);
        jsonbuf_done(&decoded);
        jsonbuf_done(&original);
        jsonbuf_done(&packed);
        jsonbuf_done(&again);
        jsonbuf_done(&again_events);
        decoder_free(d);
        batch_unref(b);
        dataset_done(&ds);
}

/* What does not fit a format is refused, naming the field. */
static void test_refused(const char *datadir) {
        static const struct {
                const char *json;
                const char *field;
        } cases[] = {
                { "{\"fields\":{\"prev_comm\":\"a\",\"prev_pid\":1,\"prev_prio\":1,\"prev_state\":1,"
                  "\"next_comm\":\"b\",\"next_pid\":2,\"next_prio\":1}}",
                  "pid" },
                { "{\"pid\":1}", "fields" },
                { "{\"pid\":1,\"fields\":{\"prev_comm\":\"a\",\"prev_pid\":1,\"prev_prio\":1,\"prev_state\":"
                  "1,"
                  "\"next_comm\":\"b\",\"next_pid\":2}}",
                  "fields" },
                { "{\"pid\":1,\"fields\":{\"prev_comm\":\"a\",\"prev_pid\":\"1\",\"prev_prio\":1,\"prev_"
                  "state\":1,"
                  "\"next_comm\":\"b\",\"next_pid\":2,\"next_prio\":1}}",
                  "prev_pid" },
                { "{\"pid\":1,\"fields\":{\"prev_comm\":\"a\",\"prev_pid\":2147483648,\"prev_prio\":1,"
                  "\"prev_state\":1,\"next_comm\":\"b\",\"next_pid\":2,\"next_prio\":1}}",
                  "prev_pid" },
                { "{\"pid\":1,\"fields\":{\"prev_comm\":\"0123456789abcdefg\",\"prev_pid\":1,\"prev_prio\":"
                  "1,"
                  "\"prev_state\":1,\"next_comm\":\"b\",\"next_pid\":2,\"next_prio\":1}}",
                  "prev_comm" },
                { "{\"pid\":1,\"fields\":{\"prev_comm\":\"a\",\"prev_pid\":1,\"prev_prio\":1,\"prev_state\":"
                  "1,"
                  "\"next_comm\":\"b\\u0000c\",\"next_pid\":2,\"next_prio\":1}}",
                  "next_comm" },
                { "{\"pid\":1,\"fields\":{\"prev_comm\":\"a\",\"prev_pid\":1,\"prev_prio\":1,\"prev_state\":"
                  "1,"
                  "\"next_comm\":\"b\",\"next_pid\":2,\"other\":1}}",
                  "next_prio" },
        };
        JsonBuf packed = {};
        struct tep_event *ev;
        const char *field;
        Decoder *d;
        Dataset ds;

        dataset_load(&ds, datadir, "sched_switch");
        d = dataset_decoder(&ds, false);
        ev = tep_find_event_by_name(ds.tep, "sched", "sched_switch");
        ASSERT(ev);
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                json_object *o = json_tokener_parse(cases[i].json);

                ASSERT(o);
                ASSERT_INT_EQ(decoder_pack(d, (unsigned) ev->id, o, &packed, &field), -EINVAL);
                ASSERT_STR_EQ(field, cases[i].field);
                json_object_put(o);
        }
        {
                json_object *empty = json_object_new_object();
                ASSERT_INT_EQ(decoder_pack(d, 65000, empty, &packed, &field), -ENOENT);
                json_object_put(empty);
        }
        printf("%zu records that do not fit sched_switch refused, the field named\n",
               sizeof(cases) / sizeof(cases[0]));
        jsonbuf_done(&packed);
        decoder_free(d);
        dataset_done(&ds);
}

/* What would not come back the same is refused: a pointer with leading zeros, a tail array whose
 * end the page's 4-byte padding would lengthen. */
static void test_no_other_way_back(void) {
        static const char fmt[] = "name: tail\nID: 7\nformat:\n"
                                  "\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n"
                                  "\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\n"
                                  "\tfield:void * ptr;\toffset:8;\tsize:8;\tsigned:0;\n"
                                  "\tfield:unsigned char data[];\toffset:16;\tsize:0;\tsigned:0;\n\n"
                                  "print fmt: \"%p\", REC->ptr\n";
        static const struct {
                const char *json;
                int r;
        } cases[] = {
                { "{\"pid\":1,\"fields\":{\"ptr\":\"0xff\",\"data\":[1,2,3,4]}}", 0 },
                { "{\"pid\":1,\"fields\":{\"ptr\":\"0x0\",\"data\":[]}}", 0 },
                { "{\"pid\":1,\"fields\":{\"ptr\":\"0x00ff\",\"data\":[1,2,3,4]}}", -EINVAL },
                { "{\"pid\":1,\"fields\":{\"ptr\":\"0xFF\",\"data\":[1,2,3,4]}}", -EINVAL },
                { "{\"pid\":1,\"fields\":{\"ptr\":\"0xff\",\"data\":[7]}}", -EINVAL },
                { "{\"pid\":1,\"fields\":{\"ptr\":\"0xff\",\"data\":[256,0,0,0]}}", -EINVAL },
        };
        struct tep_handle *tep = tep_alloc();
        JsonBuf packed = {};
        const char *field;
        Decoder *d;

        ASSERT(tep);
        tep_set_loglevel(TEP_LOG_NONE);
        ASSERT_INT_EQ(tep_parse_event(tep, fmt, sizeof(fmt) - 1, "test"), TEP_ERRNO__SUCCESS);
        ASSERT_INT_EQ(decoder_new(tep, NULL, &d), 0);
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                json_object *o = json_tokener_parse(cases[i].json);

                ASSERT(o);
                ASSERT_INT_EQ(decoder_pack(d, 7, o, &packed, &field), cases[i].r);
                json_object_put(o);
        }
        ASSERT_INT_EQ(decoder_pack(d, 70000, NULL, &packed, &field), -ENOENT);
        printf("pointers with leading zeros and tails the padding would lengthen refused\n");
        jsonbuf_done(&packed);
        decoder_free(d);
        tep_free(tep);
}

/* Time stamps across a gap beyond 27 bits, a page that fills, time that goes back. */
static void test_page_build(void) {
        static const uint64_t times[] = { 1000,       1000,
                                          1001,       1001 + (1ULL << 27) + 5,
                                          1ULL << 45, (1ULL << 45) + 1 };
        uint8_t page[PAGE], data[200] = { 1, 2, 3 };
        PageBuild b;
        PageWalk w;
        PageEntry e;
        size_t n = 0;
        int r;

        page_build_init(&b, page, PAGE, 900);
        for (size_t i = 0; i < sizeof(times) / sizeof(times[0]); i++)
                ASSERT_INT_EQ(page_build_add(&b, times[i], data, i == 2 ? 200 : 5), 0);
        ASSERT_INT_EQ(page_build_add(&b, 999, data, 5), -ERANGE);
        ASSERT_INT_EQ(page_walk_init(&w, page, PAGE), 0);
        while ((r = page_walk_next(&w, &e)) > 0) {
                ASSERT(n < sizeof(times) / sizeof(times[0]));
                ASSERT_U64_EQ(e.ts, times[n]);
                ASSERT_U64_EQ(e.size, n == 2 ? 200 : 8);
                ASSERT(memcmp(e.payload, data, 5) == 0);
                n++;
        }
        ASSERT_INT_EQ(r, 0);
        ASSERT_U64_EQ(n, sizeof(times) / sizeof(times[0]));

        /* Full: what was put stays whole, with room for a loss count after it. */
        page_build_init(&b, page, PAGE, 0);
        n = 0;
        while ((r = page_build_add(&b, n, data, 100)) == 0)
                n++;
        ASSERT_INT_EQ(r, -ENOSPC);
        ASSERT_U64_EQ(page_records(page, PAGE), n);
        page_add_missed(page, PAGE, 7);
        ASSERT_INT_EQ(page_walk_init(&w, page, PAGE), 0);
        {
                uint64_t count = 0;
                ASSERT(page_missed(&w, &count));
                ASSERT_U64_EQ(count, 7);
        }
        ASSERT_INT_EQ(page_build_add(&b, n, data, PAGE), -E2BIG);

        /* The kernel's largest entry fills an empty page, its length in a word of its own. */
        {
                static uint8_t big[PAGE - 16 - 8];

                page_build_init(&b, page, PAGE, 5);
                ASSERT_INT_EQ(page_build_add(&b, 5, big, sizeof(big)), 0);
                ASSERT_U64_EQ(page_records(page, PAGE), 1);
                ASSERT_INT_EQ(page_build_add(&b, 6, data, 4), -ENOSPC);
        }
        /* A gap of 2^59 ns or more does not fit a time extend: a new page. */
        page_build_init(&b, page, PAGE, 0);
        ASSERT_INT_EQ(page_build_add(&b, 1, data, 4), 0);
        ASSERT_INT_EQ(page_build_add(&b, (1ULL << 59) + 1, data, 4), -ENOSPC);
        ASSERT_INT_EQ(page_build_add(&b, (1ULL << 59), data, 4), 0);
        printf("page: time extends, %zu records of 100 bytes in a full page, then -ENOSPC\n", n);
}

int main(int argc, char **argv) {
        if (argc != 2) {
                fprintf(stderr, "usage: test-pack DATADIR\n");
                return EXIT_FAILURE;
        }
        test_page_build();
        test_no_other_way_back();
        test_refused(argv[1]);
        for (size_t i = 0; i < sizeof(dataset_names) / sizeof(dataset_names[0]); i++)
                test_dataset(argv[1], dataset_names[i]);
        return EXIT_SUCCESS;
}
