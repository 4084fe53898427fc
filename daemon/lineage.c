/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/page.h"
#include "lineage.h"
#include "log.h"
#include "util.h"

int lineage_init(Lineage *l, unsigned n_cpus) {
        if (!l->queue) {
                l->queue = calloc(n_cpus, sizeof(LineageQueue));
                if (!l->queue)
                        return -ENOMEM;
                l->n_cpus = n_cpus;
        }
        return 0;
}

static void lineage_forget(Lineage *l, size_t from, size_t to) {
        for (size_t i = from; i < to; i++)
                free(l->pending[i].path);
}

void lineage_trim(Lineage *l) {
        for (unsigned c = 0; l->queue && c < l->n_cpus; c++) {
                free(l->queue[c].data);
                free(l->queue[c].newest);
                l->queue[c] = (LineageQueue){};
        }
        l->queued = 0;
        lineage_forget(l, 0, l->n_pending);
        l->pending = mfree(l->pending);
        l->n_pending = l->pending_cap = 0;
        l->strip = mfree(l->strip);
}

void lineage_done(Lineage *l) {
        lineage_trim(l);
        free(l->queue);
        *l = (Lineage){};
}

int lineage_enqueue(Lineage *l, unsigned cpu, const void *pages, size_t n_pages, size_t page_size) {
        LineageQueue *q;
        size_t size = n_pages * page_size, total;

        if (cpu >= l->n_cpus)
                return -EINVAL;
        q = &l->queue[cpu];
        total = (q->size + size) / page_size;
        if (q->size + size > q->cap) {
                size_t cap = MAX(q->size + size, q->cap * 2);
                uint8_t *d = realloc(q->data, cap);

                if (!d)
                        return -ENOMEM;
                q->data = d;
                q->cap = cap;
        }
        if (ARRAY_RESERVE(q->newest, q->newest_cap, total) < 0)
                return -ENOMEM;
        memcpy(q->data + q->size, pages, size);
        q->size += size;
        q->fresh = true;
        l->queued += size;
        return 0;
}

/* Takes path over. */
static void lineage_note(Lineage *l, uint64_t ts, int32_t parent, int32_t pid, char *path, uint64_t id) {
        if (ARRAY_RESERVE(l->pending, l->pending_cap, l->n_pending + 1) < 0) {
                log_debug("No memory to follow a fork, an exit or a move.");
                free(path);
                return;
        }
        l->pending[l->n_pending++] =
                (LineageChange){ .ts = ts, .parent = parent, .pid = pid, .path = path, .id = id };
}

static int32_t payload_s32(const PageEntry *e, size_t offset) {
        int32_t v;

        memcpy(&v, e->payload + offset, sizeof(v));
        return v;
}

/* The event id of a record, or -1 when it has none. */
static int entry_id(const PageEntry *e) {
        uint16_t id;

        if (e->size < sizeof(id))
                return -1;
        memcpy(&id, e->payload, sizeof(id));
        return id;
}

/* A move's record (to the v2 hierarchy: root 0) noted; others, and records cut short, are not. */
static void lineage_scan_move(Lineage *l, const PageEntry *e) {
        uint32_t loc;
        uint64_t id;
        size_t off, len;

        if (e->size < MAX(MAX(l->attach_pid_offset, l->attach_root_offset), l->attach_path_offset) + 4 ||
            e->size < l->attach_cgroup_offset + 8 || payload_s32(e, l->attach_root_offset) != 0)
                return;
        memcpy(&id, e->payload + l->attach_cgroup_offset, sizeof(id));
        memcpy(&loc, e->payload + l->attach_path_offset, sizeof(loc));
        off = loc & 0xffff;
        len = loc >> 16;
        if (off > e->size || len > e->size - off || len == 0)
                return;
        len = strnlen((const char *) e->payload + off, len);
        l->moves++;
        lineage_note(l, e->ts, LINEAGE_ATTACH, payload_s32(e, l->attach_pid_offset),
                     strndup((const char *) e->payload + off, len), id);
}

/* Notes the forks, exits and moves of a page. Returns the ts of its last record (of the page if
 * none); *hidden gets whether it holds records nobody may see. */
static uint64_t lineage_scan_page(Lineage *l, const uint8_t *page, size_t page_size, bool *hidden) {
        PageWalk w;
        PageEntry e;
        uint64_t newest;

        if (page_walk_init(&w, page, page_size) < 0)
                return 0;
        newest = w.page_ts;
        while (page_walk_next(&w, &e) == 1) {
                int id = entry_id(&e);
                bool fork = id >= 0 && (unsigned) id == l->fork_id;

                newest = MAX(newest, e.ts);
                if (id >= 0 && (unsigned) id == l->attach_id) {
                        *hidden = *hidden || l->hide_attach;
                        lineage_scan_move(l, &e);
                        continue;
                }
                if (!fork && (id < 0 || (unsigned) id != l->exit_id))
                        continue;
                if (e.size <
                    (fork ? MAX(l->parent_offset, l->child_offset) : l->pid_offset) + sizeof(int32_t))
                        continue;
                *hidden = *hidden || (fork ? l->hide_fork : l->hide_exit);
                if (fork)
                        l->forks++;
                else
                        l->exits++;
                lineage_note(l, e.ts, fork ? payload_s32(&e, l->parent_offset) : LINEAGE_EXIT,
                             payload_s32(&e, fork ? l->child_offset : l->pid_offset), NULL, 0);
        }
        return newest;
}

bool lineage_read_upto(Lineage *l, unsigned cpu, size_t page_size, uint64_t *ret) {
        LineageQueue *q = cpu < l->n_cpus ? &l->queue[cpu] : NULL;
        bool fresh = q && q->fresh && q->scanned >= page_size;

        if (fresh)
                *ret = q->newest[q->scanned / page_size - 1];
        if (q)
                q->fresh = false;
        return fresh;
}

void lineage_scan(Lineage *l, size_t page_size) {
        for (unsigned c = 0; c < l->n_cpus; c++) {
                LineageQueue *q = &l->queue[c];

                for (; q->scanned + page_size <= q->size; q->scanned += page_size)
                        q->newest[q->scanned / page_size] =
                                lineage_scan_page(l, q->data + q->scanned, page_size, &q->hidden);
        }
}

static int change_cmp(const void *a, const void *b) {
        const LineageChange *x = a, *y = b;

        return x->ts < y->ts ? -1 : x->ts > y->ts;
}

void lineage_apply(Lineage *l, uint64_t watermark, void (*fn)(void *userdata, const LineageChange *c),
                   void *userdata) {
        size_t n = 0;

        if (l->n_pending == 0)
                return;
        /* A child's own forks may have been read before its fork, from another CPU. */
        qsort(l->pending, l->n_pending, sizeof(LineageChange), change_cmp);
        while (n < l->n_pending && l->pending[n].ts <= watermark)
                fn(userdata, &l->pending[n++]);
        lineage_forget(l, 0, n);
        memmove(l->pending, l->pending + n, (l->n_pending - n) * sizeof(LineageChange));
        l->n_pending -= n;
}

static bool lineage_keep(void *userdata, const PageEntry *e) {
        const Lineage *l = userdata;
        int id = entry_id(e);

        return !((l->hide_fork && id >= 0 && (unsigned) id == l->fork_id) ||
                 (l->hide_exit && id >= 0 && (unsigned) id == l->exit_id) ||
                 (l->hide_attach && id >= 0 && (unsigned) id == l->attach_id));
}

/* A page that ends past the watermark, split at it: the records before go out now (a page ends
 * on its last record, which may come long after its first: a sync must not wait for it). */
typedef struct LineageSplit {
        Lineage *l;
        uint64_t watermark;
        bool strip;
} LineageSplit;

static bool lineage_keep_before(void *userdata, const PageEntry *e) {
        const LineageSplit *s = userdata;

        return e->ts <= s->watermark && (!s->strip || lineage_keep(s->l, e));
}

static bool lineage_keep_after(void *userdata, const PageEntry *e) {
        const LineageSplit *s = userdata;

        return e->ts > s->watermark;
}

/* Writes to out the records of page up to the watermark (less those nobody may see with strip),
 * and leaves page with the rest; scratch is a page of room. Returns the records written to out. */
static int lineage_split(LineageSplit *s, uint8_t *page, size_t page_size, uint8_t *out, uint8_t *scratch) {
        uint64_t walked = 0;
        int after, before;

        after = page_filter(page, page_size, lineage_keep_after, s, scratch, &walked);
        if (after < 0 || (uint64_t) after == walked)
                return 0; /* nothing before it, or a page that does not walk: it goes as it is */
        before = page_filter(page, page_size, lineage_keep_before, s, out, NULL);
        if (before < 0)
                return 0;
        memcpy(page, scratch, page_size);
        /* A loss before the page is before its first part, if that goes out. */
        if (before > 0)
                page_clear_missed(page, page_size);
        return before;
}

void lineage_route(Lineage *l, uint64_t watermark, bool split, size_t page_size, LineageRouteFn fn,
                   void *userdata) {
        for (unsigned c = 0; c < l->n_cpus; c++) {
                LineageQueue *q = &l->queue[c];
                size_t n_pages = q->scanned / page_size, k = 0;
                LineageSplit cut = { .l = l, .watermark = watermark, .strip = q->hidden };
                const uint8_t *pages = q->data;
                uint8_t *buf = NULL;
                bool cuts;
                int first = 0;

                while (k < n_pages && q->newest[k] <= watermark)
                        k++;
                if (n_pages == 0)
                        continue;
                cuts = split && k < n_pages;
                /* Room for the k pages stripped, the first part of page k, and a page of scratch. */
                if (q->hidden || cuts) {
                        buf = realloc(l->strip, (k + 2) * page_size);
                        if (buf)
                                l->strip = buf;
                }
                if (q->hidden) {
                        if (!buf) {
                                log_debug("CPU %u: no memory to strip tpd's own records; pages dropped.", c);
                                pages = NULL;
                        } else {
                                for (size_t i = 0; i < k; i++)
                                        (void) page_filter(q->data + i * page_size, page_size, lineage_keep,
                                                           l, buf + i * page_size, NULL);
                                pages = buf;
                        }
                }
                if (buf && cuts)
                        first = lineage_split(&cut, q->data + k * page_size, page_size, buf + k * page_size,
                                              buf + (k + 1) * page_size);
                if (pages && k > 0)
                        fn(userdata, c, pages, k, page_size);
                if (first > 0)
                        fn(userdata, c, buf + k * page_size, 1, page_size);
                if (k == 0)
                        continue;
                memmove(q->data, q->data + k * page_size, q->size - k * page_size);
                memmove(q->newest, q->newest + k, (q->size / page_size - k) * sizeof(uint64_t));
                q->size -= k * page_size;
                q->scanned -= k * page_size;
                l->queued -= k * page_size;
                if (q->size == 0)
                        q->hidden = false;
        }
}
