/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/*
 * The cgroup v2 hierarchy as tpd reads it (core/cgroup.h has the paths): where it is mounted (the
 * unified hierarchy of the hybrid layout too), the tasks of a subtree, the cgroup of a task.
 */

/* The mount point of the cgroup v2 hierarchy, from /proc/self/mountinfo. 0, -ENOENT (none
 * mounted) or another negative errno. */
int cgroups_mount(char **ret);

/* Calls fn with each task (thread) of the subtree at path (valid, cgroup_path_valid()) below the
 * mount and the path of its cgroup (len bytes, NUL-terminated), as their cgroup.threads files list
 * them now, until *budget is spent: each call that returns true spends one. */
typedef bool (*CgroupsThreadFn)(void *userdata, int tid, const char *path, size_t len);
void cgroups_threads(const char *mount, const char *path, CgroupsThreadFn fn, void *userdata,
                     unsigned *budget);

/* The ids of the cgroups of the subtree at path (its directories' inode numbers, which the
 * kernel's cgroup_attach_task records carry as dst_id), sorted, at most CGROUPS_IDS_MAX. 0 or a
 * negative errno; *ret replaced. */
#define CGROUPS_IDS_MAX 4096U
int cgroups_subtree_ids(const char *mount, const char *path, uint64_t **ret, size_t *ret_n);

/* Whether this process sees cgroup paths as the kernel's records name them: the initial cgroup
 * namespace's (the inode number of include/linux/proc_ns.h). Inside another, only ids compare. */
bool cgroups_namespace_is_initial(void);

/* The v2 cgroup of task pid now, into buf: its length, or a negative errno (-ESRCH: gone). */
ssize_t cgroups_of_task(pid_t pid, char *buf, size_t size);
