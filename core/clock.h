/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <stdbool.h>
#include <time.h>

/* The kernel's trace clocks, as the instance's trace_clock names them, and the clock_gettime()
 * clock each one reads. tpd checks its Clock= setting with them; tpctl maps a stream's stamps to
 * the system's time with them. */

/* A name the kernel could hold (local, mono_raw, x86-tsc, …): the instance's trace_clock decides. */
bool trace_clock_name_is_valid(const char *name);

/* The clock_gettime() clock a trace clock reads (boot: CLOCK_BOOTTIME, …); -ENOENT for the others
 * (local, global, x86-tsc, counter…), whose stamps cannot be compared with the system's time. */
int trace_clock_id(const char *name, clockid_t *ret);
