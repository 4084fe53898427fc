/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Datasets of tests/data and decoded lines, for test-decode and test-decode-hostile (see
 * decode-helpers.h).
 *
 * The tep handle is built from the dataset's own format files, never from this machine's tracefs,
 * and "comm" comes from the dataset's `comms` table (pids not in it get no "comm"): the output
 * depends on the recorded files only. The "missed" callback returns the recorded per-CPU overrun
 * of stats.txt, as the daemon does with the live stats.
 */

#include <dirent.h>
#include <sys/mman.h>

#include <json-c/json.h>

#include "decode-helpers.h"

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
struct tep_handle *tep_from_dir(const char *dir, bool formats) {
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

void dataset_load(Dataset *ds, const char *datadir, const char *name) {
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

void dataset_done(Dataset *ds) {
        for (int cpu = 0; cpu < MAX_CPUS; cpu++)
                free(ds->pages[cpu]);
        tep_free(ds->tep);
}

Decoder *dataset_decoder(Dataset *ds, bool with_missed) {
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
void put16(uint8_t *p, uint16_t v) {
        memcpy(p, &v, 2);
}

void put32(uint8_t *p, uint32_t v) {
        memcpy(p, &v, 4);
}

void put64(uint8_t *p, uint64_t v) {
        memcpy(p, &v, 8);
}

uint8_t *page_dup(const uint8_t *page, size_t size) {
        size_t len = (size + PAGE - 1) / PAGE * PAGE;
        uint8_t *base;

        base = mmap(NULL, len + PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        ASSERT(base != MAP_FAILED);
        ASSERT(mprotect(base + len, PAGE, PROT_NONE) == 0);
        memcpy(base + len - size, page, size);
        return base + len - size;
}

void page_free(uint8_t *p, size_t size) {
        size_t len = (size + PAGE - 1) / PAGE * PAGE;
        ASSERT(munmap(p + size - len, len + PAGE) == 0);
}

void append_records(JsonBuf *out, const Batch *b, size_t from) {
        ASSERT_INT_EQ(jsonbuf_reserve(out, 1), 0); /* room for the NUL when b has no record */
        for (size_t i = from; i < b->n_records; i++) {
                ASSERT_INT_EQ(jsonbuf_reserve(out, b->records[i].length + 1), 0);
                jsonbuf_put(out, b->buf.data + b->records[i].offset, b->records[i].length);
        }
        out->data[out->len] = 0;
}

/* Each line must be one JSON object with docs/design.md §3's keys in its order. json-c keeps key order. */
void check_json_lines(const char *text, size_t len) {
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

uint64_t page_commit(const uint8_t *page) {
        uint64_t c;
        memcpy(&c, page + 8, 8);
        return c;
}

void page_set_commit(uint8_t *page, uint64_t c) {
        memcpy(page + 8, &c, 8);
}

/* Lines [from, to) of the golden output of a dataset. */
char *golden_lines(const char *dir, size_t from, size_t to, size_t *ret_len) {
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

/* The golden text of sched_switch's last page, with a lost line of count in front. */
void check_missed(Decoder *d, Dataset *ds, uint64_t commit_flags, const uint64_t *stored, uint64_t count) {
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
