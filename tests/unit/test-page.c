/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Sub-buffer pages (core/page.c): walking real pages recorded from the kernel, filtering them as
 * a recording does (each record kept stays as it was, with its time stamp, also across a gap that
 * needs a time extend), and flagging losses.
 */
#include "core/page.h"
#include "tpd-test.h"

#define PAGE_SIZE 4096U

typedef struct Seen {
        uint64_t ts[PAGE_SIZE];
        const uint8_t *payload[PAGE_SIZE];
        size_t size[PAGE_SIZE];
        size_t n;
} Seen;

static void walk_all(const void *page, Seen *s) {
        PageWalk w;
        PageEntry e;
        int r;

        s->n = 0;
        ASSERT_INT_EQ(page_walk_init(&w, page, PAGE_SIZE), 0);
        while ((r = page_walk_next(&w, &e)) > 0) {
                ASSERT(s->n < PAGE_SIZE);
                s->ts[s->n] = e.ts;
                s->payload[s->n] = e.payload;
                s->size[s->n] = e.size;
                s->n++;
        }
        ASSERT_INT_EQ(r, 0);
}

static bool keep_all(void *userdata, const PageEntry *e) {
        (void) userdata;
        (void) e;
        return true;
}

static bool keep_none(void *userdata, const PageEntry *e) {
        (void) userdata;
        (void) e;
        return false;
}

/* Keeps every n-th record, counting in *userdata. */
static bool keep_nth(void *userdata, const PageEntry *e) {
        unsigned *i = userdata;
        (void) e;
        return (*i)++ % 3 == 1;
}

static void test_recorded(const char *dir, const char *file) {
        char path[4096];
        size_t len;
        uint8_t *pages, out[PAGE_SIZE];
        static Seen in, got;
        uint64_t total = 0;

        snprintf(path, sizeof(path), "%s/%s", dir, file);
        pages = (uint8_t *) test_read_file(path, &len);
        ASSERT(pages);
        ASSERT(len % PAGE_SIZE == 0 && len > 0);

        for (size_t off = 0; off < len; off += PAGE_SIZE) {
                const uint8_t *page = pages + off;
                uint64_t walked = 0;
                unsigned counter = 0;
                size_t k;
                int kept;

                walk_all(page, &in);
                total += in.n;
                ASSERT_U64_EQ(page_records(page, PAGE_SIZE), in.n);

                /* Everything kept: the same records, the same times, the same loss flags. */
                kept = page_filter(page, PAGE_SIZE, keep_all, NULL, out, &walked);
                ASSERT_INT_EQ(kept, (int) in.n);
                ASSERT_U64_EQ(walked, in.n);
                walk_all(out, &got);
                ASSERT_INT_EQ(got.n, in.n);
                for (size_t i = 0; i < in.n; i++) {
                        ASSERT_U64_EQ(got.ts[i], in.ts[i]);
                        ASSERT_MEM_EQ(got.payload[i], got.size[i], in.payload[i], in.size[i]);
                }

                /* Nothing kept: an empty page with the page's time. */
                ASSERT_INT_EQ(page_filter(page, PAGE_SIZE, keep_none, NULL, out, NULL), 0);
                walk_all(out, &got);
                ASSERT_INT_EQ(got.n, 0);
                ASSERT(memcmp(out, page, 8) == 0);

                /* One in three kept: those, with their own times. */
                kept = page_filter(page, PAGE_SIZE, keep_nth, &counter, out, NULL);
                walk_all(out, &got);
                ASSERT_INT_EQ(got.n, (size_t) kept);
                k = 0;
                for (size_t i = 1; i < in.n; i += 3, k++) {
                        ASSERT(k < got.n);
                        ASSERT_U64_EQ(got.ts[k], in.ts[i]);
                        ASSERT_MEM_EQ(got.payload[k], got.size[k], in.payload[i], in.size[i]);
                }
                ASSERT_INT_EQ(k, got.n);
        }
        ASSERT(total > 0);
        free(pages);
}

static void put_u32(uint8_t *p, uint32_t v) {
        memcpy(p, &v, 4);
}

/* A page of three 8-byte records 100 ms apart: dropping the middle one leaves a gap of 200 ms,
 * more than a 27-bit delta holds (134 ms), so the last record needs a time extend. */
static void test_time_extend(void) {
        uint8_t page[PAGE_SIZE] = {}, out[PAGE_SIZE];
        uint64_t page_ts = 1000000000000ULL, commit = 3 * 8;
        uint32_t delta = 100000000U; /* fits in 27 bits */
        static Seen in, got;
        unsigned counter = 0;

        memcpy(page, &page_ts, 8);
        memcpy(page + 8, &commit, 8);
        for (unsigned i = 0; i < 3; i++) {
                put_u32(page + 16 + i * 8, 1U | (i == 0 ? 0 : delta << 5)); /* type_len 1: 4 bytes */
                put_u32(page + 16 + i * 8 + 4, 0xabc0 + i);
        }
        walk_all(page, &in);
        ASSERT_INT_EQ(in.n, 3);
        ASSERT_U64_EQ(in.ts[2], page_ts + 2 * (uint64_t) delta);

        /* keep_nth keeps the second of each three: counting from 2 keeps the last record alone,
         * 200 ms after the page's time. */
        counter = 2;
        ASSERT_INT_EQ(page_filter(page, PAGE_SIZE, keep_nth, &counter, out, NULL), 1);
        walk_all(out, &got);
        ASSERT_INT_EQ(got.n, 1);
        ASSERT_U64_EQ(got.ts[0], in.ts[2]);
        /* Not with a time extend before it: the page's time moved instead, so that the record is the
         * page's first entry (readers report a page's losses with its first entry only). */
        {
                uint32_t header;
                memcpy(&header, out + 16, 4);
                ASSERT_INT_EQ(header & 0x1f, 1);
                ASSERT_INT_EQ(header >> 5, 0);
        }
}

static bool keep_ends(void *userdata, const PageEntry *e) {
        unsigned *i = userdata;
        (void) e;
        return (*i)++ != 1;
}

static void test_time_extend_ends(void) {
        uint8_t page[PAGE_SIZE] = {}, out[PAGE_SIZE];
        uint64_t page_ts = 1000000000000ULL, commit = 3 * 8;
        uint32_t delta = 100000000U;
        static Seen in, got;
        unsigned counter = 0;
        uint32_t first_header;

        memcpy(page, &page_ts, 8);
        memcpy(page + 8, &commit, 8);
        for (unsigned i = 0; i < 3; i++) {
                put_u32(page + 16 + i * 8, 1U | (i == 0 ? 0 : delta << 5));
                put_u32(page + 16 + i * 8 + 4, 0xabc0 + i);
        }
        walk_all(page, &in);
        ASSERT_INT_EQ(page_filter(page, PAGE_SIZE, keep_ends, &counter, out, NULL), 2);
        walk_all(out, &got);
        ASSERT_INT_EQ(got.n, 2);
        ASSERT_U64_EQ(got.ts[0], in.ts[0]);
        ASSERT_U64_EQ(got.ts[1], in.ts[2]);
        ASSERT_MEM_EQ(got.payload[1], 4, "\xc2\xab\x00\x00", 4);
        /* First entry, then a time extend (type 30), then the last record. */
        memcpy(&first_header, out + 16 + 8, 4);
        ASSERT_INT_EQ(first_header & 0x1f, 30);
        memcpy(&commit, out + 8, 8);
        ASSERT_U64_EQ(commit, 8 + 8 + 8);
}

static void test_missed(void) {
        uint8_t page[PAGE_SIZE] = {};
        uint64_t commit = 8, stored;
        PageWalk w;

        /* Room after the data: the count is stored. */
        memcpy(page + 8, &commit, 8);
        put_u32(page + 16, 1U);
        page_add_missed(page, PAGE_SIZE, 5);
        ASSERT_INT_EQ(page_walk_init(&w, page, PAGE_SIZE), 0);
        ASSERT(page_missed(&w, &stored));
        ASSERT_U64_EQ(stored, 5);
        /* Adding to a stored count adds. */
        page_add_missed(page, PAGE_SIZE, 7);
        ASSERT_INT_EQ(page_walk_init(&w, page, PAGE_SIZE), 0);
        ASSERT(page_missed(&w, &stored));
        ASSERT_U64_EQ(stored, 12);
        /* An unknown loss makes the whole count unknown. */
        page_add_missed(page, PAGE_SIZE, UINT64_MAX);
        ASSERT_INT_EQ(page_walk_init(&w, page, PAGE_SIZE), 0);
        ASSERT(page_missed(&w, &stored));
        ASSERT_U64_EQ(stored, UINT64_MAX);

        /* A full page has no room: only the flag. */
        memset(page, 0, sizeof(page));
        commit = PAGE_SIZE - PAGE_HEADER_SIZE;
        memcpy(page + 8, &commit, 8);
        page_add_missed(page, PAGE_SIZE, 3);
        ASSERT_INT_EQ(page_walk_init(&w, page, PAGE_SIZE), 0);
        ASSERT(page_missed(&w, &stored));
        ASSERT_U64_EQ(stored, UINT64_MAX);
}

static void test_corrupt(void) {
        uint8_t page[PAGE_SIZE] = {}, out[PAGE_SIZE];
        uint64_t commit = PAGE_SIZE; /* longer than the page */
        PageWalk w;

        memcpy(page + 8, &commit, 8);
        ASSERT_INT_EQ(page_walk_init(&w, page, PAGE_SIZE), -EBADMSG);
        ASSERT_INT_EQ(page_filter(page, PAGE_SIZE, keep_all, NULL, out, NULL), -EBADMSG);

        /* A type 0 entry whose length runs past the data. */
        commit = 16;
        memcpy(page + 8, &commit, 8);
        put_u32(page + 16, 0);
        put_u32(page + 20, 4000);
        ASSERT_INT_EQ(page_filter(page, PAGE_SIZE, keep_all, NULL, out, NULL), -EBADMSG);
        ASSERT_U64_EQ(page_records(page, PAGE_SIZE), 0);
        ASSERT_INT_EQ(page_walk_init(&w, out, PAGE_SIZE), 0);
}

int main(int argc, char *argv[]) {
        if (argc < 2)
                TEST_FAIL("usage: %s DATA_DIR", argv[0]);
        {
                char dir[4096];
                snprintf(dir, sizeof(dir), "%s/getppid", argv[1]);
                test_recorded(dir, "cpu1.pages");
                snprintf(dir, sizeof(dir), "%s/sched_switch", argv[1]);
                test_recorded(dir, "cpu0.pages");
        }
        test_time_extend();
        test_time_extend_ends();
        test_missed();
        test_corrupt();
        return 0;
}
