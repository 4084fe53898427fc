/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/*
 * Small helpers shared by the integration-test load generators. Header-only on purpose: each
 * generator is one self-contained executable and none of them links anything of tpd.
 */

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static inline uint64_t gen_now_ns(clockid_t clock) {
        struct timespec ts;

        clock_gettime(clock, &ts);
        return (uint64_t) ts.tv_sec * 1000000000ULL + (uint64_t) ts.tv_nsec;
}

/* Sleeps until CLOCK_MONOTONIC reaches deadline_ns; restarts after signals. */
static inline void gen_sleep_until_ns(uint64_t deadline_ns) {
        struct timespec ts = {
                .tv_sec = (time_t) (deadline_ns / 1000000000ULL),
                .tv_nsec = (long) (deadline_ns % 1000000000ULL),
        };

        while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
                ;
}

static inline int gen_parse_u64(const char *s, uint64_t *ret) {
        char *end;
        unsigned long long v;

        if (!s || !*s || *s == '-')
                return -EINVAL;
        errno = 0;
        v = strtoull(s, &end, 0);
        if (errno != 0 || *end != '\0')
                return -EINVAL;
        *ret = v;
        return 0;
}

static inline int gen_pin_cpu(int cpu) {
        cpu_set_t set;

        CPU_ZERO(&set);
        CPU_SET(cpu, &set);
        if (sched_setaffinity(0, sizeof(set), &set) < 0)
                return -errno;
        return 0;
}

/*
 * Pacing: with rate_per_s == 0 it never waits. Otherwise the i-th operation is due at
 * start + i / rate; operations run in batches of about 1 ms so that a paced run does not cost a
 * timer wake-up per operation (which would perturb the very thing being measured).
 */
typedef struct GenPacer {
        uint64_t rate_per_s;
        uint64_t start_ns;
        uint64_t batch;
} GenPacer;

static inline void gen_pacer_init(GenPacer *p, uint64_t rate_per_s) {
        p->rate_per_s = rate_per_s;
        p->start_ns = gen_now_ns(CLOCK_MONOTONIC);
        p->batch = rate_per_s / 1000;
        if (p->batch == 0)
                p->batch = 1;
}

/* Called before operation number done (0-based); waits if that operation is not due yet. */
static inline void gen_pacer_wait(GenPacer *p, uint64_t done) {
        uint64_t due_ns;

        if (p->rate_per_s == 0 || done % p->batch != 0)
                return;
        due_ns = p->start_ns + (uint64_t) ((unsigned __int128) done * 1000000000ULL / p->rate_per_s);
        if (gen_now_ns(CLOCK_MONOTONIC) < due_ns)
                gen_sleep_until_ns(due_ns);
}

/* Reads one line from stdin into buf (newline stripped). Returns 0, or -1 at EOF. */
static inline int gen_read_command(char *buf, size_t size) {
        size_t n;

        if (!fgets(buf, (int) size, stdin))
                return -1;
        n = strlen(buf);
        while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r'))
                buf[--n] = '\0';
        return 0;
}
