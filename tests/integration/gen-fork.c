/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * gen-fork: a tree of processes, each making exactly N getppid calls, for the streams that follow
 * a process and its descendants.
 *
 *   gen-fork [--count N] [--no-wait] FANOUT...
 *
 * Each FANOUT is a level: the root forks FANOUT[0] children, each of them FANOUT[1], and so on.
 * A process makes its N calls first, at once after its fork (so that a child's first calls are
 * the ones a follower could miss), then forks its children and waits for them. Prints its pid,
 * then waits for the go (with "probe": one call of the root) as gen-getppid does; at the end,
 * "done <boottime_ns> <calls of the whole tree> <processes>". Exits 1 if a fork or a child failed.
 */

#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gen-common.h"

static void probe(void) {
        syscall(SYS_getppid);
}

/* The calls of one process, then its subtree; returns 0 or 1 (a fork or a child failed). */
static int tree(uint64_t count, char **levels, int n_levels) {
        uint64_t fanout = 0;
        int failed = 0;

        for (uint64_t i = 0; i < count; i++)
                syscall(SYS_getppid);
        if (n_levels == 0)
                return 0;
        (void) gen_parse_u64(levels[0], &fanout);
        for (uint64_t i = 0; i < fanout; i++) {
                pid_t pid = fork();

                if (pid < 0)
                        return 1;
                if (pid == 0)
                        _exit(tree(count, levels + 1, n_levels - 1));
        }
        for (uint64_t i = 0; i < fanout; i++) {
                int status;

                if (wait(&status) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
                        failed = 1;
        }
        return failed;
}

int main(int argc, char **argv) {
        GenArgs args = {
                .name = "gen-fork",
                .usage = "usage: gen-fork [--count N] [--no-wait] FANOUT...\n",
                .flags = GEN_OPT_NO_WAIT | GEN_OPT_OPERANDS,
                .count = 1000,
        };
        uint64_t processes = 1, width = 1;
        int r;

        gen_getopt(&args, argc, argv);
        for (int i = optind; i < argc; i++) {
                uint64_t fanout;

                if (gen_parse_u64(argv[i], &fanout) < 0 || fanout > 64) {
                        fprintf(stderr, "gen-fork: invalid fanout '%s': 0 to 64\n", argv[i]);
                        return 2;
                }
                width *= fanout;
                processes += width;
        }
        gen_say("%d\n", (int) getpid());
        r = gen_go(&args, probe);
        if (r != 0)
                return r;
        r = tree(args.count, argv + optind, argc - optind);
        gen_say("done %" PRIu64 " %" PRIu64 " %" PRIu64 "\n", gen_now_ns(CLOCK_BOOTTIME),
                args.count * processes, processes);
        return r;
}
