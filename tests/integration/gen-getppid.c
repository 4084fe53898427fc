/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * gen-getppid: an exact, optionally paced storm of syscall(SYS_getppid), the cheapest traced
 * event there is (syscalls:sys_enter_getppid, 20 bytes in the ring buffer).
 *
 *   gen-getppid [--count N] [--rate CALLS_PER_S] [--cpu CPU] [--no-wait]
 *
 * Prints its pid on the first line of stdout, so that the test can set the kernel filter
 * 'common_pid == PID' before a single event is generated. Then it reads commands on stdin:
 *
 *   probe        one getppid call, then "probed <boottime_ns>"; lets a test confirm that a stream
 *                is live before the measured run (repeat until the stream shows it)
 *   go (or "")   "go <boottime_ns>", exactly N calls, "done <boottime_ns> <N> <elapsed_ns>", exit 0
 *
 * SIGUSR1 ends the calls early: "done" then says how many were made. A test that needs events to
 * go on until something else happens (a recording's fourth file) runs a long count and stops it.
 *
 * EOF before "go" exits with status 3 and makes no further calls. With --no-wait it runs at once.
 * All timestamps are CLOCK_BOOTTIME, which is tpd's default trace clock ("boot"), so a test can
 * split a stream into before/after "go" by record ts.
 */

#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "gen-common.h"

static volatile sig_atomic_t stop;

static void on_stop(int sig) {
        (void) sig;
        stop = 1;
}

static void probe(void) {
        syscall(SYS_getppid);
}

int main(int argc, char **argv) {
        GenArgs args = {
                .name = "gen-getppid",
                .usage = "usage: gen-getppid [--count N] [--rate CALLS_PER_S] [--cpu CPU] [--no-wait]\n",
                .flags = GEN_OPT_RATE | GEN_OPT_NO_WAIT,
                .count = 1000000,
        };
        uint64_t count, start_ns, i;
        GenPacer pacer;
        int r;

        /* No options of its own: one call reads the whole command line. */
        gen_getopt(&args, argc, argv);
        count = args.count;

        /* Pin first: every event, the probes included, then comes from that one CPU. */
        if (gen_pin(&args) < 0)
                return 1;

        if (signal(SIGUSR1, on_stop) == SIG_ERR)
                return 1;
        gen_say("%d\n", (int) getpid());
        r = gen_go(&args, probe);
        if (r != 0)
                return r;

        gen_pacer_init(&pacer, args.rate);
        start_ns = pacer.start_ns;
        for (i = 0; i < count && !stop; i++) {
                gen_pacer_wait(&pacer, i);
                syscall(SYS_getppid);
        }

        gen_say("done %" PRIu64 " %" PRIu64 " %" PRIu64 "\n", gen_now_ns(CLOCK_BOOTTIME), i,
                gen_now_ns(CLOCK_MONOTONIC) - start_ns);
        return 0;
}
