/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * libFuzzer target: one input is the memory of a shared-memory ring (core/ring.c) as a reader
 * maps it, header page included: whatever a damaged or hostile mapping holds. Readers start at
 * its head, its oldest entry, its newest publish and the start, and read, resyncing when told,
 * until the ring ends or errs. Whatever the input, no read may leave the mapping (ASan: the input
 * is copied into a buffer of exactly its size, zero-filled up to the smallest ring), an accepted
 * entry's line must lie within it, and seqs must increase. Seeds: corpus/ring, rings written by
 * core/ring.c's writer (empty, every entry type, wrapped many times, a line length damaged).
 */

#include <string.h>

#include "core/ring.h"
#include "fuzz.h"

#define MEM_MIN (RING_HEADER_SIZE + RING_DATA_SIZE_MIN)
#define MEM_MAX (RING_HEADER_SIZE + 64 * 1024)
#define READS_MAX 64

typedef struct Check {
        bool any;
        uint64_t last_seq;
        unsigned sum;
} Check;

static int check_item(void *userdata, const RingItem *it) {
        Check *c = userdata;

        if (it->type < RING_EVENT || it->type >= RING_PAD || (c->any && it->seq <= c->last_seq))
                abort();
        c->any = true;
        c->last_seq = it->seq;
        /* Every byte of the line is read, so that ASan sees a line that reaches outside. */
        for (uint32_t i = 0; i < it->line_len; i++)
                c->sum += (uint8_t) it->line[i];
        return 0;
}

static void read_from(const uint8_t *mem, size_t size, uint64_t pos, uint64_t seq, bool seek) {
        RingReader r;
        Check c = {};

        if (ring_reader_init(&r, mem, size) < 0)
                return;
        if (seek)
                ring_reader_seek(&r, pos, seq);
        for (int i = 0; i < READS_MAX; i++) {
                size_t n;
                int k = ring_read(&r, mem, check_item, &c, &n);

                if (k == RING_READ_RESYNC) {
                        c.any = false; /* the next publish may hold seqs below what came before */
                        if (ring_resync(&r, mem) < 0)
                                break;
                        continue;
                }
                if (k < 0 || n == 0)
                        break;
        }
        ring_reader_done(&r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        size_t mem_size = size < MEM_MIN ? MEM_MIN : size;
        const RingHeader *h;
        uint8_t *mem;

        if (size > MEM_MAX)
                return 0;
        mem = calloc(1, mem_size);
        if (!mem)
                abort();
        memcpy(mem, data, size);
        h = (const RingHeader *) mem;

        read_from(mem, mem_size, 0, 0, false);
        read_from(mem, mem_size, h->oldest, h->oldest_seq, true);
        read_from(mem, mem_size, h->last_batch, h->last_batch_seq, true);
        read_from(mem, mem_size, 0, 0, true);
        free(mem);
        return 0;
}
