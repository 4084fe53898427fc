/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * gen-ring: PROCS processes pass a byte round a ring of pipes, N rounds, so that every round is
 * PROCS sched:sched_switch records between known pids. With --cpu all are pinned to that CPU and
 * switch directly from one to the next.
 *
 *   gen-ring [--procs PROCS] [--congruent M] [--count N] [--rate ROUNDS_PER_S] [--cpu CPU] [--no-wait]
 *
 * With --congruent M every member's pid is congruent to the first's modulo M: before each member
 * is forked, short-lived children (vfork) use up pids until the next one comes round, as any user
 * can. That is given up after --search-seconds (default 60), exit 4. Without it the members have
 * the pids the kernel hands out, consecutive on a quiet machine.
 *
 * Member i names itself "tpd-ring-<i>" (prctl PR_SET_NAME) before anything is traced. stdout: the
 * PROCS pids on one line once every member is ready; then it reads commands on stdin (not with
 * --no-wait): "probe" makes one round and answers "probed <boottime_ns>"; "go" or an empty line
 * prints "go <boottime_ns>" and makes the N rounds, then one more that lets the members exit; they
 * are reaped and "done <boottime_ns> <N>" is printed. Exit 0; EOF on stdin before the go exits 3
 * (the members are killed and reaped first).
 */

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gen-common.h"

#define RING_MAX 64
#define GEN_EXIT_SEARCH 4

/* The leader's ends of the ring, for the rounds and the probe. */
static int ring_out = -1, ring_in = -1;

static int read_byte(int fd, char *ret) {
        char b;
        ssize_t n;

        do
                n = read(fd, &b, 1);
        while (n < 0 && errno == EINTR);
        if (n == 1 && ret)
                *ret = b;
        return n == 1 ? 0 : -1;
}

static int write_byte(int fd, char b) {
        ssize_t n;

        do
                n = write(fd, &b, 1);
        while (n < 0 && errno == EINTR);
        return n == 1 ? 0 : -1;
}

static int round_trip(char b) {
        return write_byte(ring_out, b) < 0 || read_byte(ring_in, NULL) < 0 ? -1 : 0;
}

static void probe(void) {
        if (round_trip('x') < 0) {
                fprintf(stderr, "gen-ring: probe round failed\n");
                exit(1);
        }
}

/* Passes the byte on until the leader sends 'q' round. */
static int member_run(unsigned i, int in_fd, int out_fd, int ready_fd) {
        char name[16], b;

        /* Nothing would wake a member whose leader died: the pipes' other ends are shared. */
        prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
        snprintf(name, sizeof(name), "tpd-ring-%u", i);
        prctl(PR_SET_NAME, name, 0, 0, 0);
        if (write_byte(ready_fd, 'r') < 0)
                return 1;
        do
                if (read_byte(in_fd, &b) < 0 || write_byte(out_fd, b) < 0)
                        return 1;
        while (b != 'q');
        return 0;
}

static void kill_members(const pid_t *pids, unsigned n) {
        for (unsigned i = 1; i < n; i++)
                if (pids[i] > 0) {
                        kill(pids[i], SIGKILL);
                        waitpid(pids[i], NULL, 0);
                }
}

/* Uses up pids with children that exit at once until the last one handed out is one short of a
 * pid congruent to want modulo m. */
static int burn_pids_until(uint64_t m, uint64_t want, uint64_t deadline_ns) {
        for (;;) {
                pid_t p;

                if (gen_now_ns(CLOCK_MONOTONIC) > deadline_ns)
                        return -ETIMEDOUT;
                p = vfork();
                if (p == 0)
                        _exit(0);
                if (p < 0)
                        return -errno;
                waitpid(p, NULL, 0);
                if (((uint64_t) p + 1) % m == want)
                        return 0;
        }
}

/* The ring's pipes (member i reads ring[i], writes ring[i + 1]) and the one the members say they
 * are ready on. */
static int ring_open(int ring[][2], unsigned n, int ready[2]) {
        for (unsigned i = 0; i < n; i++)
                if (pipe2(ring[i], O_CLOEXEC) < 0) {
                        fprintf(stderr, "gen-ring: pipe: %s\n", strerror(errno));
                        return -1;
                }
        if (pipe2(ready, O_CLOEXEC) < 0) {
                fprintf(stderr, "gen-ring: pipe: %s\n", strerror(errno));
                return -1;
        }
        return 0;
}

/* Forks members 1 to n - 1 into pids[]; with a modulus each gets a pid congruent to pids[0]'s.
 * Returns 0 or the exit code. */
static int ring_fork_members(pid_t *pids, unsigned n, int ring[][2], int ready_fd, uint64_t modulus,
                             uint64_t search_s) {
        uint64_t want = 0, deadline_ns;
        int r;

        if (modulus)
                want = (uint64_t) pids[0] % modulus;
        deadline_ns = gen_now_ns(CLOCK_MONOTONIC) + search_s * 1000000000ULL;

        fflush(stdout);
        for (unsigned i = 1; i < n; i++)
                for (;;) {
                        pid_t p;

                        if (modulus) {
                                r = burn_pids_until(modulus, want, deadline_ns);
                                if (r < 0) {
                                        fprintf(stderr,
                                                "gen-ring: no pid congruent to %d modulo %" PRIu64
                                                " for member %u: %s\n",
                                                (int) pids[0], modulus, i, strerror(-r));
                                        return r == -ETIMEDOUT ? GEN_EXIT_SEARCH : 1;
                                }
                        }
                        p = fork();
                        if (p < 0) {
                                fprintf(stderr, "gen-ring: fork: %s\n", strerror(errno));
                                return 1;
                        }
                        if (p == 0) {
                                /* Another process took the pid: this one is not a member. */
                                if (modulus && (uint64_t) getpid() % modulus != want)
                                        _exit(0);
                                _exit(member_run(i, ring[i][0], ring[(i + 1) % n][1], ready_fd));
                        }
                        if (modulus && (uint64_t) p % modulus != want) {
                                waitpid(p, NULL, 0);
                                continue;
                        }
                        pids[i] = p;
                        break;
                }
        return 0;
}

static int ring_await_ready(int ready_fd, unsigned n) {
        for (unsigned i = 1; i < n; i++)
                if (read_byte(ready_fd, NULL) < 0) {
                        fprintf(stderr, "gen-ring: a member did not start\n");
                        return 1;
                }
        return 0;
}

/* The count rounds at the pacer's rate, then the 'q' round that lets the members exit. */
static int ring_rounds(const GenArgs *args) {
        GenPacer pacer;

        gen_pacer_init(&pacer, args->rate);
        for (uint64_t i = 0; i < args->count; i++) {
                gen_pacer_wait(&pacer, i);
                if (round_trip('x') < 0) {
                        fprintf(stderr, "gen-ring: round %" PRIu64 " failed\n", i);
                        return 1;
                }
        }
        if (round_trip('q') < 0) {
                fprintf(stderr, "gen-ring: the last round failed\n");
                return 1;
        }
        return 0;
}

static int ring_reap(const pid_t *pids, unsigned n) {
        for (unsigned i = 1; i < n; i++) {
                int status;

                if (waitpid(pids[i], &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
                        fprintf(stderr, "gen-ring: member %u failed\n", i);
                        return 1;
                }
        }
        return 0;
}

int main(int argc, char **argv) {
        static const struct option extra[] = {
                { "procs", required_argument, NULL, 'p' },
                { "congruent", required_argument, NULL, 'm' },
                { "search-seconds", required_argument, NULL, 's' },
                {},
        };
        GenArgs args = {
                .name = "gen-ring",
                .usage = "usage: gen-ring [--procs PROCS] [--congruent M] [--search-seconds S] [--count N] "
                         "[--rate ROUNDS_PER_S] [--cpu CPU] [--no-wait]\n",
                .flags = GEN_OPT_NO_WAIT | GEN_OPT_RATE,
                .extra = extra,
                .count = 10000,
        };
        uint64_t procs = 2, modulus = 0, search_s = 60;
        pid_t pids[RING_MAX] = {};
        int ring[RING_MAX][2], ready[2], c, r;
        unsigned n;

        while ((c = gen_getopt(&args, argc, argv)) > 0) {
                uint64_t *v = c == 'p' ? &procs : c == 'm' ? &modulus : &search_s;
                if (gen_parse_u64(optarg, v) < 0)
                        gen_bad_usage(&args);
        }
        if (procs < 2 || procs > RING_MAX || modulus == 1)
                gen_bad_usage(&args);
        n = (unsigned) procs;

        /* Pinned before the forks, so the members inherit the affinity. */
        if (gen_pin(&args) < 0)
                return 1;
        if (ring_open(ring, n, ready) < 0)
                return 1;
        prctl(PR_SET_NAME, "tpd-ring-0", 0, 0, 0);
        pids[0] = getpid();

        r = ring_fork_members(pids, n, ring, ready[1], modulus, search_s);
        if (r == 0)
                r = ring_await_ready(ready[0], n);
        if (r != 0) {
                kill_members(pids, n);
                return r;
        }
        for (unsigned i = 0; i < n; i++)
                printf("%s%d", i ? " " : "", (int) pids[i]);
        gen_say("\n");

        ring_out = ring[1][1];
        ring_in = ring[0][0];
        r = gen_go(&args, probe);
        if (r == 0)
                r = ring_rounds(&args);
        if (r != 0) {
                kill_members(pids, n);
                return r;
        }

        if (ring_reap(pids, n) != 0)
                return 1;
        gen_say("done %" PRIu64 " %" PRIu64 "\n", gen_now_ns(CLOCK_BOOTTIME), args.count);
        return 0;
}
