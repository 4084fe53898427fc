/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * gen-pingpong: two processes bounce one byte over a pair of pipes, N round trips, so that every
 * round trip is a pair of sched:sched_switch records between two known pids.
 *
 *   gen-pingpong [--count N] [--cpu CPU] [--no-wait]
 *
 * The parent names itself "tpd-pp-parent" and the child "tpd-pp-child" (prctl PR_SET_NAME) before
 * anything is traced, so that every record carries stable, recognisable comms. With --cpu both are
 * pinned to that CPU, which makes them switch directly to each other.
 *
 * stdout: "<parent_pid> <child_pid>" once the child is ready; then, after one line on stdin (not
 * with --no-wait), "go <boottime_ns>", the N round trips, the child is reaped and
 * "done <boottime_ns> <N>" is printed. Exit 0; EOF on stdin before the go exits 3 (the child is
 * killed and reaped first).
 */

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gen-common.h"

static int read_byte(int fd) {
        char b;
        ssize_t n;

        do
                n = read(fd, &b, 1);
        while (n < 0 && errno == EINTR);
        return n == 1 ? 0 : -1;
}

static int write_byte(int fd) {
        ssize_t n;

        do
                n = write(fd, "x", 1);
        while (n < 0 && errno == EINTR);
        return n == 1 ? 0 : -1;
}

static int child_run(int in_fd, int out_fd, uint64_t count) {
        uint64_t i;

        prctl(PR_SET_NAME, "tpd-pp-child", 0, 0, 0);
        /* Tell the parent the name is set: from now on nothing about the child changes. */
        if (write_byte(out_fd) < 0)
                return 1;
        for (i = 0; i < count; i++)
                if (read_byte(in_fd) < 0 || write_byte(out_fd) < 0)
                        return 1;
        return 0;
}

int main(int argc, char **argv) {
        GenArgs args = {
                .name = "gen-pingpong",
                .usage = "usage: gen-pingpong [--count N] [--cpu CPU] [--no-wait]\n",
                .flags = GEN_OPT_NO_WAIT,
                .count = 10000,
        };
        uint64_t count, i;
        int r, status, to_child[2], to_parent[2];
        pid_t child;

        /* No options of its own: one call reads the whole command line. */
        gen_getopt(&args, argc, argv);
        count = args.count;

        prctl(PR_SET_NAME, "tpd-pp-parent", 0, 0, 0);
        /* Pinned before the fork, so the child inherits the affinity. */
        if (gen_pin(&args) < 0)
                return 1;
        if (pipe2(to_child, O_CLOEXEC) < 0 || pipe2(to_parent, O_CLOEXEC) < 0) {
                fprintf(stderr, "gen-pingpong: pipe: %s\n", strerror(errno));
                return 1;
        }
        fflush(stdout);
        child = fork();
        if (child < 0) {
                fprintf(stderr, "gen-pingpong: fork: %s\n", strerror(errno));
                return 1;
        }
        if (child == 0) {
                close(to_child[1]);
                close(to_parent[0]);
                _exit(child_run(to_child[0], to_parent[1], count));
        }
        close(to_child[0]);
        close(to_parent[1]);

        if (read_byte(to_parent[0]) < 0) {
                fprintf(stderr, "gen-pingpong: child did not start\n");
                return 1;
        }
        gen_say("%d %d\n", (int) getpid(), (int) child);

        /* Without a probe any line is the go: the only failure is EOF. */
        r = gen_go(&args, NULL);
        if (r != 0) {
                kill(child, SIGKILL);
                waitpid(child, NULL, 0);
                return r;
        }

        for (i = 0; i < count; i++)
                if (write_byte(to_child[1]) < 0 || read_byte(to_parent[0]) < 0) {
                        fprintf(stderr, "gen-pingpong: round trip %" PRIu64 " failed\n", i);
                        kill(child, SIGKILL);
                        waitpid(child, NULL, 0);
                        return 1;
                }

        if (waitpid(child, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
                fprintf(stderr, "gen-pingpong: child failed\n");
                return 1;
        }
        gen_say("done %" PRIu64 " %" PRIu64 "\n", gen_now_ns(CLOCK_BOOTTIME), count);
        return 0;
}
