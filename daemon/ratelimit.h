/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "util.h"

/*
 * Rate limiting of what a peer (or the machine) can trigger at will, log messages above all: at
 * most `burst` per interval; the first message of the next interval can say how many were left out.
 * With a burst of 1 it is an interval-only limiter: at most once per interval.
 */

typedef struct RateLimit {
        uint64_t interval_usec;
        unsigned burst;
        uint64_t begin_usec;
        unsigned n;
        unsigned suppressed;
} RateLimit;

#define RATELIMIT_INIT(interval, b) ((RateLimit){ .interval_usec = (interval), .burst = (b) })

/* True when a message may be logged now; otherwise counts it as suppressed. */
static inline bool ratelimit_below(RateLimit *rl) {
        uint64_t now = now_usec(CLOCK_MONOTONIC);

        if (rl->begin_usec == 0 || now - rl->begin_usec >= rl->interval_usec) {
                rl->begin_usec = now;
                rl->n = 0;
        }
        if (rl->n < rl->burst) {
                rl->n++;
                return true;
        }
        rl->suppressed++;
        return false;
}

/* Starts a new interval now with the burst used up: what was just done (whether or not
 * ratelimit_below() allowed it) is not done again before the interval has passed. */
static inline void ratelimit_restart(RateLimit *rl) {
        rl->begin_usec = now_usec(CLOCK_MONOTONIC);
        rl->n = rl->burst;
}

/* How many messages were suppressed since the last call; resets the count. */
static inline unsigned ratelimit_take_suppressed(RateLimit *rl) {
        unsigned n = rl->suppressed;
        rl->suppressed = 0;
        return n;
}
