/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The pages of following streams: forks noted, routed up to the watermark (a page that ends past
 * it split there), tpd's own records stripped. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/page.h"
#include "lineage.h"
#include "tpd-test.h"

#define PAGE_SIZE 4096U
#define FORK_ID 300U
#define EXIT_ID 301U
#define ATTACH_ID 302U
#define OTHER_ID 7U

/* A record's payload: common_type, flags, preempt count, common_pid, then a fork's parent and
 * child (as sched_process_fork has them, at other offsets). */
typedef struct Rec {
        uint32_t delta;
        uint16_t id;
        int32_t pid, parent, child;
} Rec;

static void build_page(uint8_t *page, uint64_t page_ts, const Rec *recs, size_t n) {
        uint64_t commit = n * 20;

        memset(page, 0, PAGE_SIZE);
        memcpy(page, &page_ts, 8);
        memcpy(page + 8, &commit, 8);
        for (size_t i = 0; i < n; i++) {
                uint8_t *e = page + PAGE_HEADER_SIZE + i * 20;
                uint32_t header = 4U | recs[i].delta << 5; /* type_len 4: 16 bytes of payload */

                memcpy(e, &header, 4);
                memcpy(e + 4, &recs[i].id, 2);
                memcpy(e + 8, &recs[i].pid, 4);
                memcpy(e + 12, &recs[i].parent, 4);
                memcpy(e + 16, &recs[i].child, 4);
        }
}

static void setup(Lineage *l) {
        ASSERT_INT_EQ(lineage_init(l, 2), 0);
        l->fork_id = FORK_ID;
        l->exit_id = EXIT_ID;
        l->pid_offset = 4;
        l->parent_offset = 8;
        l->child_offset = 12;
        l->attach_id = ATTACH_ID;
        l->attach_root_offset = 8;
        l->attach_pid_offset = 12;
        l->attach_cgroup_offset = 16;
        l->attach_path_offset = 24;
}

/* A page of moves, as cgroup_attach_task writes them (40 bytes of payload each: its fields, the
 * cgroup's id 1000 + i, then the path, which dst_path's __data_loc points at), of which hierarchy
 * root, and a record of pid 5 after each. */
static void build_moves(uint8_t *page, uint64_t page_ts, const int32_t *roots, const char *const *paths,
                        size_t n) {
        uint64_t commit = n * (44 + 20);
        uint8_t *e = page + PAGE_HEADER_SIZE;

        memset(page, 0, PAGE_SIZE);
        memcpy(page, &page_ts, 8);
        memcpy(page + 8, &commit, 8);
        for (size_t i = 0; i < n; i++) {
                uint32_t header = 10U | 10U << 5, other = 4U | 10U << 5; /* 40 and 16 bytes */
                uint16_t id = ATTACH_ID, other_id = OTHER_ID;
                int32_t pid = 5;
                uint64_t cgroup = 1000 + i;
                uint32_t loc = 28U | (uint32_t) (strlen(paths[i]) + 1) << 16;

                memcpy(e, &header, 4);
                memcpy(e + 4, &id, 2);
                memcpy(e + 4 + 8, &roots[i], 4);
                memcpy(e + 4 + 12, &pid, 4);
                memcpy(e + 4 + 16, &cgroup, 8);
                memcpy(e + 4 + 24, &loc, 4);
                memcpy(e + 4 + 28, paths[i], strlen(paths[i]) + 1);
                e += 44;
                memcpy(e, &other, 4);
                memcpy(e + 4, &other_id, 2);
                memcpy(e + 8, &pid, 4);
                e += 20;
        }
}

/* What was routed: each record's cpu, ts and pid, and the pages' losses. */
typedef struct Routed {
        unsigned n;
        unsigned cpu[64];
        uint64_t ts[64];
        int32_t pid[64];
        unsigned pages, missed;
} Routed;

static void on_route(void *userdata, unsigned cpu, const void *pages, size_t n_pages, size_t page_size) {
        Routed *r = userdata;

        for (size_t i = 0; i < n_pages; i++) {
                const uint8_t *page = (const uint8_t *) pages + i * page_size;
                PageWalk w;
                PageEntry e;
                uint64_t count;

                ASSERT_INT_EQ(page_walk_init(&w, page, page_size), 0);
                r->pages++;
                r->missed += page_missed(&w, &count);
                while (page_walk_next(&w, &e) == 1) {
                        ASSERT(r->n < 64);
                        r->cpu[r->n] = cpu;
                        r->ts[r->n] = e.ts;
                        memcpy(&r->pid[r->n], e.payload + 4, 4);
                        r->n++;
                }
        }
}

typedef struct Changes {
        unsigned n;
        LineageChange c[16];
        char path[16][16]; /* a move's, which lineage_apply() frees after the call */
} Changes;

static void on_change(void *userdata, const LineageChange *c) {
        Changes *ch = userdata;

        ASSERT(ch->n < 16);
        if (c->path)
                snprintf(ch->path[ch->n], sizeof(ch->path[0]), "%s", c->path);
        ch->c[ch->n] = *c;
        ch->c[ch->n++].path = NULL;
}

/* A page whose last record comes after the watermark: its records before it go now, the rest
 * when the watermark passes them; the page's loss goes with its first part only. */
static void test_split(void) {
        static const Rec recs[] = { { 0, OTHER_ID, 10, 0, 0 },
                                    { 100, OTHER_ID, 11, 0, 0 },
                                    { 100, OTHER_ID, 12, 0, 0 },
                                    { 100, OTHER_ID, 13, 0, 0 } };
        uint8_t page[PAGE_SIZE];
        Routed r = {};
        Lineage l = {};

        setup(&l);
        build_page(page, 1000, recs, 4); /* ts 1000, 1100, 1200, 1300 */
        page_add_missed(page, PAGE_SIZE, 5);
        ASSERT_INT_EQ(lineage_enqueue(&l, 1, page, 1, PAGE_SIZE), 0);
        lineage_scan(&l, PAGE_SIZE);
        ASSERT_U64_EQ(l.queued, PAGE_SIZE);

        /* Before the page's first record: nothing goes, the page stays as it was. */
        lineage_route(&l, 999, true, PAGE_SIZE, on_route, &r);
        ASSERT_INT_EQ(r.n, 0);
        ASSERT_MEM_EQ(l.queue[1].data, PAGE_SIZE, page, PAGE_SIZE);

        /* Whole pages only: it waits. */
        lineage_route(&l, 1150, false, PAGE_SIZE, on_route, &r);
        ASSERT_INT_EQ(r.n, 0);
        lineage_route(&l, 1150, true, PAGE_SIZE, on_route, &r);
        ASSERT_INT_EQ(r.n, 2);
        ASSERT_U64_EQ(r.ts[0], 1000);
        ASSERT_U64_EQ(r.ts[1], 1100);
        ASSERT_INT_EQ(r.cpu[1], 1);
        ASSERT_INT_EQ(r.missed, 1);
        ASSERT_U64_EQ(l.queued, PAGE_SIZE); /* the rest waits */

        lineage_route(&l, 1200, true, PAGE_SIZE, on_route, &r); /* a record at the watermark goes */
        ASSERT_INT_EQ(r.n, 3);
        ASSERT_U64_EQ(r.ts[2], 1200);
        lineage_route(&l, 5000, false, PAGE_SIZE, on_route, &r);
        ASSERT_INT_EQ(r.n, 4);
        ASSERT_U64_EQ(r.ts[3], 1300);
        ASSERT_INT_EQ(r.pid[3], 13);
        ASSERT_INT_EQ(r.missed, 1);
        ASSERT_U64_EQ(l.queued, 0);
        lineage_done(&l);
}

/* Pages that end before the watermark go whole, and the next one's first part after them; forks
 * go to the followers in time order across CPUs, and their records to nobody. */
static void test_forks_and_strip(void) {
        static const Rec cpu0_a[] = { { 0, OTHER_ID, 1, 0, 0 }, { 50, FORK_ID, 1, 1, 2 } };   /* 100, 150 */
        static const Rec cpu0_b[] = { { 0, OTHER_ID, 1, 0, 0 }, { 200, OTHER_ID, 1, 0, 0 } }; /* 200, 400 */
        static const Rec cpu1[] = { { 0, FORK_ID, 2, 2, 3 },
                                    { 10, OTHER_ID, 3, 0, 0 },
                                    { 10, EXIT_ID, 3, 0, 0 },
                                    { 500, OTHER_ID, 2, 0, 0 } }; /* 170..690 */
        uint8_t pages[2 * PAGE_SIZE], page[PAGE_SIZE];
        Changes ch = {};
        Routed r = {};
        Lineage l = {};

        setup(&l);
        l.hide_fork = l.hide_exit = true;
        build_page(pages, 100, cpu0_a, 2);
        build_page(pages + PAGE_SIZE, 200, cpu0_b, 2);
        ASSERT_INT_EQ(lineage_enqueue(&l, 0, pages, 2, PAGE_SIZE), 0);
        build_page(page, 170, cpu1, 4);
        ASSERT_INT_EQ(lineage_enqueue(&l, 1, page, 1, PAGE_SIZE), 0);
        lineage_scan(&l, PAGE_SIZE);
        ASSERT_U64_EQ(l.forks, 2);
        ASSERT_U64_EQ(l.exits, 1);

        lineage_apply(&l, 250, on_change, &ch);
        ASSERT_INT_EQ(ch.n, 3);
        ASSERT(ch.c[0].ts == 150 && ch.c[0].parent == 1 && ch.c[0].pid == 2);
        ASSERT(ch.c[1].ts == 170 && ch.c[1].parent == 2 && ch.c[1].pid == 3);
        ASSERT(ch.c[2].ts == 190 && ch.c[2].parent == -1 && ch.c[2].pid == 3);

        lineage_route(&l, 250, true, PAGE_SIZE, on_route, &r);
        /* CPU 0: the first page whole, less its fork; the second's first record. CPU 1: the
         * record of pid 3 between its fork and its exit. */
        ASSERT_INT_EQ(r.n, 3);
        ASSERT(r.cpu[0] == 0 && r.ts[0] == 100);
        ASSERT(r.cpu[1] == 0 && r.ts[1] == 200);
        ASSERT(r.cpu[2] == 1 && r.ts[2] == 180 && r.pid[2] == 3);

        lineage_route(&l, UINT64_MAX, false, PAGE_SIZE, on_route, &r);
        ASSERT_INT_EQ(r.n, 5);
        ASSERT(r.cpu[3] == 0 && r.ts[3] == 400);
        ASSERT(r.cpu[4] == 1 && r.ts[4] == 690 && r.pid[4] == 2);
        ASSERT_U64_EQ(l.queued, 0);
        lineage_done(&l);
}

/* Moves to the v2 hierarchy (root 0) are noted with their path, others not; all are stripped. */
static void test_moves(void) {
        static const int32_t roots[] = { 0, 3, 0 };
        static const char *const paths[] = { "/a/b", "/v1", "/" };
        uint8_t page[PAGE_SIZE];
        Changes ch = {};
        Routed r = {};
        Lineage l = {};

        setup(&l);
        l.hide_attach = true;
        build_moves(page, 1000, roots, paths, 3);
        ASSERT_INT_EQ(lineage_enqueue(&l, 0, page, 1, PAGE_SIZE), 0);
        lineage_scan(&l, PAGE_SIZE);
        ASSERT_U64_EQ(l.moves, 2);
        lineage_apply(&l, UINT64_MAX, on_change, &ch);
        ASSERT_INT_EQ(ch.n, 2);
        ASSERT(ch.c[0].ts == 1010 && ch.c[0].parent == LINEAGE_ATTACH && ch.c[0].pid == 5 &&
               ch.c[0].id == 1000);
        ASSERT(strcmp(ch.path[0], "/a/b") == 0);
        ASSERT(ch.c[1].ts == 1050 && ch.c[1].parent == LINEAGE_ATTACH && ch.c[1].id == 1002 &&
               strcmp(ch.path[1], "/") == 0);
        lineage_route(&l, UINT64_MAX, true, PAGE_SIZE, on_route, &r);
        /* Only the three records of pid 5 go. */
        ASSERT_INT_EQ(r.n, 3);
        ASSERT(r.ts[0] == 1020 && r.ts[1] == 1040 && r.ts[2] == 1060 && r.pid[2] == 5);
        lineage_done(&l);
}

/* A move whose path runs past its record is not one. */
static void test_move_cut_short(void) {
        static const int32_t roots[] = { 0 };
        static const char *const paths[] = { "/abc" };
        uint8_t page[PAGE_SIZE];
        uint32_t loc = 28U | 200U << 16;
        Lineage l = {};

        setup(&l);
        build_moves(page, 1000, roots, paths, 1);
        memcpy(page + PAGE_HEADER_SIZE + 4 + 24, &loc, 4);
        ASSERT_INT_EQ(lineage_enqueue(&l, 0, page, 1, PAGE_SIZE), 0);
        lineage_scan(&l, PAGE_SIZE);
        ASSERT_U64_EQ(l.moves, 0);
        ASSERT_INT_EQ(l.n_pending, 0);
        lineage_done(&l);
}

int main(void) {
        test_split();
        test_forks_and_strip();
        test_moves();
        test_move_cut_short();
        return 0;
}
