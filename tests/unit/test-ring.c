/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The shared-memory ring (core/ring.c) over private memory: the header's layout, PAD entries at
 * every distance from the end of the data area, the largest entries, every entry type read back
 * as written, a batch's records, a reader overtaken between its copy and its check (it must get
 * RING_READ_RESYNC, never the rewritten bytes), and a long run of random batches and random reads
 * in which every accepted entry is the one written and accepted + skipped == written.
 */

#include "core/encode.h"
#include "core/ring.h"
#include "ring-lines.h"
#include "tpd-test.h"

#define DATA_SIZE 4096
/* Lines of at most this many bytes fit an entry of a ring of DATA_SIZE. */
#define LINE_MAX 400

typedef struct Ring {
        void *mem;
        size_t size;
        RingWriter w;
        RingReader r;
} Ring;

static void ring_open(Ring *ring, uint64_t data_size) {
        ring->size = ring_mapping_size(data_size);
        ring->mem = aligned_alloc(4096, ring->size);
        ASSERT(ring->mem);
        memset(ring->mem, 0xa5, ring->size); /* what an unwritten entry must never be read as */
        ASSERT_INT_EQ(ring_writer_init(&ring->w, ring->mem, ring->size, 1, 2, 3), 0);
        ASSERT_INT_EQ(ring_reader_init(&ring->r, ring->mem, ring->size), 0);
}

static void ring_close(Ring *ring) {
        ring_reader_done(&ring->r);
        free(ring->mem);
}

typedef struct Got {
        RingItem items[1024];
        char lines[1024][600];
        size_t n;
} Got;

static int collect(void *userdata, const RingItem *it) {
        Got *g = userdata;

        ASSERT(g->n < 1024);
        ASSERT(it->line_len <= sizeof(g->lines[0]));
        g->items[g->n] = *it;
        memcpy(g->lines[g->n], it->line, it->line_len);
        g->items[g->n].line = g->lines[g->n];
        g->n++;
        return 0;
}

/* Reads until nothing is left (a read takes at most a quarter of the ring). */
static size_t read_all(Ring *ring, Got *g) {
        size_t total = 0, n;

        do {
                ASSERT_INT_EQ(ring_read(&ring->r, ring->mem, collect, g, &n), 0);
                total += n;
        } while (n > 0);
        return total;
}

static void assert_item_eq(const RingItem *got, const RingItem *want, uint64_t seq) {
        ASSERT_INT_EQ(got->type, want->type);
        ASSERT_INT_EQ(got->kind, want->kind);
        ASSERT_INT_EQ(got->event_id, want->event_id);
        ASSERT_INT_EQ(got->cpu, want->cpu);
        ASSERT_INT_EQ(got->pid, want->pid);
        ASSERT_INT_EQ(got->flags, want->flags);
        ASSERT_U64_EQ(got->seq, seq);
        ASSERT_U64_EQ(got->ts, want->ts);
        ASSERT_U64_EQ(got->lost, want->type == RING_LOST ? want->lost : 0);
        ASSERT_U64_EQ(got->lost_base, want->type == RING_LOST ? want->lost_base : 0);
        ASSERT_MEM_EQ(got->line, got->line_len, want->line, want->line_len);
}

static void test_layout(void) {
        const RingHeader *h;
        RingReader other;
        Ring ring;

        ring_open(&ring, DATA_SIZE);
        h = ring.mem;
        ASSERT_MEM_EQ(h->magic, 8, "TPDRING\0", 8);
        ASSERT_INT_EQ(h->version, 1);
        ASSERT_INT_EQ(h->header_size, 4096);
        ASSERT_U64_EQ(h->data_size, DATA_SIZE);
        ASSERT_INT_EQ(h->variant, 1);
        ASSERT_INT_EQ(h->n_cpus, 2);
        ASSERT_INT_EQ(h->clock, 3);
        ASSERT_INT_EQ(h->gen, 0);
        ASSERT_INT_EQ(ring_state(ring.mem), RING_STATE_LIVE);
        ring_writer_set_state(&ring.w, RING_STATE_CLOSED);
        ASSERT_INT_EQ(ring_state(ring.mem), RING_STATE_CLOSED);

        /* Sizes that are no ring, for the writer and for a reader. */
        ASSERT_INT_EQ(ring_writer_init(&ring.w, ring.mem, 4096 + 3000, 0, 1, 0), -EINVAL);
        ASSERT_INT_EQ(ring_writer_init(&ring.w, ring.mem, 4096 + 2048, 0, 1, 0), -EINVAL);
        ASSERT_INT_EQ(ring_reader_init(&other, ring.mem, ring.size - 8), -EINVAL);
        ((RingHeader *) ring.mem)->version = 2;
        ASSERT_INT_EQ(ring_reader_init(&other, ring.mem, ring.size), -EINVAL);
        ring_close(&ring);
}

/* Fills the ring up to `room` bytes before the end of the data area, then writes an entry larger
 * than room: a PAD of room bytes comes first, and the reader skips it. */
static void test_pad(void) {
        /* Up to the largest room a PAD can fill: an entry of room + 8 is the largest allowed. */
        for (uint32_t room = 8; room + 8 <= ring_entry_max(DATA_SIZE); room += 8) {
                char line[600];
                RingItem it = { .type = RING_EVENT, .line = line };
                Got g = {};
                Ring ring;
                uint64_t seq = 0;

                ring_open(&ring, DATA_SIZE);
                memset(line, 'x', sizeof(line));
                /* Entries of 64 bytes until fewer than 64 + 64 are left, then one to leave room. */
                it.line_len = 24;
                while (DATA_SIZE - ring.w.head >= 128 + room) {
                        ASSERT_INT_EQ(ring_append(&ring.w, &it, 1, NULL), 1);
                        seq++;
                }
                it.line_len = (uint32_t) (DATA_SIZE - ring.w.head - room - sizeof(RingEntry));
                ASSERT_INT_EQ(ring_append(&ring.w, &it, 1, NULL), 1);
                ASSERT_U64_EQ(ring.w.head, DATA_SIZE - room);
                ASSERT_INT_EQ(read_all(&ring, &g), seq + 1);
                g.n = 0;

                it.line_len = room >= sizeof(RingEntry) ? room + 1 - (uint32_t) sizeof(RingEntry) : 1;
                ASSERT_INT_EQ(ring_append(&ring.w, &it, 1, NULL), 1);
                ASSERT_INT_EQ(*(uint32_t *) ((uint8_t *) ring.mem + 4096 + DATA_SIZE - room), room);
                ASSERT_INT_EQ(*((uint8_t *) ring.mem + 4096 + DATA_SIZE - room + 4), RING_PAD);
                ASSERT_U64_EQ(ring.w.head, DATA_SIZE + ((sizeof(RingEntry) + it.line_len + 7) & ~7u));
                ASSERT_INT_EQ(read_all(&ring, &g), 1);
                assert_item_eq(&g.items[0], &it, seq + 1);
                ring_close(&ring);
        }
}

static void test_max_entries(void) {
        static char line[DATA_SIZE];
        uint32_t max_line = (uint32_t) (ring_entry_max(DATA_SIZE) - sizeof(RingEntry));
        RingItem items[2] = {
                { .type = RING_EVENT, .line = line, .line_len = max_line },
                { .type = RING_LOST,
                  .kind = TPD_LOST_OVERRUN,
                  .lost = 5,
                  .line = line,
                  .line_len = max_line - (uint32_t) sizeof(RingLost) },
        };
        RingItem too_big = { .type = RING_EVENT, .line = line, .line_len = max_line + 1 };
        uint64_t seq = 0;
        size_t refused;
        Ring ring;

        for (size_t i = 0; i < sizeof(line); i++)
                line[i] = (char) ('0' + i % 10);
        ring_open(&ring, DATA_SIZE);
        /* Many turns of the ring in entries of the largest size, read after each append. */
        for (int round = 0; round < 100; round++) {
                Got g = {};

                ASSERT_INT_EQ(ring_append(&ring.w, items, 2, &refused), 2);
                ASSERT_INT_EQ(refused, 0);
                ASSERT_INT_EQ(read_all(&ring, &g), 2);
                assert_item_eq(&g.items[0], &items[0], seq++);
                assert_item_eq(&g.items[1], &items[1], seq++);
        }
        ASSERT_INT_EQ(ring_append(&ring.w, &too_big, 1, &refused), 0);
        ASSERT_INT_EQ(refused, 1);
        ASSERT_U64_EQ(ring.w.head_seq, seq);
        ring_close(&ring);
}

static void test_types(void) {
        RingItem items[] = {
                { .type = RING_EVENT,
                  .event_id = 317,
                  .cpu = 1,
                  .pid = 4242,
                  .ts = 1000,
                  .line = "{\"event\":1}\n",
                  .line_len = 12 },
                { .type = RING_LOST,
                  .kind = TPD_LOST_DROPPED,
                  .cpu = 0,
                  .pid = -1,
                  .ts = 1001,
                  .lost = 77,
                  .lost_base = 1234567890123ULL,
                  .line = "{\"lost\":77}\n",
                  .line_len = 12 },
                { .type = RING_NOTICE,
                  .ts = 1002,
                  .flags = 0xdeadbeef,
                  .line = "{\"notice\":\"x\"}\n",
                  .line_len = 15 },
                { .type = RING_CLOCK,
                  .ts = UINT64_MAX,
                  .cpu = UINT32_MAX,
                  .pid = INT32_MIN,
                  .line = "{\"clock\":1}\n",
                  .line_len = 12 },
        };
        Got g = {};
        Ring ring;
        size_t n;

        ring_open(&ring, DATA_SIZE);
        ASSERT_INT_EQ(ring_append(&ring.w, items, 4, NULL), 4);
        ASSERT_INT_EQ(ring_read(&ring.r, ring.mem, collect, &g, &n), 0);
        ASSERT_INT_EQ(n, 4);
        for (int i = 0; i < 4; i++)
                assert_item_eq(&g.items[i], &items[i], (uint64_t) i);
        ring_close(&ring);
}

static void test_batch(void) {
        Batch *b = batch_new();
        Record *rec;
        Got g = {};
        Ring ring;
        size_t n;

        ASSERT(b);
        ASSERT_INT_EQ(jsonbuf_reserve(&b->buf, 64), 0);
        jsonbuf_put(&b->buf, "{\"a\":1}\n", 8);
        rec = batch_add_record(b);
        ASSERT(rec);
        *rec = (Record){ .ts = 5, .offset = 0, .length = 8, .pid = 9, .cpu = 1, .event_id = 42 };
        ASSERT_INT_EQ(batch_add_lost(b, 6, 1, 3, TPD_LOST_OVERRUN), 0);
        b->records[1].lost_base = 100;

        ring_open(&ring, DATA_SIZE);
        ASSERT_INT_EQ(ring_append_batch(&ring.w, b, NULL), 2);
        ASSERT_INT_EQ(ring_read(&ring.r, ring.mem, collect, &g, &n), 0);
        ASSERT_INT_EQ(n, 2);
        ASSERT_INT_EQ(g.items[0].type, RING_EVENT);
        ASSERT_INT_EQ(g.items[0].event_id, 42);
        ASSERT_INT_EQ(g.items[0].pid, 9);
        ASSERT_MEM_EQ(g.items[0].line, g.items[0].line_len, "{\"a\":1}\n", 8);
        ASSERT_INT_EQ(g.items[1].type, RING_LOST);
        ASSERT_INT_EQ(g.items[1].kind, TPD_LOST_OVERRUN);
        ASSERT_U64_EQ(g.items[1].lost, 3);
        ASSERT_U64_EQ(g.items[1].lost_base, 100);
        ASSERT_MEM_EQ(g.items[1].line, g.items[1].line_len, b->buf.data + b->records[1].offset,
                      b->records[1].length);
        ring_close(&ring);
        batch_unref(b);
}

/* Appends items of seq-determined lines from w->head_seq on. */
static void append_seq(RingWriter *w, size_t n, uint32_t max_line) {
        static char lines[64][600];
        RingItem items[64];

        ASSERT(n <= 64);
        for (size_t i = 0; i < n; i++) {
                uint64_t seq = w->head_seq + i;

                items[i] = (RingItem){ .type = RING_EVENT,
                                       .ts = seq,
                                       .line = lines[i],
                                       .line_len = ring_test_line_len(seq, max_line) };
                ring_test_line(seq, lines[i], items[i].line_len);
        }
        ASSERT_INT_EQ(ring_append(w, items, n, NULL), n);
}

static void check_seq(const RingItem *it) {
        char want[600];

        ASSERT_U64_EQ(it->ts, it->seq);
        ASSERT_INT_EQ(it->line_len, ring_test_line_len(it->seq, LINE_MAX));
        ring_test_line(it->seq, want, it->line_len);
        ASSERT_MEM_EQ(it->line, it->line_len, want, it->line_len);
}

/* A reader copies, the writer overwrites what it copied (a whole ring or just the first entry),
 * then the reader checks: it must be told to resync, and resync puts it on the newest publish. */
static void test_overtaken(void) {
        for (int amount = 1; amount <= 80; amount++) {
                Got g = {};
                Ring ring;
                size_t n;
                int64_t skipped;

                ring_open(&ring, DATA_SIZE);
                append_seq(&ring.w, 10, LINE_MAX);
                ring_copy(&ring.r, ring.mem);
                ASSERT(ring.r.copied > 0);
                /* Enough to rewrite at least the first entry copied (amount ≥ ~20 always does). */
                for (int i = 0; i < amount; i++)
                        append_seq(&ring.w, 1, LINE_MAX);
                if (ring.w.oldest == 0) {
                        ASSERT_INT_EQ(ring_validate(&ring.r, ring.mem), 0);
                        ring_close(&ring);
                        continue;
                }
                ASSERT_INT_EQ(ring_validate(&ring.r, ring.mem), RING_READ_RESYNC);
                ASSERT_INT_EQ(ring.r.copied, 0);
                ASSERT_INT_EQ(ring_read(&ring.r, ring.mem, collect, &g, &n), RING_READ_RESYNC);
                ASSERT_INT_EQ(g.n, 0);
                skipped = ring_resync(&ring.r, ring.mem);
                ASSERT(skipped >= 0);
                ASSERT_U64_EQ(ring.r.seq, (uint64_t) skipped);
                n = read_all(&ring, &g);
                ASSERT_U64_EQ(skipped + n, ring.w.head_seq);
                for (size_t i = 0; i < g.n; i++)
                        check_seq(&g.items[i]);
                ring_close(&ring);
        }
}

static int check_collect(void *userdata, const RingItem *it) {
        uint64_t *next = userdata;

        ASSERT_U64_EQ(it->seq, *next);
        check_seq(it);
        (*next)++;
        return 0;
}

/* Random batches of random sizes, read at random moments, with a fixed seed. */
static void test_random(void) {
        uint64_t data_sizes[] = { 4096, 16384 };

        srandom(20240601);
        for (size_t d = 0; d < 2; d++) {
                uint64_t next = 0, accepted = 0, resyncs = 0;
                Ring ring;

                ring_open(&ring, data_sizes[d]);
                for (int step = 0; step < 20000; step++) {
                        size_t n;
                        int k;

                        append_seq(&ring.w, 1 + (size_t) random() % 40, LINE_MAX);
                        if (random() % 4 != 0)
                                continue;
                        /* Sometimes overtaken between copy and check. */
                        ring_copy(&ring.r, ring.mem);
                        if (random() % 8 == 0)
                                append_seq(&ring.w, 1 + (size_t) random() % 64, LINE_MAX);
                        k = ring_validate(&ring.r, ring.mem);
                        if (k == RING_READ_RESYNC) {
                                int64_t skipped = ring_resync(&ring.r, ring.mem);

                                ASSERT(skipped >= 0);
                                next += (uint64_t) skipped;
                                resyncs++;
                                continue;
                        }
                        ASSERT_INT_EQ(k, 0);
                        k = ring_deliver(&ring.r, check_collect, &next);
                        ASSERT(k >= 0);
                        n = (size_t) k;
                        accepted += n;
                }
                /* Drain what is left. */
                for (;;) {
                        size_t n;
                        int k = ring_read(&ring.r, ring.mem, check_collect, &next, &n);

                        if (k == RING_READ_RESYNC) {
                                ASSERT(ring_resync(&ring.r, ring.mem) >= 0);
                                next = ring.r.seq;
                                continue;
                        }
                        ASSERT_INT_EQ(k, 0);
                        if (n == 0)
                                break;
                        accepted += n;
                }
                ASSERT(resyncs > 0);
                ASSERT_U64_EQ(accepted + ring.r.skipped, ring.w.head_seq);
                ring_close(&ring);
        }
}

/* A header or entries that make no sense end the read with an error, not a fault. */
static void test_damaged(void) {
        Got g = {};
        Ring ring;
        size_t n;

        ring_open(&ring, DATA_SIZE);
        append_seq(&ring.w, 5, 100);
        ((RingEntry *) ((uint8_t *) ring.mem + 4096))->line_len = 100000;
        ASSERT_INT_EQ(ring_read(&ring.r, ring.mem, collect, &g, &n), -EBADMSG);
        ((RingEntry *) ((uint8_t *) ring.mem + 4096))->line_len = 1;
        ((RingEntry *) ((uint8_t *) ring.mem + 4096))->size = 4;
        ASSERT_INT_EQ(ring_read(&ring.r, ring.mem, collect, &g, &n), -EBADMSG);
        ((RingEntry *) ((uint8_t *) ring.mem + 4096))->size = 8000;
        ASSERT_INT_EQ(ring_read(&ring.r, ring.mem, collect, &g, &n), -EBADMSG);
        ((RingHeader *) ring.mem)->head = 1ULL << 40;
        ASSERT_INT_EQ(ring_read(&ring.r, ring.mem, collect, &g, &n), -EBADMSG);
        ((RingHeader *) ring.mem)->oldest = 1ULL << 41;
        ASSERT_INT_EQ(ring_read(&ring.r, ring.mem, collect, &g, &n), RING_READ_RESYNC);
        ASSERT_INT_EQ(ring_resync(&ring.r, ring.mem), -EBADMSG);
        ASSERT_INT_EQ(g.n, 0);
        ring_close(&ring);
}

int main(void) {
        test_layout();
        test_pad();
        test_max_entries();
        test_types();
        test_batch();
        test_overtaken();
        test_random();
        test_damaged();
        return 0;
}
