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
 * EOF before "go" exits with status 3 and makes no further calls. With --no-wait it runs at once.
 * All timestamps are CLOCK_BOOTTIME, which is tpd's default trace clock ("boot"), so a test can
 * split a stream into before/after "go" by record ts.
 */

#include <getopt.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "gen-common.h"

static void usage(FILE *f) {
        fprintf(f, "usage: gen-getppid [--count N] [--rate CALLS_PER_S] [--cpu CPU] [--no-wait]\n");
}

int main(int argc, char **argv) {
        static const struct option options[] = {
                { "count", required_argument, NULL, 'n' },
                { "rate", required_argument, NULL, 'r' },
                { "cpu", required_argument, NULL, 'c' },
                { "no-wait", no_argument, NULL, 'w' },
                { "help", no_argument, NULL, 'h' },
                { NULL, 0, NULL, 0 }
        };
        uint64_t count = 1000000, rate = 0, cpu = 0, start_ns, i;
        int c, pin = 0, wait_for_go = 1;
        char cmd[128];
        GenPacer pacer;

        while ((c = getopt_long(argc, argv, "n:r:c:wh", options, NULL)) >= 0) {
                switch (c) {
                case 'n':
                        if (gen_parse_u64(optarg, &count) < 0)
                                goto bad;
                        break;
                case 'r':
                        if (gen_parse_u64(optarg, &rate) < 0)
                                goto bad;
                        break;
                case 'c':
                        if (gen_parse_u64(optarg, &cpu) < 0 || cpu >= CPU_SETSIZE)
                                goto bad;
                        pin = 1;
                        break;
                case 'w':
                        wait_for_go = 0;
                        break;
                case 'h':
                        usage(stdout);
                        return 0;
                default:
                        goto bad;
                }
        }
        if (optind != argc)
                goto bad;

        /* Pin first: every event, the probes included, then comes from that one CPU. */
        if (pin && gen_pin_cpu((int) cpu) < 0) {
                fprintf(stderr, "gen-getppid: cannot pin to CPU %" PRIu64 ": %s\n", cpu, strerror(errno));
                return 1;
        }

        printf("%d\n", (int) getpid());
        fflush(stdout);

        while (wait_for_go) {
                if (gen_read_command(cmd, sizeof(cmd)) < 0)
                        return 3;
                if (strcmp(cmd, "probe") == 0) {
                        syscall(SYS_getppid);
                        printf("probed %" PRIu64 "\n", gen_now_ns(CLOCK_BOOTTIME));
                        fflush(stdout);
                } else if (cmd[0] == '\0' || strcmp(cmd, "go") == 0)
                        break;
                else {
                        fprintf(stderr, "gen-getppid: unknown command '%s'\n", cmd);
                        return 1;
                }
        }

        printf("go %" PRIu64 "\n", gen_now_ns(CLOCK_BOOTTIME));
        fflush(stdout);

        gen_pacer_init(&pacer, rate);
        start_ns = pacer.start_ns;
        for (i = 0; i < count; i++) {
                gen_pacer_wait(&pacer, i);
                syscall(SYS_getppid);
        }

        printf("done %" PRIu64 " %" PRIu64 " %" PRIu64 "\n", gen_now_ns(CLOCK_BOOTTIME), count,
               gen_now_ns(CLOCK_MONOTONIC) - start_ns);
        fflush(stdout);
        return 0;

bad:
        usage(stderr);
        return 2;
}
