/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The reader page on the recorded pages of tests/data, for random selections (events, pids, CPUs,
 * a filter, symbolic lines, a base that cuts losses): stream_count_batch() takes exactly the lines
 * stream_offer_batch() queues; and readers of a ring written with ring_append_batch() and
 * ring_page_publish(), reading only what is marked and stopping at random, end with delivered +
 * lost == selected, per CPU and cause. A page that makes no sense is refused.
 *
 *   test-ring-page DATADIR
 */

#include <stdlib.h>

#include "core/ring.h"
#include "decode-helpers.h"
#include "stream-helpers.h"
#include "util.h"

#define N_STREAMS 8
#define ROUNDS 6
#define PASSES 30

typedef struct Data {
        const char *name;
        const char *event; /* a filter's event, or NULL */
        const char *filter;
} Data;

static const Data datasets[] = {
        { "sched_switch", "sched:sched_switch", "prev_pid > 100 || next_pid == 0" },
        { "getppid", "syscalls:sys_enter_getppid", "common_pid > 1000" },
        { "overrun", "syscalls:sys_enter_getppid", "common_pid != 4242" },
        { "print", NULL, NULL },
        { "exec", NULL, NULL },
        { "signed", NULL, NULL },
        { "arrays", NULL, NULL },
};

typedef struct Batches {
        Batch *b[4096];
        size_t n;
        uint16_t ids[64];
        size_t n_ids;
        int32_t pids[64];
        size_t n_pids;
        uint64_t lost_end; /* the largest lost_base + lost of the kernel's losses */
} Batches;

static void note(Batches *bs, const Batch *b) {
        for (size_t i = 0; i < b->n_records; i++) {
                const Record *r = &b->records[i];
                bool found = false;

                if (r->kind != RECORD_EVENT) {
                        bs->lost_end = MAX(bs->lost_end, r->lost_base + r->lost);
                        continue;
                }
                for (size_t k = 0; k < bs->n_ids && !found; k++)
                        found = bs->ids[k] == r->event_id;
                if (!found && bs->n_ids < 64)
                        bs->ids[bs->n_ids++] = r->event_id;
                found = false;
                for (size_t k = 0; k < bs->n_pids && !found; k++)
                        found = bs->pids[k] == r->pid;
                if (!found && bs->n_pids < 64)
                        bs->pids[bs->n_pids++] = r->pid;
        }
}

/* The dataset's pages, one to three a batch, as tpd reads them. */
static void decode_all(Dataset *ds, Decoder *d, Batches *bs) {
        *bs = (Batches){};
        for (unsigned cpu = 0; cpu < MAX_CPUS; cpu++)
                for (size_t i = 0; i < ds->n_pages[cpu];) {
                        size_t n = 1 + (size_t) random() % 3;
                        Batch *b = batch_new();

                        ASSERT(b);
                        for (; n > 0 && i < ds->n_pages[cpu]; n--, i++)
                                ASSERT(decoder_decode_page(d, ds->pages[cpu] + i * PAGE, PAGE, cpu, b) >= 0);
                        b->plain_end = b->buf.len;
                        if (b->n_records == 0) {
                                batch_unref(b);
                                continue;
                        }
                        ASSERT(bs->n < ELEMENTSOF(bs->b));
                        note(bs, b);
                        bs->b[bs->n++] = b;
                }
}

static Stream *random_stream(const Data *data, Dataset *ds, const Batches *bs) {
        Stream *s = stream_make(STREAM_RAW, MAX_CPUS, (size_t) 1 << 30);
        unsigned what = (unsigned) random();

        if (what & 1)
                for (size_t k = 0; k < bs->n_ids; k++)
                        if (random() % 2)
                                ASSERT_INT_EQ(selection_select_event(&s->selection, bs->ids[k]), 0);
        if (what & 2)
                for (size_t k = 0; k < bs->n_pids; k++)
                        if (random() % 3 == 0)
                                ASSERT_INT_EQ(selection_select_pid(&s->selection, bs->pids[k]), 0);
        if (what & 4)
                for (unsigned cpu = 0; cpu < MAX_CPUS; cpu++)
                        if (random() % 2)
                                ASSERT_INT_EQ(selection_select_cpu(&s->selection, cpu), 0);
        if ((what & 8) && data->filter)
                ASSERT_INT_EQ(set_filter(s, ds->tep, data->filter, data->event, NULL), 0);
        s->symbolic = what & 16;
        if ((what & 32) && bs->lost_end > 0) {
                /* A start among the losses: some before it, some cut, some after. */
                for (unsigned cpu = 0; cpu < MAX_CPUS; cpu++)
                        ASSERT_INT_EQ(stream_set_base(s, cpu, (uint64_t) random() % (bs->lost_end + 1),
                                                      (uint64_t) random() % 4),
                                      0);
                s->has_base = true;
        }
        return s;
}

static bool takes_all(const Stream *s) {
        const Selection *sel = &s->selection;

        return !sel->events && sel->n_pids == 0 && !sel->cpus && !sel->filter;
}

/* Appends the line the stream gets of record i, taken as count records. */
static void expect_line(JsonBuf *out, Decoder *d, Batch *b, size_t i, uint64_t count, bool sym) {
        const Record *r = &b->records[i];

        if (r->kind != RECORD_EVENT && count != r->lost) {
                Batch *own = batch_new();

                ASSERT(own);
                ASSERT_INT_EQ(batch_add_lost(own, r->ts, r->cpu, count, r->kind), 0);
                append_records(out, own, 0);
                batch_unref(own);
                return;
        }
        if (sym && r->kind == RECORD_EVENT && !(b->variant & DECODER_VARIANT_SYM)) {
                ASSERT(decoder_encode_variant(d, b, i, DECODER_VARIANT_SYM) >= 0);
                r = &b->records[i];
                ASSERT_INT_EQ(jsonbuf_reserve(out, r->print_length + 1), 0);
                jsonbuf_put(out, b->buf.data + r->print_offset, r->print_length);
                out->data[out->len] = '\0';
                return;
        }
        ASSERT_INT_EQ(jsonbuf_reserve(out, r->length + 1), 0);
        jsonbuf_put(out, b->buf.data + r->offset, r->length);
        out->data[out->len] = '\0';
}

/* The lines and the counts (per CPU and kind) of what c takes of b. */
static void expect(JsonBuf *out, uint64_t *counts, Decoder *d, Batch *b, const StreamCount *c, bool sym,
                   uint64_t data_size) {
        size_t n = c->all ? b->n_records : c->n;

        for (size_t k = 0; k < n; k++) {
                size_t i = c->all ? k : c->index[k];
                const Record *r = &b->records[i];
                uint64_t count = c->all ? (r->kind == RECORD_EVENT ? 1 : r->lost) : c->count[k];

                /* What the ring refuses, no reader gets nor counts. */
                if (data_size > 0 && !ring_batch_entry_fits(data_size, b, i))
                        continue;
                if (out)
                        expect_line(out, d, b, i, count, sym);
                if (counts)
                        counts[ring_page_cpu(MAX_CPUS, r->cpu) * RING_PAGE_KINDS +
                               ring_page_kind(r->kind == RECORD_EVENT ? RING_EVENT : RING_LOST, r->kind)] +=
                                count;
        }
}

static void test_count_is_offer(const Data *data, Dataset *ds, Decoder *d, Batches *bs) {
        for (unsigned round = 0; round < ROUNDS * N_STREAMS; round++) {
                Stream *s = random_stream(data, ds, bs);
                JsonBuf want = {}, got = {};

                for (size_t j = 0; j < bs->n; j++) {
                        StreamCount c;

                        ASSERT(stream_offer_batch(s, d, bs->b[j]) >= 0);
                        ASSERT_INT_EQ(stream_count_batch(s, d, bs->b[j], &c), 0);
                        expect(&want, NULL, d, bs->b[j], &c, s->symbolic, 0);
                        flush_queue(&s->queue, &got);
                }
                ASSERT_U64_EQ(s->lost_client, 0);
                ASSERT_MEM_EQ(got.data, got.len, want.data, want.len);
                jsonbuf_done(&want);
                jsonbuf_done(&got);
                stream_free(s);
        }
}

typedef struct Reader {
        Stream *s;
        RingPageWriter pw;
        void *page;
        size_t page_size;
        RingPageReader pr;
        RingReader r;
        StreamCount c;
        unsigned every; /* reads after one batch in every */
        uint64_t selected[MAX_CPUS * RING_PAGE_KINDS];
        uint64_t delivered[MAX_CPUS * RING_PAGE_KINDS];
        uint64_t lost[MAX_CPUS * RING_PAGE_KINDS];
        unsigned resyncs;
        JsonBuf want, got;
} Reader;

typedef struct Sim {
        Reader readers[N_STREAMS];
        const Batch *b; /* NULL: notices */
} Sim;

static void on_publish(void *userdata, const RingPublish *p) {
        Sim *sim = userdata;

        for (unsigned k = 0; k < N_STREAMS; k++)
                ring_page_publish(&sim->readers[k].pw, p, sim->b, sim->b ? &sim->readers[k].c : NULL);
}

static int deliver(void *userdata, const RingItem *it) {
        Reader *rd = userdata;
        uint64_t n = it->type == RING_LOST ? it->lost : 1;

        if (it->type == RING_NOTICE)
                return 0;
        ASSERT(it->type == RING_EVENT || it->type == RING_LOST);
        ASSERT(ring_page_selected(&rd->pr, it->seq));
        rd->delivered[ring_page_cpu(MAX_CPUS, it->cpu) * RING_PAGE_KINDS +
                      ring_page_kind(it->type, it->kind)] += n;
        if (it->line) {
                ASSERT_INT_EQ(jsonbuf_reserve(&rd->got, it->line_len + 1), 0);
                jsonbuf_put(&rd->got, it->line, it->line_len);
        } else {
                Batch *own = batch_new();

                ASSERT(own && it->type == RING_LOST);
                ASSERT_INT_EQ(batch_add_lost(own, it->ts, it->cpu, it->lost, it->kind), 0);
                append_records(&rd->got, own, 0);
                batch_unref(own);
        }
        return 0;
}

/* Reads up to the head, or only a few times when !all; resyncs when overtaken. */
static void read_some(Reader *rd, const RingWriter *w, const void *mem, bool all) {
        for (unsigned tries = 0; all ? rd->r.pos < w->head : tries < 1 + (unsigned) random() % 3; tries++) {
                int k = ring_read(&rd->r, mem, deliver, rd, NULL);

                if (k == RING_READ_RESYNC) {
                        ASSERT(ring_resync(&rd->r, mem) >= 0);
                        for (size_t i = 0; i < ELEMENTSOF(rd->lost); i++)
                                rd->lost[i] += rd->pr.lost[i];
                        rd->resyncs++;
                        continue;
                }
                ASSERT_INT_EQ(k, 0);
        }
}

static void check_sums(const Reader *rd) {
        for (unsigned cpu = 0; cpu < MAX_CPUS; cpu++) {
                const uint64_t *sel = rd->selected + cpu * RING_PAGE_KINDS;
                const uint64_t *got = rd->delivered + cpu * RING_PAGE_KINDS;
                const uint64_t *lost = rd->lost + cpu * RING_PAGE_KINDS;

                ASSERT_U64_EQ(got[0] + lost[TPD_LOST_CLIENT], sel[0] + sel[TPD_LOST_CLIENT]);
                for (unsigned k = 1; k < RING_PAGE_KINDS; k++)
                        if (k != TPD_LOST_CLIENT)
                                ASSERT_U64_EQ(got[k] + lost[k], sel[k]);
        }
}

static void test_readers(const Data *data, Dataset *ds, Decoder *d, Batches *bs, uint64_t data_size) {
        static const RingItem notice = { .type = RING_NOTICE,
                                         .line = "{\"notice\":\"x\"}\n",
                                         .line_len = 15 };
        void *mem = aligned_alloc(4096, ring_mapping_size(data_size));
        unsigned resyncs = 0, whole = 0;
        RingWriter w;
        Sim sim = {};

        ASSERT(mem);
        ASSERT_INT_EQ(ring_writer_init(&w, mem, ring_mapping_size(data_size), 0, MAX_CPUS, 0), 0);
        w.on_publish = on_publish;
        w.userdata = &sim;
        for (unsigned k = 0; k < N_STREAMS; k++) {
                Reader *rd = &sim.readers[k];

                rd->s = random_stream(data, ds, bs);
                rd->s->symbolic = false; /* the ring holds plain lines */
                rd->page_size = ring_page_size(MAX_CPUS, data_size, takes_all(rd->s));
                rd->page = aligned_alloc(8, rd->page_size);
                ASSERT(rd->page);
                ASSERT_INT_EQ(ring_page_writer_init(&rd->pw, rd->page, rd->page_size, MAX_CPUS, data_size,
                                                    takes_all(rd->s)),
                              0);
                for (unsigned cpu = 0; cpu < MAX_CPUS && rd->s->has_base; cpu++)
                        ring_page_set_base(&rd->pw, cpu, rd->s->base[cpu * 2], rd->s->base[cpu * 2 + 1]);
                ASSERT_INT_EQ(ring_reader_init(&rd->r, mem, ring_mapping_size(data_size)), 0);
                ASSERT_INT_EQ(ring_page_reader_init(&rd->pr, rd->page, rd->page_size, data_size), 0);
                ring_reader_set_page(&rd->r, &rd->pr);
                rd->every = k == 0 ? 1 : 1 + (unsigned) random() % 12;
        }

        /* The dataset over and over, so that the ring turns many times. */
        for (size_t pass = 0, j = 0; pass < PASSES; j = (j + 1) % bs->n, pass += j == 0) {
                sim.b = bs->b[j];
                for (unsigned k = 0; k < N_STREAMS; k++) {
                        Reader *rd = &sim.readers[k];

                        ASSERT_INT_EQ(stream_count_batch(rd->s, d, bs->b[j], &rd->c), 0);
                        expect(&rd->want, rd->selected, d, bs->b[j], &rd->c, false, data_size);
                }
                ring_append_batch(&w, bs->b[j], NULL);
                if (random() % 8 == 0) {
                        sim.b = NULL;
                        ASSERT_INT_EQ(ring_append(&w, &notice, 1, NULL), 1);
                }
                for (unsigned k = 0; k < N_STREAMS; k++)
                        if (random() % sim.readers[k].every == 0)
                                read_some(&sim.readers[k], &w, mem, false);
        }

        for (unsigned k = 0; k < N_STREAMS; k++) {
                Reader *rd = &sim.readers[k];

                read_some(rd, &w, mem, true);
                check_sums(rd);
                /* Without a gap, the very lines a socket stream gets. */
                if (rd->resyncs == 0) {
                        ASSERT_MEM_EQ(rd->got.data, rd->got.len, rd->want.data, rd->want.len);
                        whole++;
                }
                resyncs += rd->resyncs;
                ring_reader_done(&rd->r);
                ring_page_reader_done(&rd->pr);
                jsonbuf_done(&rd->want);
                jsonbuf_done(&rd->got);
                free(rd->page);
                stream_free(rd->s);
        }
        printf("%s, ring of %" PRIu64 " KiB: %zu batches, %u readers whole, %u resyncs, sums exact\n",
               data->name, data_size / 1024, bs->n * PASSES, whole, resyncs);
        free(mem);
}

static void test_dataset(const Data *data) {
        Decoder *d;
        Dataset ds;
        Batches *bs = calloc(1, sizeof(Batches));

        ASSERT(bs);
        dataset_load(&ds, test_datadir, data->name);
        d = dataset_decoder(&ds, true);
        decode_all(&ds, d, bs);
        ASSERT(bs->n > 0);

        test_count_is_offer(data, &ds, d, bs);
        for (unsigned round = 0; round < ROUNDS; round++)
                test_readers(data, &ds, d, bs, (uint64_t) 4096 << (random() % 5));

        for (size_t j = 0; j < bs->n; j++)
                batch_unref(bs->b[j]);
        free(bs);
        decoder_free(d);
        dataset_done(&ds);
}

/* A page that is no page, or counts a reader cannot have: an error, never a read outside it. */
static void test_hostile(void) {
        uint64_t data_size = 4096, mem[4096 / 8 + 64] = {};
        size_t size = ring_page_size(2, data_size, false);
        RingPageWriter pw;
        RingPageReader pr;
        RingPageHeader *h = (RingPageHeader *) mem;

        ASSERT(size <= sizeof(mem));
        ASSERT_INT_EQ(ring_page_writer_init(&pw, mem, size - 1, 2, data_size, false), -EINVAL);
        ASSERT_INT_EQ(ring_page_writer_init(&pw, mem, size, 2, 3000, false), -EINVAL);
        ASSERT_INT_EQ(ring_page_writer_init(&pw, mem, size, 2, data_size, false), 0);
        ASSERT_INT_EQ(ring_page_reader_init(&pr, mem, size - 8, data_size), -EINVAL);
        ASSERT_INT_EQ(ring_page_reader_init(&pr, mem, size, data_size * 2), -EINVAL);
        h->n_cpus = RING_PAGE_CPUS_MAX;
        ASSERT_INT_EQ(ring_page_reader_init(&pr, mem, size, data_size), -EINVAL);
        h->n_cpus = 2;
        h->all = 2;
        ASSERT_INT_EQ(ring_page_reader_init(&pr, mem, size, data_size), -EINVAL);
        h->all = 0;
        h->n_kinds = 3;
        ASSERT_INT_EQ(ring_page_reader_init(&pr, mem, size, data_size), -EINVAL);
        h->n_kinds = RING_PAGE_KINDS;
        ASSERT_INT_EQ(ring_page_reader_init(&pr, mem, size, data_size), 0);

        /* Any bits and counts: reads stay inside; counts below what was got are refused. */
        for (size_t i = sizeof(*h) / 8; i < size / 8; i++)
                mem[i] = ((uint64_t) random() << 32) ^ (uint64_t) random();
        for (uint64_t seq = 0; seq < 10000; seq++)
                (void) ring_page_selected(&pr, seq * 7919);
        h->publish = 5;
        ASSERT_INT_EQ(ring_page_read(&pr, 4), -EAGAIN);
        ASSERT_INT_EQ(ring_page_read(&pr, 5), 0);
        pr.got[3] = pr.before[3] + 1;
        ASSERT_INT_EQ(ring_page_commit(&pr), -EBADMSG);
        h->gen = 1; /* never holds still */
        ASSERT_INT_EQ(ring_page_read(&pr, 5), -EAGAIN);
        ring_page_reader_done(&pr);
}

int main(int argc, char **argv) {
        unsigned seed = argc > 2 ? (unsigned) strtoul(argv[2], NULL, 0) : 20240607;

        if (argc < 2) {
                fprintf(stderr, "usage: test-ring-page DATADIR [SEED]\n");
                return EXIT_FAILURE;
        }
        test_datadir = argv[1];
        printf("seed %u\n", seed);
        srandom(seed);

        test_hostile();
        for (size_t i = 0; i < ELEMENTSOF(datasets); i++)
                test_dataset(&datasets[i]);
        return EXIT_SUCCESS;
}
