/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <stdint.h>

/*
 * Command names of pids for the "comm" of records: /proc for running tasks when tpd runs in the
 * initial PID namespace, and the kernel's saved_cmdlines, which knows tasks that have exited and
 * is the only source from another namespace. A pid's name changes at exec and prctl, and pids are
 * reused: a name looked up at time T serves the records written until T (on the trace clock);
 * without a system clock for the trace clock, until the generation advances (every flush interval
 * while streams run).
 */

typedef struct CommCache CommCache;

/* Entries per set; and the /proc reads a generation allows at once, plus one per COMM_CACHE_PROC_COST
 * lookups (see daemon/comm.c). */
#define COMM_CACHE_WAYS 8U
#define COMM_CACHE_PROC_BURST 1024U
#define COMM_CACHE_PROC_COST 16U

typedef struct CommCacheStats {
        uint64_t proc_reads;    /* /proc/PID/comm reads */
        uint64_t proc_deferred; /* lookups answered without the /proc read they wanted: over budget */
} CommCacheStats;

int comm_cache_new(const char *saved_cmdlines_path, CommCache **ret);
CommCache *comm_cache_free(CommCache *c);
/* The instance's trace clock (its trace_clock name), which record timestamps count on. */
void comm_cache_set_clock(CommCache *c, const char *name);
/* Forgets everything older than now: called periodically. */
void comm_cache_next_generation(CommCache *c);
/* Forgets every cached name and rereads the kernel's table now, whatever its age: for the last
 * look at the names of a recording that ends. */
void comm_cache_reread(CommCache *c);
/* The name of pid for a record written at ts (trace clock), or NULL when neither source knows it. */
const char *comm_cache_lookup(CommCache *c, int pid, uint64_t ts);
void comm_cache_get_stats(const CommCache *c, CommCacheStats *ret);
/* The set of pid, for tests: the sets are picked by a hash keyed at random per cache. */
unsigned comm_cache_set_of(const CommCache *c, int pid);
