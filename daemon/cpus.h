/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <stdbool.h>

/*
 * The kernel's CPU lists ("0-3,5,7-8", as in /sys/devices/system/cpu/online): which CPUs are
 * online now. Pure parsing plus one read, so that the manager can notice CPUs coming and going.
 */

#define CPUS_ONLINE_PATH "/sys/devices/system/cpu/online"

/* Sets mask[cpu] for every CPU of the list below n (CPUs at or above n are ignored: tpd reads only
 * the CPUs its instance has a per_cpu directory for) and clears the others. Returns the number of
 * CPUs below n that are set, or -EINVAL for a malformed list (mask is then all false). */
int cpus_parse_list(const char *text, bool *mask, unsigned n);

/* Reads a CPU list file (CPUS_ONLINE_PATH) into mask, as cpus_parse_list() does. */
int cpus_read_list(const char *path, bool *mask, unsigned n);
