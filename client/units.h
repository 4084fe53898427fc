/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/*
 * A systemd unit's cgroup, asked of systemd's manager over the system bus, as `systemctl show -P
 * ControlGroup` gets it: what `--unit` selects (Stream "cgroup").
 */

/* The cgroup v2 path of the unit name (a name without a type is a service, as for systemctl).
 * 0, or a negative errno after printing why (not loaded, no cgroup, no systemd). */
int unit_cgroup(const char *name, char **ret);
