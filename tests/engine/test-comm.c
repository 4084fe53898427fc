/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The comm cache names a record's pid as the task was called when the record was written, as far as
 * a later lookup can tell: a name looked up at T serves records written until T, never later ones
 * (a prctl() or exec may have renamed the task since), however long the flush generation lasts.
 * A gone task is named from a saved_cmdlines read newer than its record, or not at all; the table
 * is reread no more often than every ten generations.
 */
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>

#include "../unit/tpd-test.h"
#include "comm.h"

#define PROC_PID_INIT_INO 0xEFFFFFFCU

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
        unlink(saved);
        return 0;
}
