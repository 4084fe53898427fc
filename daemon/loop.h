/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <stdint.h>

#include <systemd/sd-event.h>

/*
 * The event loop, each dispatch timed: everything tpd does runs on one loop, so the longest
 * dispatch is the longest any peer waited for tpd to turn to it (GetStatus "loop").
 */

/* A dispatch longer than this is counted as slow, and logged with tpd -v. */
#define LOOP_SLOW_USEC (10 * 1000ULL)

typedef struct LoopStats {
        uint64_t dispatches;
        uint64_t slow;         /* dispatches over LOOP_SLOW_USEC on the wall clock */
        uint64_t max_usec;     /* the longest dispatch on the wall clock */
        uint64_t max_cpu_usec; /* the most CPU time one dispatch took (of those over 1 ms), within 1 ms */
} LoopStats;

/* Runs the loop until sd_event_exit(); returns its exit code, or a negative errno. */
int loop_run(sd_event *e, LoopStats *stats);

/* Time sources fire once; a periodic one is set up again from its handler: fires usec from now. */
int loop_rearm(sd_event_source *s, uint64_t usec);
