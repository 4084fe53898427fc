/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * libFuzzer target: one input is one sub-buffer page, filtered as a recording filters it
 * (core/page.c): keeping everything, nothing, and every other record. Whatever the input, the
 * output must be a page that walks without a fault and holds exactly the records kept, with the
 * input's time stamps; anything else aborts. The input is copied into a buffer of exactly its size,
 * so that ASan sees any read past it. Seeds: the decoder's corpus (the same pages).
 */

#include <string.h>

#include "core/page.h"
#include "fuzz.h"

#define OUT_MAX 8192

static bool keep_all(void *userdata, const PageEntry *e) {
        (void) userdata;
        (void) e;
        return true;
}

static bool keep_odd(void *userdata, const PageEntry *e) {
        unsigned *i = userdata;
        (void) e;
        return (*i)++ % 2 == 1;
}

/* Walks out and checks it holds n records whose times are ts[0..n). */
static void check_output(const uint8_t *out, size_t size, int n, const uint64_t *ts) {
        PageWalk w;
        PageEntry e;
        int k = 0, r;

        if (page_walk_init(&w, out, size) < 0)
                abort();
        while ((r = page_walk_next(&w, &e)) > 0) {
                if (k >= n || e.ts != ts[k])
                        abort();
                k++;
        }
        if (r < 0 || k != n)
                abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        static uint64_t ts[OUT_MAX], kept_ts[OUT_MAX];
        static uint8_t out[OUT_MAX];
        uint8_t *page;
        PageWalk w;
        PageEntry e;
        unsigned counter = 0;
        int n = 0, kept;

        if (size > OUT_MAX)
                return 0;
        page = malloc(size ?: 1);
        if (!page)
                abort();
        memcpy(page, data, size);

        /* The records a walk finds before any fault: what a filter may keep. */
        if (page_walk_init(&w, page, size) == 0)
                while (n < OUT_MAX && page_walk_next(&w, &e) > 0)
                        ts[n++] = e.ts;

        kept = page_filter(page, size, keep_all, NULL, out, NULL);
        if (kept >= 0 || kept == -EBADMSG) {
                if (size >= PAGE_HEADER_SIZE && page_walk_init(&w, page, size) == 0) {
                        if (kept < 0)
                                kept = n; /* what came before the fault is kept */
                        if (kept != n)
                                abort();
                        check_output(out, size, n, ts);
                }
        } else
                abort();

        kept = page_filter(page, size, keep_odd, &counter, out, NULL);
        if (kept != -EBADMSG && kept < 0)
                abort();
        if (size >= PAGE_HEADER_SIZE && page_walk_init(&w, page, size) == 0) {
                int m = 0;
                for (int i = 1; i < n; i += 2)
                        kept_ts[m++] = ts[i];
                check_output(out, size, m, kept_ts);
        }

        if (page_filter(page, size, keep_all, NULL, out, NULL) >= 0 && size >= PAGE_HEADER_SIZE) {
                page_add_missed(out, size, 3);
                check_output(out, size, n, ts);
        }
        (void) page_records(page, size);
        free(page);
        return 0;
}
