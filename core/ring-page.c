/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * A stream's reader page (ring.h): which entries of the ring the stream selects and how many of
 * each kind, per CPU, it selected before and after the newest publish. The writer fills it at each
 * publish from stream_count_batch(), the one decision stream_offer_batch() makes too; a reader
 * that fell behind subtracts what it got from the counts before the newest publish, where it
 * starts again: its loss, exact by CPU and cause.
 */

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/ring.h"
#include "util.h"

#define page_load(p) __atomic_load_n((p), __ATOMIC_RELAXED)
#define page_store(p, v) __atomic_store_n((p), (v), __ATOMIC_RELAXED)

/* How often a reader tries to find the page holding still before it gives up. */
#define RING_PAGE_TRIES 1000

/* ---- writer ---- */

/* The ring's sizes (a power of two from RING_DATA_SIZE_MIN): a bitmap of whole bytes. */
static bool data_size_ok(uint64_t data_size) {
        return data_size >= RING_DATA_SIZE_MIN && (data_size & (data_size - 1)) == 0;
}

int ring_page_writer_init(RingPageWriter *pw, void *mem, size_t size, uint32_t n_cpus, uint64_t data_size,
                          bool all) {
        RingPageHeader *h = mem;
        size_t need;

        if (!mem || (uintptr_t) mem % 8 != 0 || n_cpus == 0 || n_cpus > RING_PAGE_CPUS_MAX ||
            !data_size_ok(data_size))
                return -EINVAL;
        need = ring_page_size(n_cpus, data_size, all);
        if (size < need)
                return -EINVAL;

        memset(mem, 0, need);
        memcpy(h->magic, RING_PAGE_MAGIC, sizeof(h->magic));
        h->version = RING_PAGE_VERSION;
        h->n_cpus = n_cpus;
        h->n_kinds = RING_PAGE_KINDS;
        h->all = all;
        h->n_bits = all ? 0 : ring_page_bits(data_size);
        h->size = need;
        *pw = (RingPageWriter){
                .header = h,
                .cpus = (RingPageCpu *) (h + 1),
                .bits = all ? NULL : (uint8_t *) mem + sizeof(*h) + (size_t) n_cpus * sizeof(RingPageCpu),
                .n_cpus = n_cpus,
                .n_bits = h->n_bits,
                .data_size = data_size,
                .all = all,
        };
        __atomic_thread_fence(__ATOMIC_RELEASE);
        return 0;
}

void ring_page_set_base(RingPageWriter *pw, unsigned cpu, uint64_t overrun, uint64_t dropped) {
        if (cpu >= pw->n_cpus)
                return;
        pw->cpus[cpu].base[0] = overrun;
        pw->cpus[cpu].base[1] = dropped;
}

static void mark_dirty(RingPageWriter *pw, uint32_t cpu) {
        for (unsigned i = 0; i < pw->n_dirty; i++)
                if (pw->dirty[i] == cpu)
                        return;
        if (pw->n_dirty < RING_PAGE_DIRTY_MAX)
                pw->dirty[pw->n_dirty++] = cpu;
        else
                pw->all_dirty = true;
}

static void sync_cpu(RingPageCpu *c) {
        for (unsigned k = 0; k < RING_PAGE_KINDS; k++)
                page_store(&c->before[k], c->after[k]);
        page_store(&c->ts_before, c->ts_after);
}

/* Before this publish's counts: the CPUs the last one counted catch up, so that before is the
 * state after the publish before this one, on every CPU. */
static void sync_dirty(RingPageWriter *pw) {
        if (pw->all_dirty)
                for (uint32_t cpu = 0; cpu < pw->n_cpus; cpu++)
                        sync_cpu(&pw->cpus[cpu]);
        else
                for (unsigned i = 0; i < pw->n_dirty; i++)
                        sync_cpu(&pw->cpus[pw->dirty[i]]);
        pw->n_dirty = 0;
        pw->all_dirty = false;
}

/* Sets (on) or clears the bits of seqs [seq, end), a byte at a time where it can. */
static void fill_bits(RingPageWriter *pw, uint64_t seq, uint64_t end, bool on) {
        if (end - seq >= pw->n_bits) {
                memset(pw->bits, on ? 0xff : 0, pw->n_bits / 8);
                return;
        }
        for (; seq < end && seq % 8 != 0; seq++)
                if (on)
                        pw->bits[(seq % pw->n_bits) / 8] |= (uint8_t) (1U << (seq % 8));
                else
                        pw->bits[(seq % pw->n_bits) / 8] &= (uint8_t) ~(1U << (seq % 8));
        while (end - seq >= 8) {
                uint64_t at = (seq % pw->n_bits) / 8;
                /* n_bits is a multiple of 8: whole bytes never wrap mid-way. */
                uint64_t n = MIN((end - seq) / 8, pw->n_bits / 8 - at);

                memset(pw->bits + at, on ? 0xff : 0, n);
                seq += n * 8;
        }
        for (; seq < end; seq++)
                if (on)
                        pw->bits[(seq % pw->n_bits) / 8] |= (uint8_t) (1U << (seq % 8));
                else
                        pw->bits[(seq % pw->n_bits) / 8] &= (uint8_t) ~(1U << (seq % 8));
}

/* Clears the bits of seqs [seq, end): they may still say what older entries were. */
static void clear_bits(RingPageWriter *pw, uint64_t seq, uint64_t end) {
        fill_bits(pw, seq, end, false);
}

static void count_record(RingPageWriter *pw, uint64_t seq, const Record *rec, uint64_t n) {
        uint32_t cpu = ring_page_cpu(pw->n_cpus, rec->cpu);
        RingPageCpu *c = &pw->cpus[cpu];
        unsigned kind = ring_page_kind(rec->kind == RECORD_EVENT ? RING_EVENT : RING_LOST, rec->kind);

        page_store(&c->after[kind], c->after[kind] + n);
        page_store(&c->ts_after, rec->ts);
        mark_dirty(pw, cpu);
        if (!pw->all)
                pw->bits[(seq % pw->n_bits) / 8] |= (uint8_t) (1U << (seq % 8));
}

/* A whole batch of one CPU's events without losses or refusals: its counts at once. */
static void count_all_events(RingPageWriter *pw, const RingPublish *p, const Batch *b) {
        const Record *last = &b->records[p->end - 1];
        uint32_t cpu = ring_page_cpu(pw->n_cpus, last->cpu);
        RingPageCpu *c = &pw->cpus[cpu];

        page_store(&c->after[0], c->after[0] + (p->end - p->first));
        page_store(&c->ts_after, last->ts);
        mark_dirty(pw, cpu);
        if (!pw->all)
                fill_bits(pw, p->seq, p->end_seq, true);
}

/* With refusals, or every record taken with its losses: record by record, in seq order. */
static void count_each(RingPageWriter *pw, const RingPublish *p, const Batch *b, const StreamCount *c) {
        uint64_t seq = p->seq;
        size_t k = 0;

        while (!c->all && k < c->n && c->index[k] < p->first)
                k++;
        for (size_t i = p->first; i < p->end; i++) {
                const Record *rec = &b->records[i];
                bool taken = c->all || (k < c->n && c->index[k] == i);
                uint64_t n = c->all ? (rec->kind == RECORD_EVENT ? 1 : rec->lost) : taken ? c->count[k] : 0;

                if (!c->all && taken)
                        k++;
                if (p->refused > 0 && !ring_batch_entry_fits(pw->data_size, b, i))
                        continue;
                if (taken)
                        count_record(pw, seq, rec, n);
                seq++;
        }
}

void ring_page_publish(RingPageWriter *pw, const RingPublish *p, const Batch *b, const StreamCount *c) {
        ring_gen_begin(&pw->header->gen);
        sync_dirty(pw);
        if (!pw->all)
                clear_bits(pw, p->seq, p->end_seq);
        if (b && c && p->end > p->first) {
                if (c->all && b->n_lost == 0 && p->refused == 0)
                        count_all_events(pw, p, b);
                else if (c->all || p->refused > 0)
                        count_each(pw, p, b, c);
                else
                        for (size_t k = 0; k < c->n; k++) {
                                size_t i = c->index[k];

                                if (i < p->first)
                                        continue;
                                if (i >= p->end)
                                        break;
                                count_record(pw, p->seq + (i - p->first), &b->records[i], c->count[k]);
                        }
        }
        page_store(&pw->header->publish, p->publish);
        ring_gen_end(&pw->header->gen);
}

/* ---- reader ---- */

int ring_page_reader_init(RingPageReader *pr, const void *mem, size_t size, uint64_t data_size) {
        const RingPageHeader *h = mem;
        const RingPageCpu *cpus = (const RingPageCpu *) (h + 1);
        uint32_t n_cpus, all;
        size_t n;

        *pr = (RingPageReader){};
        if (!mem || (uintptr_t) mem % 8 != 0 || size < sizeof(*h) || !data_size_ok(data_size))
                return -EINVAL;
        __atomic_thread_fence(__ATOMIC_ACQUIRE);
        n_cpus = page_load(&h->n_cpus);
        all = page_load(&h->all);
        if (memcmp(h->magic, RING_PAGE_MAGIC, sizeof(h->magic)) != 0 ||
            page_load(&h->version) != RING_PAGE_VERSION || page_load(&h->n_kinds) != RING_PAGE_KINDS ||
            n_cpus == 0 || n_cpus > RING_PAGE_CPUS_MAX || all > 1 ||
            page_load(&h->n_bits) != (all ? 0 : ring_page_bits(data_size)) ||
            ring_page_size(n_cpus, data_size, all) > size)
                return -EINVAL;

        n = (size_t) n_cpus * RING_PAGE_KINDS;
        pr->base = calloc((size_t) n_cpus * 2, sizeof(uint64_t));
        pr->got = calloc(n, sizeof(uint64_t));
        pr->lost = calloc(n, sizeof(uint64_t));
        pr->before = calloc(n, sizeof(uint64_t));
        pr->lost_ts = calloc(n_cpus, sizeof(uint64_t));
        pr->ts_before = calloc(n_cpus, sizeof(uint64_t));
        if (!pr->base || !pr->got || !pr->lost || !pr->before || !pr->lost_ts || !pr->ts_before) {
                ring_page_reader_done(pr);
                return -ENOMEM;
        }
        /* The base is set before the page is handed over, and read once. */
        for (uint32_t cpu = 0; cpu < n_cpus; cpu++) {
                pr->base[cpu * 2] = page_load(&cpus[cpu].base[0]);
                pr->base[cpu * 2 + 1] = page_load(&cpus[cpu].base[1]);
        }
        pr->mem = mem;
        pr->n_cpus = n_cpus;
        pr->all = all;
        pr->n_bits = all ? 0 : ring_page_bits(data_size);
        return 0;
}

void ring_page_reader_done(RingPageReader *pr) {
        free(pr->base);
        free(pr->got);
        free(pr->lost);
        free(pr->before);
        free(pr->lost_ts);
        free(pr->ts_before);
        *pr = (RingPageReader){};
}

bool ring_page_selected(const RingPageReader *pr, uint64_t seq) {
        const uint8_t *bits;

        if (pr->all)
                return true;
        bits = pr->mem + sizeof(RingPageHeader) + (size_t) pr->n_cpus * sizeof(RingPageCpu);
        return page_load(&bits[(seq % pr->n_bits) / 8]) & (1U << (seq % 8));
}

/* The same rule as stream_loss_share(), from the base the page gave. */
uint64_t ring_page_share(const RingPageReader *pr, const RingItem *it) {
        if (it->type != RING_LOST)
                return 1;
        if ((it->kind != TPD_LOST_OVERRUN && it->kind != TPD_LOST_DROPPED) || it->cpu >= pr->n_cpus)
                return it->lost;
        return loss_after_base(it->lost, it->lost_base,
                               pr->base[it->cpu * 2 + (it->kind == TPD_LOST_DROPPED)]);
}

void ring_page_got(RingPageReader *pr, const RingItem *it, uint64_t n) {
        pr->got[(size_t) ring_page_cpu(pr->n_cpus, it->cpu) * RING_PAGE_KINDS +
                ring_page_kind(it->type, it->kind)] += n;
}

int ring_page_read(RingPageReader *pr, uint64_t publish) {
        const RingPageHeader *h = (const RingPageHeader *) pr->mem;
        const RingPageCpu *cpus = (const RingPageCpu *) (h + 1);

        for (unsigned i = 0; i < RING_PAGE_TRIES; i++) {
                uint32_t gen = __atomic_load_n(&h->gen, __ATOMIC_ACQUIRE);
                uint64_t p;

                if (gen & 1)
                        continue;
                p = page_load(&h->publish);
                for (uint32_t cpu = 0; cpu < pr->n_cpus; cpu++) {
                        for (unsigned k = 0; k < RING_PAGE_KINDS; k++)
                                pr->before[(size_t) cpu * RING_PAGE_KINDS + k] =
                                        page_load(&cpus[cpu].before[k]);
                        pr->ts_before[cpu] = page_load(&cpus[cpu].ts_before);
                }
                __atomic_thread_fence(__ATOMIC_ACQUIRE);
                if (page_load(&h->gen) == gen)
                        return p == publish ? 0 : -EAGAIN;
        }
        return -EAGAIN;
}

int ring_page_commit(RingPageReader *pr) {
        size_t n = (size_t) pr->n_cpus * RING_PAGE_KINDS;

        for (size_t i = 0; i < n; i++)
                if (pr->before[i] < pr->got[i])
                        return -EBADMSG;
        memset(pr->lost, 0, n * sizeof(uint64_t));
        for (uint32_t cpu = 0; cpu < pr->n_cpus; cpu++) {
                uint64_t *before = pr->before + (size_t) cpu * RING_PAGE_KINDS;
                uint64_t *got = pr->got + (size_t) cpu * RING_PAGE_KINDS;
                uint64_t *lost = pr->lost + (size_t) cpu * RING_PAGE_KINDS;

                /* An event missed is the client's loss; a kernel's loss missed keeps its cause. */
                for (unsigned k = 0; k < RING_PAGE_KINDS; k++)
                        lost[k == 0 ? TPD_LOST_CLIENT : k] += before[k] - got[k];
                pr->lost_ts[cpu] = pr->ts_before[cpu];
        }
        memcpy(pr->got, pr->before, n * sizeof(uint64_t));
        return 0;
}
