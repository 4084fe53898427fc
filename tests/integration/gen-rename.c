/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * gen-rename: many threads that keep renaming themselves, each calling getppid after every new
 * name: every run of records of a thread comes with a name tpd has not seen for it yet.
 *
 *   gen-rename [--threads N] [--seconds S] [--rate CALLS_PER_S] [--cpu CPU] [--no-wait]
 *
 * Starts the threads, prints its pid and the lowest and highest of their tids (what their records
 * carry as common_pid) on the first line of stdout, then waits for "go" on stdin (or any line; EOF exits
 * with status 3). For S seconds (default 60) each thread sets its name with prctl(PR_SET_NAME) to one it has
 * not had yet and calls getppid, paced to CALLS_PER_S over all threads (0: as fast as they can). Then "done
 * <boottime_ns> <calls>" and exit 0.
 */

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "gen-common.h"

#define TICK_NS 100000000ULL /* threads are paced in 100 ms slices */

static atomic_bool running;
static atomic_uint_fast64_t calls;
static uint64_t per_tick; /* calls per thread and slice; 0: unpaced */
static uint64_t end_ns;
static pthread_barrier_t start;
static pid_t *thread_tids;
static atomic_uint ready; /* threads whose tid is noted */

static void *thread_main(void *arg) {
        unsigned id = (unsigned) (uintptr_t) arg;
        uint64_t n = 0, next = 0;
        char name[16];

        thread_tids[id] = gettid();
        atomic_fetch_add(&ready, 1);
        pthread_barrier_wait(&start);
        next = gen_now_ns(CLOCK_MONOTONIC);
        while (atomic_load_explicit(&running, memory_order_relaxed)) {
                uint64_t k = per_tick ? per_tick : 64;

                for (uint64_t i = 0; i < k; i++, n++) {
                        snprintf(name, sizeof(name), "rn%u-%" PRIu64, id, n % 10000000);
                        (void) prctl(PR_SET_NAME, name, 0, 0, 0);
                        syscall(SYS_getppid);
                }
                if (gen_now_ns(CLOCK_MONOTONIC) >= end_ns)
                        break;
                if (per_tick) {
                        next += TICK_NS;
                        gen_sleep_until_ns(next);
                }
        }
        atomic_fetch_add(&calls, n);
        return NULL;
}

int main(int argc, char **argv) {
        static const struct option extra[] = {
                { "threads", required_argument, NULL, 't' },
                { "seconds", required_argument, NULL, 's' },
                {},
        };
        GenArgs args = {
                .name = "gen-rename",
                .usage = "usage: gen-rename [--threads N] [--seconds S] [--rate CALLS_PER_S] [--cpu CPU] "
                         "[--no-wait]\n",
                .flags = GEN_OPT_RATE | GEN_OPT_NO_WAIT,
                .extra = extra,
        };
        uint64_t threads = 1000, seconds = 60;
        pthread_attr_t attr;
        pthread_t *tids;
        int c, r;

        while ((c = gen_getopt(&args, argc, argv)) > 0)
                switch (c) {
                case 't':
                        if (gen_parse_u64(optarg, &threads) < 0 || threads == 0 || threads > 100000)
                                gen_bad_usage(&args);
                        break;
                case 's':
                        if (gen_parse_u64(optarg, &seconds) < 0)
                                gen_bad_usage(&args);
                        break;
                }
        if (gen_pin(&args) < 0)
                return 1;
        if (args.rate > 0) {
                per_tick = args.rate / threads / (1000000000ULL / TICK_NS);
                if (per_tick == 0)
                        per_tick = 1;
        }

        tids = calloc(threads, sizeof(pthread_t));
        thread_tids = calloc(threads, sizeof(pid_t));
        if (!tids || !thread_tids || pthread_barrier_init(&start, NULL, (unsigned) threads + 1) != 0 ||
            pthread_attr_init(&attr) != 0 || pthread_attr_setstacksize(&attr, 64 * 1024) != 0) {
                fprintf(stderr, "gen-rename: out of memory\n");
                return 1;
        }
        atomic_store(&running, true);
        for (uint64_t i = 0; i < threads; i++) {
                r = pthread_create(&tids[i], &attr, thread_main, (void *) (uintptr_t) i);
                if (r != 0) {
                        fprintf(stderr, "gen-rename: cannot start thread %" PRIu64 ": %s\n", i, strerror(r));
                        return 1;
                }
        }

        while (atomic_load(&ready) < threads)
                usleep(1000);
        {
                pid_t lo = thread_tids[0], hi = thread_tids[0];
                for (uint64_t i = 1; i < threads; i++) {
                        lo = thread_tids[i] < lo ? thread_tids[i] : lo;
                        hi = thread_tids[i] > hi ? thread_tids[i] : hi;
                }
                gen_say("%d %d %d\n", (int) getpid(), (int) lo, (int) hi);
        }
        r = gen_go(&args, NULL);
        if (r != 0)
                return r;
        end_ns = gen_now_ns(CLOCK_MONOTONIC) + seconds * 1000000000ULL;
        pthread_barrier_wait(&start);
        for (uint64_t i = 0; i < threads; i++)
                pthread_join(tids[i], NULL);

        gen_say("done %" PRIu64 " %" PRIu64 "\n", gen_now_ns(CLOCK_BOOTTIME),
                (uint64_t) atomic_load(&calls));
        free(tids);
        return 0;
}
