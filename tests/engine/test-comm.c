/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The comm cache names a record's pid as the task was called when the record was written, as far as
 * a later lookup can tell: a name looked up at T serves records written until T, never later ones
 * (a prctl() or exec may have renamed the task since), however long the flush generation lasts.
 * A gone task is named from a saved_cmdlines read newer than its record, or not at all; the table
 * is reread no more often than every ten generations.
 *
 * No choice of pids thrashes it: pids that agree modulo 4096 (or any power of two) all stay cached,
 * as do up to COMM_CACHE_WAYS pids of one set, and however many pids are looked up again, /proc is
 * read no more than the budget allows; beyond it a pid keeps the name it had.
 */
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>

#include "../unit/tpd-test.h"
#include "comm.h"
#include "util.h"

#define PROC_PID_INIT_INO 0xEFFFFFFCU
/* Above PID_MAX_LIMIT (include/linux/threads.h): never a task, so /proc never knows them. */
#define NO_TASK_PID 4194305

static uint64_t proc_reads(const CommCache *c) {
        CommCacheStats st;

        comm_cache_get_stats(c, &st);
        return st.proc_reads;
}

static uint64_t boot_ns(void) {
        struct timespec ts;

        ASSERT(clock_gettime(CLOCK_BOOTTIME, &ts) == 0);
        return (uint64_t) ts.tv_sec * 1000000000ULL + (uint64_t) ts.tv_nsec;
}

static void write_saved(const char *path, int pid, const char *name) {
        FILE *f = fopen(path, "we");

        ASSERT(f);
        fprintf(f, "1 systemd\n%d %s\n", pid, name);
        ASSERT(fclose(f) == 0);
}

static void test_rename(const char *saved) {
        CommCache *c = NULL;
        uint64_t before, after;
        int pid = getpid();

        ASSERT_INT_EQ(comm_cache_new(saved, &c), 0);
        comm_cache_set_clock(c, "boot");
        ASSERT(prctl(PR_SET_NAME, "comm-before", 0, 0, 0) == 0);
        before = boot_ns();
        ASSERT_STR_EQ(comm_cache_lookup(c, pid, before), "comm-before");
        ASSERT(prctl(PR_SET_NAME, "comm-after", 0, 0, 0) == 0);
        after = boot_ns();
        /* Written before the lookup: the lookup's name. Written after the rename, in the same
         * generation: the new name, not the cached one. */
        ASSERT_STR_EQ(comm_cache_lookup(c, pid, before), "comm-before");
        ASSERT_STR_EQ(comm_cache_lookup(c, pid, after), "comm-after");
        ASSERT_STR_EQ(comm_cache_lookup(c, pid, after), "comm-after");
        ASSERT_STR_EQ(comm_cache_lookup(c, 0, after), "<idle>");

        /* A trace clock without a system clock: names last one generation, as before. */
        comm_cache_set_clock(c, "local");
        ASSERT(prctl(PR_SET_NAME, "comm-local", 0, 0, 0) == 0);
        ASSERT_STR_EQ(comm_cache_lookup(c, pid, 1), "comm-local");
        ASSERT(prctl(PR_SET_NAME, "comm-local2", 0, 0, 0) == 0);
        ASSERT_STR_EQ(comm_cache_lookup(c, pid, 2), "comm-local");
        comm_cache_next_generation(c);
        ASSERT_STR_EQ(comm_cache_lookup(c, pid, 3), "comm-local2");
        comm_cache_free(c);
}

static void test_gone(const char *saved) {
        CommCache *c = NULL;
        uint64_t early, late;
        int status;
        pid_t child = fork();

        ASSERT(child >= 0);
        if (child == 0)
                _exit(0);
        ASSERT(waitpid(child, &status, 0) == child);

        ASSERT_INT_EQ(comm_cache_new(saved, &c), 0);
        comm_cache_set_clock(c, "boot");
        early = boot_ns();
        write_saved(saved, child, "name-a");
        ASSERT_STR_EQ(comm_cache_lookup(c, child, early), "name-a");

        /* The kernel's table changes (the task was renamed and switched once more before it exited);
         * a record written after tpd's read may carry the new name: unnamed rather than "name-a"
         * while the table is too recent to reread (ten generations), then named from the reread. */
        write_saved(saved, child, "name-b");
        late = boot_ns();
        ASSERT(comm_cache_lookup(c, child, late) == NULL);
        for (int i = 0; i < 9; i++) {
                comm_cache_next_generation(c);
                ASSERT(comm_cache_lookup(c, child, late) == NULL);
        }
        comm_cache_next_generation(c);
        ASSERT_STR_EQ(comm_cache_lookup(c, child, late), "name-b");
        /* Records before the reread are served from it without another. */
        write_saved(saved, child, "name-c");
        ASSERT_STR_EQ(comm_cache_lookup(c, child, early), "name-b");
        comm_cache_free(c);
}

/* pids beyond any task's, named "no-task-<i>" in the table. */
static void write_saved_many(const char *path, const int *pids, size_t n) {
        FILE *f = fopen(path, "we");

        ASSERT(f);
        for (size_t i = 0; i < n; i++)
                fprintf(f, "%d no-task-%zu\n", pids[i], i);
        ASSERT(fclose(f) == 0);
}

static void check_named(CommCache *c, const int *pids, size_t n, uint64_t ts) {
        char want[32];

        for (size_t i = 0; i < n; i++) {
                snprintf(want, sizeof(want), "no-task-%zu", i);
                ASSERT_STR_EQ(comm_cache_lookup(c, pids[i], ts), want);
        }
}

static void test_sets(const char *saved) {
        int congruent[64], set[COMM_CACHE_WAYS + 1];
        CommCache *c = NULL;
        size_t n = 0;
        uint64_t ts, reads;

        ASSERT_INT_EQ(comm_cache_new(saved, &c), 0);
        comm_cache_set_clock(c, "boot");

        /* Pids that share a slot of a table indexed by pid % 4096: each in a set as if at random,
         * so all 64 stay cached (that more than COMM_CACHE_WAYS of them share a set is about as
         * likely as guessing a 64-bit key). */
        for (size_t i = 0; i < ELEMENTSOF(congruent); i++)
                congruent[i] = NO_TASK_PID + (int) i * 4096;
        write_saved_many(saved, congruent, ELEMENTSOF(congruent));
        ts = boot_ns();
        check_named(c, congruent, ELEMENTSOF(congruent), ts);
        reads = proc_reads(c);
        ASSERT_INT_EQ(reads, ELEMENTSOF(congruent));
        for (int round = 0; round < 3; round++)
                check_named(c, congruent, ELEMENTSOF(congruent), ts);
        ASSERT_INT_EQ(proc_reads(c), reads);

        /* COMM_CACHE_WAYS pids of one set all stay; one more evicts the least recently used. A new
         * cache, with a new key: the set of a pid is found by asking. */
        comm_cache_free(c);
        ASSERT_INT_EQ(comm_cache_new(saved, &c), 0);
        comm_cache_set_clock(c, "boot");
        for (int pid = NO_TASK_PID; n < ELEMENTSOF(set); pid++)
                if (comm_cache_set_of(c, pid) == comm_cache_set_of(c, NO_TASK_PID + 1))
                        set[n++] = pid;
        write_saved_many(saved, set, ELEMENTSOF(set));
        ts = boot_ns();
        check_named(c, set, COMM_CACHE_WAYS, ts);
        ASSERT_INT_EQ(proc_reads(c), COMM_CACHE_WAYS);
        check_named(c, set, COMM_CACHE_WAYS, ts);
        ASSERT_INT_EQ(proc_reads(c), COMM_CACHE_WAYS);
        ASSERT_STR_EQ(comm_cache_lookup(c, set[COMM_CACHE_WAYS], ts), "no-task-8");
        ASSERT_INT_EQ(proc_reads(c), COMM_CACHE_WAYS + 1);
        for (size_t i = 1; i < COMM_CACHE_WAYS; i++)
                ASSERT(comm_cache_lookup(c, set[i], ts));
        ASSERT_INT_EQ(proc_reads(c), COMM_CACHE_WAYS + 1);
        ASSERT_STR_EQ(comm_cache_lookup(c, set[0], ts), "no-task-0");
        ASSERT_INT_EQ(proc_reads(c), COMM_CACHE_WAYS + 2);
        comm_cache_free(c);
}

static void test_budget(const char *saved) {
        enum { N = 4 * COMM_CACHE_PROC_BURST };
        static int pids[N];
        static unsigned in_set[1U << 16];
        CommCache *c = NULL;
        CommCacheStats st0, st;
        uint64_t named = 0;
        uint64_t ts, allowed = COMM_CACHE_PROC_BURST + N / COMM_CACHE_PROC_COST;
        size_t n = 0;

        /* Pids that all stay in the cache: a set's COMM_CACHE_WAYS at most. With consecutive pids,
         * some keys of the hash put more than that in one set (about 1 start in 20 here), and a pid
         * that was evicted is read again whatever the budget, which is not what this test is about. */
        ASSERT_INT_EQ(comm_cache_new(saved, &c), 0);
        comm_cache_set_clock(c, "boot");
        for (int pid = NO_TASK_PID; n < N; pid++) {
                unsigned set = comm_cache_set_of(c, pid);

                ASSERT(set < ELEMENTSOF(in_set));
                if (in_set[set] < COMM_CACHE_WAYS) {
                        in_set[set]++;
                        pids[n++] = pid;
                }
        }
        write_saved_many(saved, pids, N);
        ts = boot_ns();
        /* Each pid's first lookup reads /proc whatever the budget: nothing else knows a new pid. */
        check_named(c, pids, N, ts);
        comm_cache_get_stats(c, &st0);
        ASSERT_INT_EQ(st0.proc_reads, N);

        /* A crowd of pids, each once more for records written after their lookups, in the next
         * generation: /proc is read no more than the budget allows, and the rest keep the name
         * they had. */
        comm_cache_next_generation(c);
        ts = boot_ns();
        for (size_t i = 0; i < N; i++)
                named += comm_cache_lookup(c, pids[i], ts) != NULL;
        comm_cache_get_stats(c, &st);
        /* (A pid read again is gone, and unnamed after the table's read: see test_gone().) */
        ASSERT_INT_EQ(named, st.proc_deferred);
        ASSERT(st.proc_reads - st0.proc_reads <= allowed);
        ASSERT(st.proc_reads - st0.proc_reads >= COMM_CACHE_PROC_BURST);
        ASSERT_INT_EQ(st.proc_reads - st0.proc_reads + st.proc_deferred, N);

        /* The next generation has a budget again. */
        comm_cache_next_generation(c);
        ASSERT_STR_EQ(comm_cache_lookup(c, getpid(), boot_ns()), "test-comm");
        comm_cache_get_stats(c, &st0);
        ASSERT_INT_EQ(st0.proc_reads, st.proc_reads + 1);
        comm_cache_free(c);
}

int main(void) {
        char saved[] = "/tmp/test-comm-XXXXXX";
        struct stat st;
        int fd;

        if (stat("/proc/self/ns/pid", &st) < 0 || st.st_ino != PROC_PID_INIT_INO) {
                fprintf(stderr, "not in the initial PID namespace: /proc is not consulted\n");
                return TEST_EXIT_SKIP;
        }
        fd = mkstemp(saved);
        ASSERT(fd >= 0);
        close(fd);
        test_rename(saved);
        test_gone(saved);
        ASSERT(prctl(PR_SET_NAME, "test-comm", 0, 0, 0) == 0);
        test_sets(saved);
        test_budget(saved);
        unlink(saved);
        return 0;
}
