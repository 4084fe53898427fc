/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <stddef.h>
#include <sys/types.h>

/*
 * A systemd unit's cgroup, asked of systemd's manager over the system bus, as `systemctl show -P
 * ControlGroup` gets it: what `--unit` selects (Stream "cgroup"); and the other way, the cgroup of a
 * process, whose unit core/cgroup.h's cgroup_unit() names: what `top --by` groups by.
 */

/* The cgroup v2 path of the unit name (a name without a type is a service, as for systemctl).
 * 0, or a negative errno after printing why (not loaded, no cgroup, no systemd). */
int unit_cgroup(const char *name, char **ret);

/* The cgroup v2 path of process pid now, from /proc/PID/cgroup, into buf (NUL-terminated): its
 * length, or a negative errno (-ESRCH: gone, -ENOENT: no v2 line). */
ssize_t unit_cgroup_of_pid(pid_t pid, char *buf, size_t size);
