/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * What streams that follow pids (core/follow.h) need of the pages, in time order across CPUs.
 *
 * A child's first records can be on another CPU than its fork, and be read first. So while a
 * stream follows, the pages of every CPU wait in a queue per CPU, and the glue (daemon/following.c)
 * reads every CPU to the end before it routes any. The moment before those reads is a watermark:
 * everything written before it, on any CPU, has been read, so every fork before it is known. The
 * forks and exits up to the watermark go to the followers in time order (lineage_apply()), then
 * the records that precede it are routed (lineage_route()); the rest wait for the next reads. A
 * child's records come after its fork, so a child is never decided before its fork is known.
 *
 * Pure code: the pages, their forks and exits, and the records nobody may see (tpd's own hold of
 * the two events) stripped from what is routed.
 */

/* A fork (parent >= 0), an exit (parent LINEAGE_EXIT) or a move of pid (with its threads) into
 * the cgroup v2 path (parent LINEAGE_ATTACH), not yet handed over. */
#define LINEAGE_EXIT (-1)
#define LINEAGE_ATTACH (-2)

typedef struct LineageChange {
        uint64_t ts;
        int32_t parent, pid;
        char *path;  /* of a move: the cgroup, owned */
        uint64_t id; /* of a move: the cgroup's id (its directory's inode number) */
} LineageChange;

/* A CPU's pages read and not routed yet, in order. */
typedef struct LineageQueue {
        uint8_t *data;
        size_t size, cap; /* bytes: whole pages */
        uint64_t *newest; /* per page: the ts of its last record */
        size_t newest_cap;
        size_t scanned; /* bytes whose forks and exits were noted */
        bool fresh;     /* pages came since lineage_read_upto() */
        bool hidden;    /* holds records nobody may see */
} LineageQueue;

typedef struct Lineage {
        unsigned n_cpus;
        /* The events' ids, and where their fields are in a record's payload: the pids (each an
         * s32); of a move (cgroup:cgroup_attach_task; UINT_MAX: none), the hierarchy (s32), the
         * cgroup's id (u64) and path (a __data_loc). */
        unsigned fork_id, exit_id, attach_id;
        size_t pid_offset, parent_offset, child_offset;
        size_t attach_pid_offset, attach_root_offset, attach_cgroup_offset, attach_path_offset;
        /* Their records go to nobody: only tpd holds them. */
        bool hide_fork, hide_exit, hide_attach;
        LineageQueue *queue; /* per CPU */
        size_t queued;       /* bytes in the queues */
        LineageChange *pending;
        size_t n_pending, pending_cap;
        uint8_t *strip; /* pages without the hidden records */
        uint64_t forks, exits, moves;
} Lineage;

int lineage_init(Lineage *l, unsigned n_cpus);
/* Frees the queues' memory; what still waits is dropped. */
void lineage_done(Lineage *l);
/* Frees the memory of the queues, which must be empty. */
void lineage_trim(Lineage *l);

/* Appends whole pages to cpu's queue. 0 or -ENOMEM. */
int lineage_enqueue(Lineage *l, unsigned cpu, const void *pages, size_t n_pages, size_t page_size);

/* Notes the forks, exits and moves of the pages queued since the last call. */
void lineage_scan(Lineage *l, size_t page_size);

/* Whether pages of cpu were queued since the last call (after lineage_scan()); *ret then gets the
 * ts of the last record of the last of them: every record of cpu up to it was read. */
bool lineage_read_upto(Lineage *l, unsigned cpu, size_t page_size, uint64_t *ret);

/* Passes the forks, exits and moves up to watermark to fn, in time order, and forgets them. */
void lineage_apply(Lineage *l, uint64_t watermark, void (*fn)(void *userdata, const LineageChange *c),
                   void *userdata);

/* Passes the pages of each CPU whose records all precede watermark to fn, without the records
 * nobody may see, and takes them out of the queue; with split, of the first page that ends past
 * it the records before it go too, and the page keeps the rest. fn may not enqueue. */
typedef void (*LineageRouteFn)(void *userdata, unsigned cpu, const void *pages, size_t n_pages,
                               size_t page_size);
void lineage_route(Lineage *l, uint64_t watermark, bool split, size_t page_size, LineageRouteFn fn,
                   void *userdata);
