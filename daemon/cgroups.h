/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <stddef.h>
#include <sys/types.h>

#include "core/follow.h"

/*
 * The cgroup v2 hierarchy as tpd reads it (core/cgroup.h has the paths): where it is mounted (the
 * unified hierarchy of the hybrid layout too), the tasks of a subtree, the cgroup of a task.
 */

/* The mount point of the cgroup v2 hierarchy, from /proc/self/mountinfo. 0, -ENOENT (none
 * mounted) or another negative errno. */
int cgroups_mount(char **ret);

/* Adds to f the tasks (threads) of the subtree at path (valid, cgroup_path_valid()) below the
 * mount, as its cgroup.threads files list them now, at most *budget of them. */
void cgroups_seed(const char *mount, const char *path, Follow *f, unsigned *budget);

/* The v2 cgroup of task pid now, into buf: its length, or a negative errno (-ESRCH: gone). */
ssize_t cgroups_of_task(pid_t pid, char *buf, size_t size);
