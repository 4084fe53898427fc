/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * Which cgroup v2 each task was in, over time: what a record's "cgroup" says (a stream's "with":
 * ["cgroup"]). A task's cgroup is set by a move (the kernel's cgroup_attach_task) or at its fork,
 * and a record, read late from another CPU's pages, is decided by its time: so a task keeps its last
 * CGROUP_HISTORY_STEPS changes, not its cgroup now. A pid given to another task (a fork of the same
 * pid) adds a step, so the last records of the task before still find theirs. A task that exited
 * is forgotten once no record of it can still come (cgroup_history_expire()).
 *
 * Paths are kept once each, however many tasks are in them. Pure code, bounded: at most max tasks
 * and CGROUP_HISTORY_PATHS_MAX paths; a task that finds no room is not known.
 */

#define CGROUP_HISTORY_STEPS 4U
#define CGROUP_HISTORY_PATHS_MAX 4096U

typedef struct CgroupHistory CgroupHistory;

int cgroup_history_new(size_t max_tasks, CgroupHistory **ret);
CgroupHistory *cgroup_history_free(CgroupHistory *h);

/* The index of path (len bytes, not NUL-terminated), added when new, for cgroup_history_set(): valid
 * until the next call of this, when no task was set in it since. A path is dropped once no task is
 * in it. 0, -ENOSPC (CGROUP_HISTORY_PATHS_MAX paths with tasks) or -ENOMEM. */
int cgroup_history_path(CgroupHistory *h, const char *path, size_t len, uint32_t *ret);

/* Task pid is in the cgroup of path index from ts on (ts 0: since before anything the history was
 * told), and alive. 0, -ENOSPC (max tasks known) or -ENOMEM. */
int cgroup_history_set(CgroupHistory *h, int32_t pid, uint64_t ts, uint32_t path);

/* The path index of pid's cgroup at ts (valid until the next change of the history): -ENOENT when the task
 * is not known, -ERANGE when ts is before what is known of it. */
int cgroup_history_at(const CgroupHistory *h, int32_t pid, uint64_t ts, uint32_t *ret);

/* The path of an index: its bytes (not NUL-terminated) and their number. */
const char *cgroup_history_path_of(const CgroupHistory *h, uint32_t path, size_t *ret_len);

/* Task pid exited at ts. */
void cgroup_history_exit(CgroupHistory *h, int32_t pid, uint64_t ts);

/* Forgets the tasks that exited before ts. */
void cgroup_history_expire(CgroupHistory *h, uint64_t before);

/* Tasks and paths known. */
size_t cgroup_history_tasks(const CgroupHistory *h);
size_t cgroup_history_paths(const CgroupHistory *h);
