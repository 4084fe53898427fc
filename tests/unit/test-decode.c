/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The page decoder on real pages recorded by tests/data/record-pages.c, compared byte for byte
 * with the golden NDJSON next to them, and on pages crafted to be broken.
 *
 *   test-decode DATADIR                    run the tests
 *   test-decode --generate DATADIR NAME    print what the decoder makes of a dataset (how the
 *                                          golden files were made; see tests/data/README.md)
 *
 * The tep handle is built from the dataset's own format files, never from this machine's tracefs,
 * and "comm" comes from the dataset's `comms` table (pids not in it get no "comm"): the output
 * depends on the recorded files only. The "missed" callback returns the recorded per-CPU overrun
 * of stats.txt, as the daemon does with the live stats.
 */

#include <dirent.h>
#include <limits.h>
#include <sys/mman.h>
#include <sys/wait.h>

#include <json-c/json.h>
#include <traceevent/event-parse.h>

#include "core/decode.h"
#include "core/encode.h"
#include "tpd-test.h"

#define PAGE 4096U
#define MAX_CPUS 8
#define MAX_COMMS 16

/* The ring buffer's entry types (include/linux/ring_buffer.h). */
#define TYPE_PADDING 29U
#define TYPE_TIME_EXTEND 30U
#define COMMIT_MISSED (1ULL << 31)
#define COMMIT_STORED (1ULL << 30)

static const char *const dataset_names[] = {
        "sched_switch", "getppid", "print", "exec", "signed", "arrays", "overrun",
};

typedef struct Dataset {
        char dir[PATH_MAX];
        struct tep_handle *tep;
        struct {
                int pid;
                char name[32];
        } comms[MAX_COMMS];
        unsigned n_comms;
        uint64_t overrun[MAX_CPUS]; /* from stats.txt */
        uint8_t *pages[MAX_CPUS];   /* cpuN.pages, NULL when that CPU had nothing */
        size_t n_pages[MAX_CPUS];
} Dataset;

static const char *dataset_comm(void *userdata, int pid, uint64_t ts) {
        Dataset *ds = userdata;

        for (unsigned i = 0; i < ds->n_comms; i++)
                if (ds->comms[i].pid == pid)
                        return ds->comms[i].name;
        return NULL;
}

/* Like the kernel's page: a stored count wins; otherwise the recorded overrun. */
static uint64_t dataset_missed(void *userdata, unsigned cpu, const uint64_t *stored) {
        Dataset *ds = userdata;
        if (stored)
                return *stored;
        return cpu < MAX_CPUS ? ds->overrun[cpu] : 0;
}

static int tep_load_header(struct tep_handle *tep, const char *dir) {
        char path[PATH_MAX + 32];
        char *buf;
        size_t len;
        int r;

        snprintf(path, sizeof(path), "%s/header_page", dir);
        buf = test_read_file(path, &len);
        if (!buf)
                return -errno;
        r = tep_parse_header_page(tep, buf, len, 8);
        free(buf);
        return r < 0 ? -EINVAL : 0;
}

static int tep_load_format(struct tep_handle *tep, const char *path, const char *system) {
        char *buf;
        size_t len;
        enum tep_errno e;

        buf = test_read_file(path, &len);
        if (!buf)
                return -errno;
        e = tep_parse_event(tep, buf, len, system);
        free(buf);
        return e == TEP_ERRNO__SUCCESS ? 0 : -EINVAL;
}

/* A tep handle as the daemon makes one: 8-byte longs, the header page, then each SYS.EVENT.format. */
static struct tep_handle *tep_from_dir(const char *dir, bool formats) {
        struct tep_handle *tep = tep_alloc();
        struct dirent *de;
        DIR *d;

        ASSERT(tep);
        tep_set_long_size(tep, 8);
        tep_set_page_size(tep, PAGE);
        ASSERT_INT_EQ(tep_load_header(tep, dir), 0);
        if (!formats)
                return tep;

        d = opendir(dir);
        ASSERT(d);
        while ((de = readdir(d))) {
                size_t n = strlen(de->d_name);
                char path[PATH_MAX + 300], system[256];
                const char *dot;

                if (n < 8 || strcmp(de->d_name + n - 7, ".format") != 0)
                        continue;
                dot = strchr(de->d_name, '.');
                snprintf(system, sizeof(system), "%.*s", (int) (dot - de->d_name), de->d_name);
                snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
                if (tep_load_format(tep, path, system) < 0)
                        TEST_FAIL("failed to parse %s", path);
        }
        closedir(d);
        return tep;
}

static void dataset_load(Dataset *ds, const char *datadir, const char *name) {
        char path[PATH_MAX + 64], *text, *line, *save = NULL;
        int cpu = -1;

        *ds = (Dataset){};
        snprintf(ds->dir, sizeof(ds->dir), "%s/%s", datadir, name);
        ds->tep = tep_from_dir(ds->dir, true);

        snprintf(path, sizeof(path), "%s/comms", ds->dir);
        text = test_read_file(path, NULL);
        if (!text)
                TEST_FAIL("cannot read %s: %m", path);
        for (line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
                ASSERT(ds->n_comms < MAX_COMMS);
                ASSERT(sscanf(line, "%d %31s", &ds->comms[ds->n_comms].pid, ds->comms[ds->n_comms].name) ==
                       2);
                ds->n_comms++;
        }
        free(text);

        snprintf(path, sizeof(path), "%s/stats.txt", ds->dir);
        text = test_read_file(path, NULL);
        if (!text)
                TEST_FAIL("cannot read %s: %m", path);
        save = NULL;
        for (line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
                unsigned long long v;
                if (sscanf(line, "cpu%d", &cpu) == 1)
                        continue;
                if (sscanf(line, " overrun: %llu", &v) == 1 && cpu >= 0 && cpu < MAX_CPUS)
                        ds->overrun[cpu] = v;
        }
        free(text);

        for (cpu = 0; cpu < MAX_CPUS; cpu++) {
                size_t len = 0;

                snprintf(path, sizeof(path), "%s/cpu%d.pages", ds->dir, cpu);
                ds->pages[cpu] = (uint8_t *) test_read_file(path, &len);
                if (!ds->pages[cpu])
                        continue;
                ASSERT(len > 0 && len % PAGE == 0);
                ds->n_pages[cpu] = len / PAGE;
        }
}

static void dataset_done(Dataset *ds) {
        for (int cpu = 0; cpu < MAX_CPUS; cpu++)
                free(ds->pages[cpu]);
        tep_free(ds->tep);
}

static Decoder *dataset_decoder(Dataset *ds, bool with_missed) {
        DecoderCallbacks cb = {
                .comm = dataset_comm,
                .missed = with_missed ? dataset_missed : NULL,
                .userdata = ds,
        };
        Decoder *d = NULL;

        ASSERT_INT_EQ(decoder_new(ds->tep, &cb, &d), 0);
        ASSERT(d);
        return d;
}

/* A private copy of exactly size bytes that ends where an inaccessible page begins: a read past
 * it faults at once, without ASan or valgrind. */
static uint8_t *page_dup(const uint8_t *page, size_t size) {
        size_t len = (size + PAGE - 1) / PAGE * PAGE;
        uint8_t *base;

        base = mmap(NULL, len + PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        ASSERT(base != MAP_FAILED);
        ASSERT(mprotect(base + len, PAGE, PROT_NONE) == 0);
        memcpy(base + len - size, page, size);
        return base + len - size;
}

static void page_free(uint8_t *p, size_t size) {
        size_t len = (size + PAGE - 1) / PAGE * PAGE;
        ASSERT(munmap(p + size - len, len + PAGE) == 0);
}

static void append_records(JsonBuf *out, const Batch *b, size_t from) {
        for (size_t i = from; i < b->n_records; i++) {
                ASSERT_INT_EQ(jsonbuf_reserve(out, b->records[i].length + 1), 0);
                jsonbuf_put(out, b->buf.data + b->records[i].offset, b->records[i].length);
        }
        out->data[out->len] = 0;
}

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

/* Each line must be one JSON object with docs/design.md §3's keys in its order. json-c keeps key order. */
static void check_json_lines(const char *text, size_t len) {
        static const char *const event_keys[] = {
                "ts", "cpu", "event", "pid", "comm", "fields", "print", NULL,
        };
        static const char *const lost_keys[] = { "ts", "cpu", "lost", "cause", NULL };
        size_t lineno = 0;

        for (const char *p = text; p < text + len; lineno++) {
                const char *nl = memchr(p, '\n', (size_t) (text + len - p));
                json_tokener *tok = json_tokener_new();
                const char *const *keys, *const *k;
                json_object *o;

                ASSERT(nl);
                o = json_tokener_parse_ex(tok, p, (int) (nl - p));
                if (!o || json_tokener_get_parse_end(tok) != (size_t) (nl - p))
                        TEST_FAIL("line %zu is not one JSON value: %.*s", lineno + 1, (int) (nl - p), p);
                json_tokener_free(tok);
                ASSERT(json_object_is_type(o, json_type_object));

                keys = json_object_object_get_ex(o, "lost", NULL) ? lost_keys : event_keys;
                k = keys;
                json_object_object_foreach(o, key, val) {
                        /* Optional keys ("comm", "print") may be absent: skip to the one we have. */
                        while (*k && strcmp(*k, key) != 0)
                                k++;
                        if (!*k)
                                TEST_FAIL("line %zu: key \"%s\" unexpected or out of order", lineno + 1,
                                          key);
                        if (strcmp(key, "ts") == 0 || strcmp(key, "cpu") == 0 || strcmp(key, "pid") == 0 ||
                            strcmp(key, "lost") == 0)
                                ASSERT(json_object_is_type(val, json_type_int));
                        if (strcmp(key, "fields") == 0)
                                ASSERT(json_object_is_type(val, json_type_object));
                }
                for (const char *const *req = keys; *req; req++)
                        if (strcmp(*req, "comm") != 0 && strcmp(*req, "print") != 0 &&
                            !json_object_object_get_ex(o, *req, NULL))
                                TEST_FAIL("line %zu: key \"%s\" missing", lineno + 1, *req);
                json_object_put(o);
                p = nl + 1;
        }
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

static uint64_t page_commit(const uint8_t *page) {
        uint64_t c;
        memcpy(&c, page + 8, 8);
        return c;
}

static void page_set_commit(uint8_t *page, uint64_t c) {
        memcpy(page + 8, &c, 8);
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

/* Lines [from, to) of the golden output of a dataset. */
static char *golden_lines(const char *dir, size_t from, size_t to, size_t *ret_len) {
        char path[PATH_MAX + 32], *text, *start = NULL, *p;
        size_t line = 0;

        snprintf(path, sizeof(path), "%s/expected.ndjson", dir);
        text = test_read_file(path, NULL);
        ASSERT(text);
        for (p = text; *p && line < to; line++) {
                char *nl = strchr(p, '\n');
                ASSERT(nl);
                if (line == from)
                        start = p;
                p = nl + 1;
        }
        ASSERT(start && line == to);
        *ret_len = (size_t) (p - start);
        memmove(text, start, *ret_len);
        text[*ret_len] = 0;
        return text;
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

/* The golden text of sched_switch's last page, with a lost line of count in front. */
static void check_missed(Decoder *d, Dataset *ds, uint64_t commit_flags, const uint64_t *stored,
                         uint64_t count) {
        uint8_t *page = page_dup(ds->pages[0] + 2 * PAGE, PAGE);
        uint64_t commit = page_commit(page), ts, before = decoder_stats(d)->overrun;
        size_t len = commit & ((1ULL << 27) - 1), expected_len;
        Batch *b = batch_new();
        JsonBuf out = {}, want = {};
        char *events;
        int r;

        memcpy(&ts, page, 8);
        page_set_commit(page, commit | commit_flags);
        if (stored)
                memcpy(page + 16 + len, stored, 8);

        r = decoder_decode_page(d, page, PAGE, 0, b);
        ASSERT_INT_EQ(r, 6 + (count > 0));
        ASSERT_INT_EQ(jsonbuf_reserve(&out, 1), 0);
        append_records(&out, b, 0);

        events = golden_lines(ds->dir, 120, 126, &expected_len);
        ASSERT_INT_EQ(jsonbuf_reserve(&want, 256 + expected_len), 0);
        if (count > 0)
                want.len = (size_t) snprintf(want.data, 256,
                                             "{\"ts\":%" PRIu64 ",\"cpu\":0,\"lost\":%" PRIu64
                                             ",\"cause\":\"overrun\"}\n",
                                             ts, count);
        jsonbuf_put(&want, events, expected_len);
        ASSERT_MEM_EQ(out.data, out.len, want.data, want.len);
        if (count > 0) {
                ASSERT_INT_EQ(b->records[0].kind, TPD_LOST_OVERRUN);
                ASSERT_U64_EQ(b->records[0].lost, count);
        }
        ASSERT_U64_EQ(decoder_stats(d)->overrun, before + count);

        free(events);
        jsonbuf_done(&out);
        jsonbuf_done(&want);
        batch_unref(b);
        page_free(page, PAGE);
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

static void put16(uint8_t *p, uint16_t v) {
        memcpy(p, &v, 2);
}
static void put32(uint8_t *p, uint32_t v) {
        memcpy(p, &v, 4);
}
static void put64(uint8_t *p, uint64_t v) {
        memcpy(p, &v, 8);
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
        synthetic_datadir = datadir;

        for (size_t i = 0; i < sizeof(dataset_names) / sizeof(dataset_names[0]); i++)
                test_golden(datadir, dataset_names[i]);
        test_print_text(datadir);
        test_truncated(datadir);
        test_corrupt_commit(datadir);
        test_corrupt_record(datadir);
        test_missed(datadir);
        test_unknown(datadir);
        test_synthetic();
        if (run_hostile_pages(datadir) != EXIT_SUCCESS)
                TEST_FAIL("a corrupt or unusual page was mishandled");
        return EXIT_SUCCESS;
}
