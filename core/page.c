/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <errno.h>
#include <string.h>

#include "core/page.h"
#include "util.h"

/* Ring-buffer entry types (kernel/trace/ring_buffer.c): 1..28 are data entries of type_len * 4
 * bytes, 0 a data entry with its length in the next word. */
#define ENTRY_PADDING 29U
#define ENTRY_TIME_EXTEND 30U
#define ENTRY_TIME_STAMP 31U
#define ENTRY_TS_SHIFT 27U
#define ENTRY_DELTA_MAX ((1U << ENTRY_TS_SHIFT) - 1)
/* An absolute time stamp holds the low 59 bits; the page's time stamp has the rest (6.x). */
#define ENTRY_ABS_TS_MASK ((1ULL << 59) - 1)

static inline uint32_t load_u32(const uint8_t *p) {
        uint32_t v;
        memcpy(&v, p, 4);
        return v;
}

static inline void store_u32(uint8_t *p, uint32_t v) {
        memcpy(p, &v, 4);
}

int page_walk_init(PageWalk *w, const void *page, size_t size) {
        const uint8_t *p = page;
        uint64_t length;

        if (size < PAGE_HEADER_SIZE)
                return -EBADMSG;
        memcpy(&w->page_ts, p, 8);
        memcpy(&w->commit, p + 8, 8);
        length = w->commit & PAGE_COMMIT_MASK;
        if (length + PAGE_HEADER_SIZE + (w->commit & PAGE_MISSED_STORED ? 8 : 0) > size)
                return -EBADMSG;
        w->data = p + PAGE_HEADER_SIZE;
        w->end = w->data + length;
        w->ts = w->page_ts;
        return 0;
}

bool page_missed(const PageWalk *w, uint64_t *ret_count) {
        if (!(w->commit & PAGE_MISSED_EVENTS))
                return false;
        if (w->commit & PAGE_MISSED_STORED)
                memcpy(ret_count, w->end, 8);
        else
                *ret_count = UINT64_MAX;
        return true;
}

int page_walk_next(PageWalk *w, PageEntry *e) {
        while (w->data < w->end) {
                const uint8_t *data = w->data, *payload, *next;
                size_t left = (size_t) (w->end - data), len;
                uint32_t header, type, delta;

                if (left < 4)
                        return -EBADMSG;
                header = load_u32(data);
                type = header & 0x1f;
                delta = header >> 5;

                switch (type) {
                case ENTRY_PADDING:
                        /* A zero delta pads the rest of the page; otherwise it is a discarded
                         * entry, whose length follows. */
                        if (delta == 0 || left < 8) {
                                w->data = w->end;
                                return 0;
                        }
                        len = load_u32(data + 4);
                        if (len > left - 4)
                                return -EBADMSG;
                        w->data = data + 4 + len;
                        continue;
                case ENTRY_TIME_EXTEND:
                case ENTRY_TIME_STAMP: {
                        uint64_t v;

                        if (left < 8)
                                return -EBADMSG;
                        v = ((uint64_t) load_u32(data + 4) << ENTRY_TS_SHIFT) | delta;
                        if (type == ENTRY_TIME_EXTEND)
                                w->ts += v;
                        else
                                w->ts = (w->page_ts & ~ENTRY_ABS_TS_MASK) | (v & ENTRY_ABS_TS_MASK);
                        w->data = data + 8;
                        continue;
                }
                case 0:
                        if (left < 8)
                                return -EBADMSG;
                        len = load_u32(data + 4);
                        if (len < 4)
                                return -EBADMSG;
                        len -= 4;
                        payload = data + 8;
                        next = payload + ((len + 3) & ~(size_t) 3);
                        break;
                default:
                        len = (size_t) type * 4;
                        payload = data + 4;
                        next = payload + len;
                        break;
                }
                if (len > (size_t) (w->end - payload))
                        return -EBADMSG;
                /* The payload fits; its alignment may not (the page's last entry). */
                if (next > w->end)
                        next = w->end;
                w->ts += delta;
                w->data = next;
                *e = (PageEntry){
                        .entry = data,
                        .payload = payload,
                        .size = len,
                        .span = (size_t) (next - data),
                        .ts = w->ts,
                };
                return 1;
        }
        return 0;
}

uint64_t page_for_each(const void *page, size_t size, void (*fn)(void *userdata, const PageEntry *e),
                       void *userdata) {
        PageWalk w;
        PageEntry e;
        uint64_t n = 0;

        if (page_walk_init(&w, page, size) < 0) {
                /* A commit word that overstates the length: walk what fits. */
                uint64_t commit;

                if (size < PAGE_HEADER_SIZE)
                        return 0;
                memcpy(&commit, (const uint8_t *) page + 8, 8);
                memcpy(&w.page_ts, page, 8);
                w.commit = (commit & ~(PAGE_COMMIT_MASK | PAGE_MISSED_STORED)) | (size - PAGE_HEADER_SIZE);
                w.data = (const uint8_t *) page + PAGE_HEADER_SIZE;
                w.end = (const uint8_t *) page + size;
                w.ts = w.page_ts;
        }
        while (page_walk_next(&w, &e) > 0) {
                if (fn)
                        fn(userdata, &e);
                n++;
        }
        return n;
}

uint64_t page_records(const void *page, size_t size) {
        return page_for_each(page, size, NULL, NULL);
}

int page_filter(const void *page, size_t size, PageKeep keep, void *userdata, void *out,
                uint64_t *ret_walked) {
        uint8_t *o = out, *w_at = o + PAGE_HEADER_SIZE, *limit;
        uint64_t last_ts, walked = 0, missed = 0, commit;
        bool has_missed;
        PageWalk w;
        PageEntry e;
        int kept = 0, r;

        memset(o, 0, size);
        r = page_walk_init(&w, page, size);
        if (r < 0)
                return r;
        memcpy(o, &w.page_ts, 8);
        has_missed = page_missed(&w, &missed);
        /* The input's data ends where the output's may, the stored count after it. */
        limit = o + PAGE_HEADER_SIZE + (size_t) (w.end - w.data);
        last_ts = w.page_ts;

        while ((r = page_walk_next(&w, &e)) > 0) {
                uint64_t delta;

                walked++;
                if (!keep(userdata, &e))
                        continue;
                /* A time stamp that went backwards (an absolute stamp can) keeps the last one. */
                delta = e.ts > last_ts ? e.ts - last_ts : 0;
                if (delta > ENTRY_DELTA_MAX && kept == 0) {
                        /* The first record kept starts the page: the page's time is its time. A time
                         * extend there would hide the page's loss count from readers, which report
                         * it with the first entry only (libtraceevent's kbuffer). */
                        memcpy(o, &e.ts, 8);
                        delta = 0;
                } else if (delta > ENTRY_DELTA_MAX) {
                        if ((size_t) (limit - w_at) < 8 + e.span) {
                                r = -EBADMSG;
                                break;
                        }
                        store_u32(w_at, ENTRY_TIME_EXTEND | (uint32_t) ((delta & ENTRY_DELTA_MAX) << 5));
                        store_u32(w_at + 4, (uint32_t) (delta >> ENTRY_TS_SHIFT));
                        w_at += 8;
                        delta = 0;
                }
                if ((size_t) (limit - w_at) < e.span) {
                        r = -EBADMSG;
                        break;
                }
                memcpy(w_at, e.entry, e.span);
                store_u32(w_at, (load_u32(e.entry) & 0x1f) | (uint32_t) (delta << 5));
                w_at += e.span;
                last_ts = delta == 0 && e.ts < last_ts ? last_ts : e.ts;
                kept++;
        }

        commit = (uint64_t) (w_at - o - PAGE_HEADER_SIZE) |
                 (w.commit & (PAGE_MISSED_EVENTS | PAGE_MISSED_STORED));
        memcpy(o + 8, &commit, 8);
        if (has_missed && missed != UINT64_MAX)
                memcpy(w_at, &missed, 8);
        if (ret_walked)
                *ret_walked = walked;
        return r < 0 ? r : kept;
}

void page_clear_missed(void *page, size_t size) {
        uint8_t *p = page;
        uint64_t commit;

        if (size < PAGE_HEADER_SIZE)
                return;
        memcpy(&commit, p + 8, 8);
        commit &= ~(PAGE_MISSED_EVENTS | PAGE_MISSED_STORED);
        memcpy(p + 8, &commit, 8);
}

void page_add_missed(void *page, size_t size, uint64_t count) {
        uint8_t *p = page;
        uint64_t commit, length, stored = 0;

        if (count == 0 || size < PAGE_HEADER_SIZE)
                return;
        memcpy(&commit, p + 8, 8);
        length = commit & PAGE_COMMIT_MASK;
        if (length + PAGE_HEADER_SIZE > size)
                return;
        if (commit & PAGE_MISSED_EVENTS) {
                if (!(commit & PAGE_MISSED_STORED))
                        return; /* already a loss of unknown size */
                memcpy(&stored, p + PAGE_HEADER_SIZE + length, 8);
        }
        commit |= PAGE_MISSED_EVENTS;
        if (count != UINT64_MAX && stored <= UINT64_MAX - 1 - count &&
            length + PAGE_HEADER_SIZE + 8 <= size) {
                stored += count;
                memcpy(p + PAGE_HEADER_SIZE + length, &stored, 8);
                commit |= PAGE_MISSED_STORED;
        } else
                commit &= ~PAGE_MISSED_STORED;
        memcpy(p + 8, &commit, 8);
}

void page_build_init(PageBuild *b, void *page, size_t size, uint64_t ts) {
        memset(page, 0, size);
        memcpy(page, &ts, 8);
        *b = (PageBuild){ .page = page, .size = size, .at = (uint8_t *) page + PAGE_HEADER_SIZE, .ts = ts };
}

int page_build_add(PageBuild *b, uint64_t ts, const void *data, size_t len) {
        size_t aligned = (len + 3) & ~(size_t) 3;
        /* Data entries of up to 28 words say their length in the header, longer ones in a word of
         * their own (kernel/trace/ring_buffer.c). */
        size_t need = aligned <= 28 * 4 ? 4 + aligned : 8 + aligned, used;
        uint64_t delta, commit;

        if (PAGE_HEADER_SIZE + need > b->size || aligned == 0)
                return -E2BIG;
        if (ts < b->ts)
                return -ERANGE;
        delta = ts - b->ts;
        /* A time extend holds 59 bits: a longer gap starts a page, which holds 64. */
        if (delta >> (ENTRY_TS_SHIFT + 32) != 0)
                return -ENOSPC;
        if (delta > ENTRY_DELTA_MAX)
                need += 8;
        /* The first entry may take the whole page (as the kernel's largest do; a loss before it is
         * then flagged without its count); the others leave 8 bytes for a count. */
        used = (size_t) (b->at - b->page);
        if (used + need + (b->records > 0 ? 8 : 0) > b->size)
                return -ENOSPC;
        if (delta > ENTRY_DELTA_MAX) {
                store_u32(b->at, ENTRY_TIME_EXTEND | (uint32_t) ((delta & ENTRY_DELTA_MAX) << 5));
                store_u32(b->at + 4, (uint32_t) (delta >> ENTRY_TS_SHIFT));
                b->at += 8;
                delta = 0;
        }
        if (aligned <= 28 * 4) {
                store_u32(b->at, (uint32_t) (aligned / 4) | (uint32_t) delta << 5);
                b->at += 4;
        } else {
                store_u32(b->at, (uint32_t) delta << 5);
                store_u32(b->at + 4, (uint32_t) aligned + 4);
                b->at += 8;
        }
        memcpy(b->at, data, len);
        b->at += aligned;
        b->ts = ts;
        b->records++;
        commit = (uint64_t) (b->at - b->page - PAGE_HEADER_SIZE);
        memcpy(b->page + 8, &commit, 8);
        return 0;
}
