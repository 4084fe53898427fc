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

static const char usage[] =
        "usage: gen-marker (--instance NAME | --file PATH) [--count N] [--rate WRITES_PER_S]\n"
        "                  [--cpu CPU] [--seq] [--wait] MESSAGE...\n";

int main(int argc, char **argv) {
        static const struct option options[] = { { "instance", required_argument, NULL, 'i' },
                                                 { "file", required_argument, NULL, 'f' },
                                                 { "seq", no_argument, NULL, 's' },
                                                 { NULL, 0, NULL, 0 } };
        GenArgs args = {
                .name = "gen-marker",
                .usage = usage,
                .flags = GEN_OPT_RATE | GEN_OPT_WAIT | GEN_OPT_OPERANDS,
                .extra = options,
                .count = 1,
        };
        const char *instance = NULL, *file = NULL;
        uint64_t seq_no = 0, round;
        int c, fd, r, seq = 0;
        char path[PATH_MAX], buf[MARKER_MAX + 32];
        GenPacer pacer;

        while ((c = gen_getopt(&args, argc, argv)) > 0) {
                switch (c) {
                case 'i':
                        instance = optarg;
                        break;
                case 'f':
                        file = optarg;
                        break;
                case 's':
                        seq = 1;
                        break;
                }
        }
        if (!instance == !file)
                gen_bad_usage(&args);

        if (instance) {
                /* The name goes into a path: refuse anything that could leave instances/. */
                if (!*instance || strchr(instance, '/') || strcmp(instance, ".") == 0 ||
                    strcmp(instance, "..") == 0) {
                        fprintf(stderr, "gen-marker: invalid instance name '%s'\n", instance);
                        return GEN_EXIT_USAGE;
                }
                snprintf(path, sizeof(path), "/sys/kernel/tracing/instances/%s/trace_marker", instance);
                file = path;
        }
        for (int a = optind; a < argc; a++)
                if (strlen(argv[a]) > MARKER_MAX) {
                        fprintf(stderr, "gen-marker: message longer than %d bytes\n", MARKER_MAX);
                        return GEN_EXIT_USAGE;
                }

        if (gen_pin(&args) < 0)
                return 1;

        fd = open(file, O_WRONLY | O_CLOEXEC);
        if (fd < 0) {
                fprintf(stderr, "gen-marker: cannot open '%s': %s\n", file, strerror(errno));
                return 1;
        }

        gen_say("%d\n", (int) getpid());
        /* Any line releases the writes; unlike the other generators no "go" line follows it. */
        r = gen_wait_for_go(&args, NULL);
        if (r != 0)
                return r;

        gen_pacer_init(&pacer, args.rate);
        for (round = 0; round < args.count; round++)
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
        gen_say("done %" PRIu64 " %" PRIu64 "\n", gen_now_ns(CLOCK_BOOTTIME), seq_no);
        return 0;
}
