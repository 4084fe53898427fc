/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * The pids a stream follows: the roots it named, and their descendants as the kernel's
 * sched_process_fork records name them. Membership is a range of time (on the trace clock), not a
 * state: a child is a member from its fork on, and stays one until its pid is given to another
 * task (a later fork of the same pid). So a record read late, from another CPU's pages, is
 * decided as it was written, and the last records of a task that exited (its switch out) still
 * count. An exit only marks the entry as one that may be dropped to make room.
 *
 * Pure code, bounded: at most max entries; a child that finds no room is not followed, and
 * counted.
 */

#define FOLLOW_FOREVER UINT64_MAX

typedef struct FollowEntry {
        int32_t pid;
        bool exited;
        uint64_t since; /* the fork's ts; 0 for a root */
        uint64_t until; /* the ts at which the pid went to another task; FOLLOW_FOREVER */
        uint64_t exit_ts;
} FollowEntry;

typedef struct Follow {
        FollowEntry *entries; /* by pid, then since */
        size_t n, cap, max;
        size_t live;      /* entries not exited and not ended */
        uint64_t refused; /* children not followed: no room */
        /* When the following began (0: unknown). Forks and exits before it are the past the roots
         * and their descendants in /proc already tell; read late, a root's own fork would
         * otherwise look like its pid given to another task. */
        uint64_t start;
} Follow;

int follow_new(size_t max, Follow **ret);
Follow *follow_free(Follow *f);

/* A root: followed whatever its records' time. 0, -ENOSPC (max reached) or -ENOMEM. */
int follow_add_root(Follow *f, int32_t pid);

bool follow_matches(const Follow *f, int32_t pid, uint64_t ts);

/* A fork of parent at ts made child (every fork the kernel records: one of another task can end
 * the entry of a pid it reuses). Ignored before start, as exits are. */
void follow_fork(Follow *f, int32_t parent, int32_t child, uint64_t ts);
/* The task pid exited at ts. */
void follow_exit(Follow *f, int32_t pid, uint64_t ts);

/* A task that came into what the set selects at ts (a cgroup it was moved into): a member from
 * then on, unless it is one already. Ignored before start. 0, -ENOSPC (counted as refused) or
 * -ENOMEM. */
int follow_join(Follow *f, int32_t pid, uint64_t ts);
/* A task that left it at ts (moved to another cgroup): its records from then on are not selected.
 * Ignored before start. */
void follow_leave(Follow *f, int32_t pid, uint64_t ts);
