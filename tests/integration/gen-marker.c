/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * gen-marker: writes messages into an instance's trace_marker (ftrace:print records).
 *
 *   gen-marker (--instance NAME | --file PATH) [--count N] [--rate WRITES_PER_S] [--cpu CPU]
 *              [--seq] [--wait] MESSAGE...
 *
 * Writes every MESSAGE in turn, N times over (default once), each with one write(2). With --seq
 * each write carries a running number, "MESSAGE <i>" with i = 0, 1, ... over all writes, so a
 * test can tell a dropped record from a duplicated or reordered one. Prints its pid on the first
 * line of stdout; with --wait it then waits for one line on stdin before writing. At the end it
 * prints "done <boottime_ns> <writes>" and exits 0; a failed or short write exits 1.
 *
 * --instance NAME writes /sys/kernel/tracing/instances/NAME/trace_marker; --file any other path.
 */

#include <fcntl.h>
#include <getopt.h>
#include <unistd.h>

#include "gen-common.h"

#define MARKER_MAX 4096

static void usage(FILE *f) {
        fprintf(f, "usage: gen-marker (--instance NAME | --file PATH) [--count N] [--rate WRITES_PER_S]\n"
                   "                  [--cpu CPU] [--seq] [--wait] MESSAGE...\n");
}

int main(int argc, char **argv) {
        static const struct option options[] = {
                { "instance", required_argument, NULL, 'i' },
                { "file", required_argument, NULL, 'f' },
                { "count", required_argument, NULL, 'n' },
                { "rate", required_argument, NULL, 'r' },
                { "cpu", required_argument, NULL, 'c' },
                { "seq", no_argument, NULL, 's' },
                { "wait", no_argument, NULL, 'w' },
                { "help", no_argument, NULL, 'h' },
                { NULL, 0, NULL, 0 }
        };
        const char *instance = NULL, *file = NULL;
        uint64_t count = 1, rate = 0, cpu = 0, seq_no = 0, round;
        int c, fd, pin = 0, seq = 0, wait_for_go = 0;
        char path[PATH_MAX], buf[MARKER_MAX + 32], cmd[128];
        GenPacer pacer;

        while ((c = getopt_long(argc, argv, "i:f:n:r:c:swh", options, NULL)) >= 0) {
                switch (c) {
                case 'i':
                        instance = optarg;
                        break;
                case 'f':
                        file = optarg;
                        break;
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
                case 's':
                        seq = 1;
                        break;
                case 'w':
                        wait_for_go = 1;
                        break;
                case 'h':
                        usage(stdout);
                        return 0;
                default:
                        goto bad;
                }
        }
        if (!instance == !file || optind >= argc)
                goto bad;

        if (instance) {
                /* The name goes into a path: refuse anything that could leave instances/. */
                if (!*instance || strchr(instance, '/') || strcmp(instance, ".") == 0 ||
                    strcmp(instance, "..") == 0) {
                        fprintf(stderr, "gen-marker: invalid instance name '%s'\n", instance);
                        return 2;
                }
                snprintf(path, sizeof(path), "/sys/kernel/tracing/instances/%s/trace_marker", instance);
                file = path;
        }
        for (int a = optind; a < argc; a++)
                if (strlen(argv[a]) > MARKER_MAX) {
                        fprintf(stderr, "gen-marker: message longer than %d bytes\n", MARKER_MAX);
                        return 2;
                }

        if (pin && gen_pin_cpu((int) cpu) < 0) {
                fprintf(stderr, "gen-marker: cannot pin to CPU %" PRIu64 ": %s\n", cpu, strerror(errno));
                return 1;
        }

        fd = open(file, O_WRONLY | O_CLOEXEC);
        if (fd < 0) {
                fprintf(stderr, "gen-marker: cannot open '%s': %s\n", file, strerror(errno));
                return 1;
        }

        printf("%d\n", (int) getpid());
        fflush(stdout);
        if (wait_for_go && gen_read_command(cmd, sizeof(cmd)) < 0)
                return 3;

        gen_pacer_init(&pacer, rate);
        for (round = 0; round < count; round++)
                for (int a = optind; a < argc; a++) {
                        const char *msg = argv[a];
                        size_t len;
                        ssize_t n;

                        if (seq) {
                                len = (size_t) snprintf(buf, sizeof(buf), "%s %" PRIu64, argv[a], seq_no);
                                msg = buf;
                        } else
                                len = strlen(msg);

                        gen_pacer_wait(&pacer, seq_no);
                        n = write(fd, msg, len);
                        if (n < 0 || (size_t) n != len) {
                                fprintf(stderr, "gen-marker: write %" PRIu64 " to '%s' failed: %s\n", seq_no,
                                        file, n < 0 ? strerror(errno) : "short write");
                                return 1;
                        }
                        seq_no++;
                }

        close(fd);
        printf("done %" PRIu64 " %" PRIu64 "\n", gen_now_ns(CLOCK_BOOTTIME), seq_no);
        fflush(stdout);
        return 0;

bad:
        usage(stderr);
        return 2;
}
