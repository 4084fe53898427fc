/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <time.h>

#include "log.h"
#include "loop.h"
#include "util.h"

/* Adds one dispatch. Wall time alone cannot tell a dispatch that worked from one the scheduler
 * held off the CPU: the CPU time tells them apart. */
static void loop_account(LoopStats *s, uint64_t usec, uint64_t cpu_usec) {
        s->dispatches++;
        if (usec > s->max_usec)
                s->max_usec = usec;
        if (cpu_usec > s->max_cpu_usec)
                s->max_cpu_usec = cpu_usec;
        if (usec > LOOP_SLOW_USEC) {
                s->slow++;
                log_debug("A dispatch of the loop took %llu ms (%llu ms on the CPU).",
                          (unsigned long long) (usec / 1000), (unsigned long long) (cpu_usec / 1000));
        }
}

/* The thread's CPU time costs a system call (1–1.5 µs here, against 30 ns for the monotonic clock),
 * too much for every dispatch of a busy loop: it is read at the end of a dispatch that took
 * LOOP_CPU_READ_USEC or more, and of any other one that ends LOOP_CPU_READ_USEC after the last
 * reading. Waiting costs no CPU, so what a long dispatch is charged since the last reading is its own
 * CPU time plus at most LOOP_CPU_READ_USEC of the dispatches before it: at most a thousand system
 * calls a second, and a figure within a millisecond. */
#define LOOP_CPU_READ_USEC 1000ULL

int loop_run(sd_event *e, LoopStats *stats) {
        uint64_t cpu_last = now_usec(CLOCK_THREAD_CPUTIME_ID), cpu_last_at = now_usec(CLOCK_MONOTONIC);
        int code = 0, r;

        while (sd_event_get_state(e) != SD_EVENT_FINISHED) {
                uint64_t t0, t1, cpu = 0;

                r = sd_event_prepare(e);
                if (r == 0)
                        r = sd_event_wait(e, UINT64_MAX);
                if (r < 0)
                        return r;
                if (r == 0)
                        continue;
                t0 = now_usec(CLOCK_MONOTONIC);
                r = sd_event_dispatch(e);
                t1 = now_usec(CLOCK_MONOTONIC);
                if (t1 - t0 >= LOOP_CPU_READ_USEC || t1 - cpu_last_at >= LOOP_CPU_READ_USEC) {
                        uint64_t now = now_usec(CLOCK_THREAD_CPUTIME_ID);

                        if (t1 - t0 >= LOOP_CPU_READ_USEC)
                                cpu = now - cpu_last;
                        cpu_last = now;
                        cpu_last_at = t1;
                }
                loop_account(stats, t1 - t0, cpu);
                if (r < 0)
                        return r;
        }
        r = sd_event_get_exit_code(e, &code);
        return r < 0 ? r : code;
}

int loop_rearm(sd_event_source *s, uint64_t usec) {
        int r = sd_event_source_set_time_relative(s, usec);
        if (r < 0)
                return r;
        return sd_event_source_set_enabled(s, SD_EVENT_ONESHOT);
}
