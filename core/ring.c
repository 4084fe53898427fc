/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The shared-memory ring (ring.h): the writer's appends and publishes, the readers' copy, check
 * and resync.
 *
 * Ordering, as the kernel's perf ring pairs its barriers (tools/include/linux/ring_buffer.h):
 * the writer stores a new oldest, then a release fence, then overwrites the bytes oldest freed;
 * a reader copies bytes, then an acquire fence, then loads oldest. A reader that copied any
 * overwritten byte therefore sees the new oldest, past where its copy started. The writer writes
 * entries, then stores head with release; a reader loads head with acquire before copying up to
 * it. The bytes of entries are copied with plain memcpy on both sides, as a seqlock's data are:
 * the check afterwards, not the copy, decides whether they are used.
 */

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/ring.h"

/* Larger rings would need entries over 4 GiB apart in a u32 size; 1 GiB is the planned maximum. */
#define RING_DATA_SIZE_MAX ((uint64_t) 1 << 32)
/* How often a reader tries to find the header's fields holding still before it gives up. */
#define RING_SNAPSHOT_TRIES 10000

#define ring_load(p) __atomic_load_n((p), __ATOMIC_RELAXED)
#define ring_store(p, v) __atomic_store_n((p), (v), __ATOMIC_RELAXED)

static bool data_size_ok(uint64_t data_size) {
        return data_size >= RING_DATA_SIZE_MIN && data_size <= RING_DATA_SIZE_MAX &&
               (data_size & (data_size - 1)) == 0;
}

static uint64_t entry_size(const RingItem *it) {
        uint64_t n = sizeof(RingEntry) + (it->type == RING_LOST ? sizeof(RingLost) : 0) + it->line_len;

        return (n + RING_ALIGN - 1) & ~(uint64_t) (RING_ALIGN - 1);
}

/* ---- writer ---- */

int ring_writer_init(RingWriter *w, void *mem, size_t size, uint32_t variant, uint32_t n_cpus,
                     uint32_t clock) {
        RingHeader *h = mem;

        if (!mem || (uintptr_t) mem % RING_ALIGN != 0 || size <= RING_HEADER_SIZE ||
            !data_size_ok(size - RING_HEADER_SIZE))
                return -EINVAL;

        /* The data area is left alone: its pages are only touched (allocated) as entries reach
         * them. */
        memset(h, 0, sizeof(*h));
        memcpy(h->magic, RING_MAGIC, sizeof(h->magic));
        h->version = RING_VERSION;
        h->header_size = RING_HEADER_SIZE;
        h->data_size = size - RING_HEADER_SIZE;
        h->variant = variant;
        h->n_cpus = n_cpus;
        h->clock = clock;

        *w = (RingWriter){
                .header = h,
                .data = (uint8_t *) mem + RING_HEADER_SIZE,
                .data_size = size - RING_HEADER_SIZE,
        };
        /* Readers that map the ring now see a complete header. */
        __atomic_thread_fence(__ATOMIC_RELEASE);
        return 0;
}

/* The padding an entry of size needs before it at position pos: the rest of the data area when
 * it does not fit there. */
static uint64_t pad_before(const RingWriter *w, uint64_t pos, uint64_t size) {
        uint64_t room = w->data_size - (pos & (w->data_size - 1));

        return size > room ? room : 0;
}

/* Moves oldest over whole entries until writing up to end rewrites nothing from oldest on, and
 * makes that visible before any byte is rewritten. The entries walked are the writer's own. */
static void make_room(RingWriter *w, uint64_t end) {
        uint64_t mask = w->data_size - 1;
        bool moved = false;

        while (end - w->oldest > w->data_size) {
                RingEntry e;

                memcpy(&e, w->data + (w->oldest & mask), 8);
                if (e.type != RING_PAD)
                        w->oldest_seq++;
                w->oldest += e.size;
                moved = true;
        }
        if (!moved)
                return;
        ring_gen_begin(&w->header->gen);
        ring_store(&w->header->oldest, w->oldest);
        ring_store(&w->header->oldest_seq, w->oldest_seq);
        ring_gen_end(&w->header->gen);
        /* (A): the new oldest is visible before the bytes it freed change. */
        __atomic_thread_fence(__ATOMIC_RELEASE);
}

static void write_pad(RingWriter *w, uint64_t pos, uint64_t size) {
        RingEntry e = { .size = (uint32_t) size, .type = RING_PAD };

        memcpy(w->data + (pos & (w->data_size - 1)), &e, 8);
}

static void write_entry(RingWriter *w, uint64_t pos, uint64_t size, const RingItem *it) {
        uint8_t *p = w->data + (pos & (w->data_size - 1));
        RingEntry e = {
                .size = (uint32_t) size,
                .type = it->type,
                .kind = it->kind,
                .event_id = it->event_id,
                .cpu = it->cpu,
                .pid = it->pid,
                .seq = w->head_seq,
                .ts = it->ts,
                .line_len = it->line_len,
                .flags = it->flags,
        };
        size_t n = sizeof(e);

        memcpy(p, &e, sizeof(e));
        if (it->type == RING_LOST) {
                RingLost l = { .lost = it->lost, .lost_base = it->lost_base };

                memcpy(p + n, &l, sizeof(l));
                n += sizeof(l);
        }
        memcpy(p + n, it->line, it->line_len);
        n += it->line_len;
        memset(p + n, 0, size - n);
}

static void publish(RingWriter *w, uint64_t start, uint64_t start_seq) {
        RingHeader *h = w->header;

        w->publish++;
        ring_gen_begin(&h->gen);
        /* (B): the entries are visible before the head that covers them. */
        __atomic_store_n(&h->head, w->head, __ATOMIC_RELEASE);
        ring_store(&h->head_seq, w->head_seq);
        ring_store(&h->last_batch, start);
        ring_store(&h->last_batch_seq, start_seq);
        ring_store(&h->publish, w->publish);
        ring_gen_end(&h->gen);
}

typedef void (*ItemAtFn)(const void *src, size_t i, RingItem *ret);

/* Appends items [i, n) up to half the ring, returns where it stopped. */
static size_t append_some(RingWriter *w, const void *src, size_t i, size_t n, ItemAtFn at, size_t *written,
                          size_t *refused) {
        uint64_t max = ring_entry_max(w->data_size), start = w->head, start_seq = w->head_seq;
        uint64_t end = start;
        size_t j, k, n_refused = 0;
        RingItem it;

        /* Sized first, so that oldest moves once, before anything is written. */
        for (j = i; j < n; j++) {
                uint64_t size, pad;

                at(src, j, &it);
                size = entry_size(&it);
                if (size > max)
                        continue;
                pad = pad_before(w, end, size);
                if (end > start && end + pad + size - start > w->data_size / 2)
                        break;
                end += pad + size;
        }
        if (end > start)
                make_room(w, end);

        for (k = i; k < j; k++) {
                uint64_t size, pad;

                at(src, k, &it);
                size = entry_size(&it);
                if (size > max) {
                        n_refused++;
                        continue;
                }
                pad = pad_before(w, w->head, size);
                if (pad > 0) {
                        write_pad(w, w->head, pad);
                        w->head += pad;
                }
                write_entry(w, w->head, size, &it);
                w->head += size;
                w->head_seq++;
                (*written)++;
        }
        *refused += n_refused;
        if (end > start) {
                if (w->on_publish)
                        w->on_publish(w->userdata, &(RingPublish){
                                                           .publish = w->publish + 1,
                                                           .seq = start_seq,
                                                           .end_seq = w->head_seq,
                                                           .first = i,
                                                           .end = j,
                                                           .refused = n_refused,
                                                   });
                publish(w, start, start_seq);
        }
        return j;
}

static size_t append_items(RingWriter *w, const void *src, size_t n, ItemAtFn at, size_t *ret_refused) {
        size_t i = 0, written = 0, refused = 0;

        while (i < n)
                i = append_some(w, src, i, n, at, &written, &refused);
        if (ret_refused)
                *ret_refused = refused;
        return written;
}

static void item_of_array(const void *src, size_t i, RingItem *ret) {
        *ret = ((const RingItem *) src)[i];
}

size_t ring_append(RingWriter *w, const RingItem *items, size_t n_items, size_t *ret_refused) {
        return append_items(w, items, n_items, item_of_array, ret_refused);
}

static void item_of_batch(const void *src, size_t i, RingItem *ret) {
        const Batch *b = src;
        const Record *rec = &b->records[i];

        *ret = (RingItem){
                .type = rec->kind == RECORD_EVENT ? RING_EVENT : RING_LOST,
                .kind = rec->kind,
                .event_id = rec->event_id,
                .cpu = rec->cpu,
                .pid = rec->pid,
                .ts = rec->ts,
                .lost = rec->lost,
                .lost_base = rec->lost_base,
                .line = b->buf.data + rec->offset,
                .line_len = rec->length,
        };
}

size_t ring_append_batch(RingWriter *w, const Batch *b, size_t *ret_refused) {
        return append_items(w, b, b->n_records, item_of_batch, ret_refused);
}

static void item_of_batch_variant(const void *src, size_t i, RingItem *ret) {
        const Batch *b = src;
        const Record *rec = &b->records[i];

        item_of_batch(src, i, ret);
        if (rec->kind == RECORD_EVENT && rec->print_length > 0) {
                ret->line = b->buf.data + rec->print_offset;
                ret->line_len = rec->print_length;
        }
}

size_t ring_append_batch_variant(RingWriter *w, const Batch *b, size_t *ret_refused) {
        return append_items(w, b, b->n_records, item_of_batch_variant, ret_refused);
}

bool ring_batch_entry_fits(uint64_t data_size, const Batch *b, size_t i) {
        RingItem it;

        item_of_batch(b, i, &it);
        return entry_size(&it) <= ring_entry_max(data_size);
}

void ring_writer_set_state(RingWriter *w, uint32_t state) {
        __atomic_store_n(&w->header->state, state, __ATOMIC_RELEASE);
}

/* ---- reader ---- */

typedef struct Snapshot {
        uint64_t head, head_seq, oldest, last_batch, last_batch_seq, publish;
} Snapshot;

/* The header's changing fields from one update (gen even and unchanged around the loads). */
static int snapshot(const RingHeader *h, Snapshot *ret) {
        for (unsigned i = 0; i < RING_SNAPSHOT_TRIES; i++) {
                uint32_t gen = __atomic_load_n(&h->gen, __ATOMIC_ACQUIRE);

                if (gen & 1)
                        continue;
                *ret = (Snapshot){
                        .head = ring_load(&h->head),
                        .head_seq = ring_load(&h->head_seq),
                        .oldest = ring_load(&h->oldest),
                        .last_batch = ring_load(&h->last_batch),
                        .last_batch_seq = ring_load(&h->last_batch_seq),
                        .publish = ring_load(&h->publish),
                };
                __atomic_thread_fence(__ATOMIC_ACQUIRE);
                if (ring_load(&h->gen) == gen)
                        return 0;
        }
        return -EAGAIN;
}

int ring_reader_init(RingReader *r, const void *mem, size_t size) {
        const RingHeader *h = mem;
        uint64_t data_size;
        Snapshot s;
        int k;

        *r = (RingReader){};
        if (!mem || (uintptr_t) mem % RING_ALIGN != 0 || size < RING_HEADER_SIZE)
                return -EINVAL;
        data_size = ring_load(&h->data_size);
        if (memcmp(h->magic, RING_MAGIC, sizeof(h->magic)) != 0 || ring_load(&h->version) != RING_VERSION ||
            ring_load(&h->header_size) != RING_HEADER_SIZE || !data_size_ok(data_size) ||
            data_size > size - RING_HEADER_SIZE)
                return -EINVAL;
        k = snapshot(h, &s);
        if (k < 0)
                return k;

        /* Room for two of the largest entries and their positions, so that a read always moves. */
        r->buf_size = (size_t) (data_size / 4);
        r->buf = malloc(r->buf_size);
        if (!r->buf)
                return -ENOMEM;
        r->data_size = data_size;
        ring_reader_seek(r, s.head, s.head_seq);
        return 0;
}

void ring_reader_done(RingReader *r) {
        free(r->buf);
        *r = (RingReader){};
}

void ring_reader_set_page(RingReader *r, RingPageReader *page) {
        r->page = page;
}

void ring_reader_seek(RingReader *r, uint64_t pos, uint64_t seq) {
        r->pos = pos & ~(uint64_t) (RING_ALIGN - 1);
        r->seq = seq;
        r->copied = 0;
}

/* Whether e, read at pos (room bytes before the end of the data area, head - pos after it), can
 * be the next entry, of sequence number seq. Every size the copy uses is checked here. */
static bool entry_ok(const RingReader *r, const RingEntry *e, uint64_t room, uint64_t left, uint64_t seq) {
        uint64_t fixed = sizeof(RingEntry) + (e->type == RING_LOST ? sizeof(RingLost) : 0);

        if (e->size < 8 || e->size % RING_ALIGN != 0 || e->size > room || e->size > left)
                return false;
        if (e->type == RING_PAD)
                return e->size == room;
        return e->type >= RING_EVENT && e->type < RING_PAD && e->size <= ring_entry_max(r->data_size) &&
               e->size >= fixed && e->line_len <= e->size - fixed && e->seq == seq;
}

int ring_copy(RingReader *r, const void *mem) {
        const uint8_t *data = (const uint8_t *) mem + RING_HEADER_SIZE;
        uint64_t mask = r->data_size - 1, p = r->pos, seq = r->seq, head;
        size_t out = 0;
        bool bad = false;

        head = __atomic_load_n(&((const RingHeader *) mem)->head, __ATOMIC_ACQUIRE);
        /* A reader a whole ring behind finds bytes rewritten since: ring_validate() says so. */
        if (head < p || head - p > r->data_size)
                bad = true;
        while (!bad && p < head) {
                uint64_t off = p & mask, room = r->data_size - off;
                RingEntry e = {};

                memcpy(&e, data + off, room < sizeof(e) ? 8 : sizeof(e));
                if (!entry_ok(r, &e, room, head - p, seq)) {
                        bad = true;
                        break;
                }
                if (e.type == RING_PAD) {
                        p += e.size;
                        continue;
                }
                /* Read before ring_validate()'s fence, as the entry: a bit reused for a newer
                 * entry means this one was overwritten. */
                if (r->page && (e.type == RING_EVENT || e.type == RING_LOST) &&
                    !ring_page_selected(r->page, e.seq)) {
                        p += e.size;
                        seq++;
                        continue;
                }
                if (out + sizeof(p) + e.size > r->buf_size)
                        break;
                /* The header checked, not a second read of it, goes with the entry. */
                memcpy(r->buf + out, &p, sizeof(p));
                memcpy(r->buf + out + sizeof(p), &e, sizeof(e));
                memcpy(r->buf + out + sizeof(p) + sizeof(e), data + off + sizeof(e), e.size - sizeof(e));
                out += sizeof(p) + e.size;
                p += e.size;
                seq++;
        }
        r->copied = out;
        r->copy_end = p;
        r->copy_seq = seq;
        r->copy_bad = bad;
        return 0;
}

int ring_validate(RingReader *r, const void *mem) {
        uint64_t oldest;

        /* (C), pairing with make_room()'s (A). Positions rather than oldest_seq: a PAD takes no
         * seq, so a reader at a PAD has the seq of the entry after it, which may already be
         * oldest while the PAD's bytes are rewritten. */
        __atomic_thread_fence(__ATOMIC_ACQUIRE);
        oldest = ring_load(&((const RingHeader *) mem)->oldest);
        if (oldest > r->pos) {
                r->copied = 0;
                return RING_READ_RESYNC;
        }
        if (r->copy_bad) {
                r->copied = 0;
                return -EBADMSG;
        }
        return 0;
}

int ring_deliver(RingReader *r, RingDeliverFn deliver, void *userdata) {
        size_t o = 0;
        int n = 0;

        while (o < r->copied) {
                const RingEntry *e = (const RingEntry *) (r->buf + o + sizeof(uint64_t));
                const uint8_t *after = (const uint8_t *) (e + 1);
                uint64_t count = 0;
                RingItem it = {
                        .type = e->type,
                        .kind = e->kind,
                        .event_id = e->event_id,
                        .cpu = e->cpu,
                        .pid = e->pid,
                        .flags = e->flags,
                        .seq = e->seq,
                        .ts = e->ts,
                        .line_len = e->line_len,
                };
                int k;

                if (e->type == RING_LOST) {
                        RingLost l;

                        memcpy(&l, after, sizeof(l));
                        it.lost = l.lost;
                        it.lost_base = l.lost_base;
                        after += sizeof(l);
                }
                it.line = (const char *) after;
                if (r->page && (e->type == RING_EVENT || e->type == RING_LOST)) {
                        count = ring_page_share(r->page, &it);
                        if (count == 0) {
                                o += sizeof(uint64_t) + e->size;
                                continue;
                        }
                        if (e->type == RING_LOST && count != it.lost) {
                                it.lost = count;
                                it.line = NULL;
                                it.line_len = 0;
                        }
                }
                k = deliver(userdata, &it);
                if (k < 0) {
                        /* Not consumed: a later read starts with it. */
                        memcpy(&r->pos, r->buf + o, sizeof(r->pos));
                        r->seq = e->seq;
                        r->copied = 0;
                        return k;
                }
                if (r->page && (e->type == RING_EVENT || e->type == RING_LOST))
                        ring_page_got(r->page, &it, count);
                o += sizeof(uint64_t) + e->size;
                n++;
        }
        r->pos = r->copy_end;
        r->seq = r->copy_seq;
        r->copied = 0;
        return n;
}

int ring_read(RingReader *r, const void *mem, RingDeliverFn deliver, void *userdata, size_t *ret_n) {
        int k;

        if (ret_n)
                *ret_n = 0;
        ring_copy(r, mem);
        k = ring_validate(r, mem);
        if (k != 0)
                return k;
        k = ring_deliver(r, deliver, userdata);
        if (k < 0)
                return k;
        if (ret_n)
                *ret_n = (size_t) k;
        return 0;
}

/* The header from one update and, with a page, the page's counts of the same publish. */
static int resync_snapshot(RingReader *r, const void *mem, Snapshot *ret) {
        for (unsigned i = 0; i < RING_SNAPSHOT_TRIES; i++) {
                int k = snapshot(mem, ret);

                if (k < 0 || !r->page)
                        return k;
                /* The page is written before the header shows the publish: a page of a later one
                 * means the header moved on meanwhile. */
                k = ring_page_read(r->page, ret->publish);
                if (k != -EAGAIN)
                        return k;
        }
        return -EAGAIN;
}

int64_t ring_resync(RingReader *r, const void *mem) {
        uint64_t skipped;
        Snapshot s;
        int k;

        k = resync_snapshot(r, mem, &s);
        if (k < 0)
                return k;
        /* The newest publish is whole (at most half the ring, written after the one before) and
         * lies after the reader, who was overtaken; anything else is a damaged header. */
        if (s.last_batch % RING_ALIGN != 0 || s.last_batch > s.head ||
            s.head - s.last_batch > r->data_size || s.last_batch < s.oldest || s.last_batch <= r->pos ||
            s.last_batch_seq > s.head_seq || s.last_batch_seq < r->seq)
                return -EBADMSG;
        if (r->page) {
                k = ring_page_commit(r->page);
                if (k < 0)
                        return k;
        }
        skipped = s.last_batch_seq - r->seq;
        r->pos = s.last_batch;
        r->seq = s.last_batch_seq;
        r->copied = 0;
        r->skipped += skipped;
        return (int64_t) skipped;
}

uint32_t ring_state(const void *mem) {
        return __atomic_load_n(&((const RingHeader *) mem)->state, __ATOMIC_ACQUIRE);
}
