/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The shared-memory ring (core/ring.c) with real concurrency: one writer thread appends batches
 * as fast as it can for about a second while four readers read, pausing at random. Each reader
 * checks that the seqs it accepts strictly increase and that each line is the one its seq
 * determines, and at the end that accepted + skipped by resyncs == written.
 */

#include <pthread.h>
#include <time.h>

#include "core/ring.h"
#include "ring-lines.h"
#include "tpd-test.h"

#define DATA_SIZE (64 * 1024)
#define LINE_MAX 300
#define N_READERS 4
#define RUN_NS 1000000000ULL

static void *mem;
static RingWriter writer;
static bool writer_done;

static uint64_t now_ns(void) {
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * 1000000000ULL + (uint64_t) ts.tv_nsec;
}

static void *write_thread(void *arg) {
        static char lines[32][LINE_MAX];
        RingItem items[32];
        uint64_t end = now_ns() + RUN_NS;
        unsigned seed = 1;

        while (now_ns() < end) {
                size_t n = 1 + (size_t) rand_r(&seed) % 32;

                for (size_t i = 0; i < n; i++) {
                        uint64_t seq = writer.head_seq + i;

                        items[i] = (RingItem){ .type = RING_EVENT,
                                               .ts = seq,
                                               .line = lines[i],
                                               .line_len = ring_test_line_len(seq, LINE_MAX) };
                        ring_test_line(seq, lines[i], items[i].line_len);
                }
                ASSERT_INT_EQ(ring_append(&writer, items, n, NULL), n);
        }
        __atomic_store_n(&writer_done, true, __ATOMIC_RELEASE);
        return NULL;
}

typedef struct Reader {
        RingReader r;
        unsigned seed;
        bool any;
        uint64_t last_seq, accepted, resyncs;
} Reader;

static int check(void *userdata, const RingItem *it) {
        Reader *rd = userdata;
        char want[LINE_MAX];

        if (rd->any)
                ASSERT(it->seq > rd->last_seq);
        rd->any = true;
        rd->last_seq = it->seq;
        ASSERT_U64_EQ(it->ts, it->seq);
        ASSERT_INT_EQ(it->line_len, ring_test_line_len(it->seq, LINE_MAX));
        ring_test_line(it->seq, want, it->line_len);
        ASSERT_MEM_EQ(it->line, it->line_len, want, it->line_len);
        rd->accepted++;
        return 0;
}

static void *read_thread(void *arg) {
        Reader *rd = arg;

        for (;;) {
                bool done = __atomic_load_n(&writer_done, __ATOMIC_ACQUIRE);
                size_t n;
                int k;

                k = ring_read(&rd->r, mem, check, rd, &n);
                if (k == RING_READ_RESYNC) {
                        int64_t s;

                        while ((s = ring_resync(&rd->r, mem)) == -EAGAIN)
                                ;
                        ASSERT(s >= 0);
                        rd->resyncs++;
                        continue;
                }
                ASSERT_INT_EQ(k, 0);
                /* The writer had finished before this read began, and it found nothing more. */
                if (done && n == 0)
                        break;
                if (rand_r(&rd->seed) % 256 == 0)
                        usleep((useconds_t) (rand_r(&rd->seed) % 1000));
        }
        return NULL;
}

int main(void) {
        pthread_t w, r[N_READERS];
        Reader readers[N_READERS] = {};

        mem = aligned_alloc(4096, ring_mapping_size(DATA_SIZE));
        ASSERT(mem);
        ASSERT_INT_EQ(ring_writer_init(&writer, mem, ring_mapping_size(DATA_SIZE), 0, 2, 0), 0);
        for (int i = 0; i < N_READERS; i++) {
                ASSERT_INT_EQ(ring_reader_init(&readers[i].r, mem, ring_mapping_size(DATA_SIZE)), 0);
                readers[i].seed = 100 + (unsigned) i;
        }
        ASSERT_INT_EQ(pthread_create(&w, NULL, write_thread, NULL), 0);
        for (int i = 0; i < N_READERS; i++)
                ASSERT_INT_EQ(pthread_create(&r[i], NULL, read_thread, &readers[i]), 0);
        ASSERT_INT_EQ(pthread_join(w, NULL), 0);
        for (int i = 0; i < N_READERS; i++) {
                ASSERT_INT_EQ(pthread_join(r[i], NULL), 0);
                printf("reader %d: %" PRIu64 " accepted, %" PRIu64 " skipped in %" PRIu64 " resyncs\n", i,
                       readers[i].accepted, readers[i].r.skipped, readers[i].resyncs);
                ASSERT_U64_EQ(readers[i].accepted + readers[i].r.skipped, writer.head_seq);
                ring_reader_done(&readers[i].r);
        }
        printf("written: %" PRIu64 " entries in %" PRIu64 " publishes\n", writer.head_seq, writer.publish);
        free(mem);
        return 0;
}
