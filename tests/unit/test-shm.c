/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Shared memory tpd writes and clients only read (daemon/shm.c): tpd's mapping stays writable, a
 * reader's fd maps read-only and sees tpd's writes, and nothing done through a reader's fd writes
 * the memory or changes its size: neither as root nor, in a child that drops to nobody (when the
 * test runs as root), by reopening the fd through /proc.
 */
#include <fcntl.h>
#include <grp.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "shm.h"
#include "tpd-test.h"

#define SIZE (64 * 1024)

/* Every way to write or resize through fd fails; mem is the caller's read-only view. */
static void check_no_write(int fd, const char *who) {
        char path[64];
        void *m;
        int rw;

        m = mmap(NULL, SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (m != MAP_FAILED)
                TEST_FAIL("%s: a writable shared mapping of a reader's fd", who);
        m = mmap(NULL, SIZE, PROT_READ, MAP_SHARED, fd, 0);
        ASSERT(m != MAP_FAILED);
        if (mprotect(m, SIZE, PROT_READ | PROT_WRITE) == 0)
                TEST_FAIL("%s: mprotect made a reader's mapping writable", who);
        ASSERT(munmap(m, SIZE) == 0);
        if (write(fd, "x", 1) >= 0)
                TEST_FAIL("%s: write(2) through a reader's fd", who);
        if (ftruncate(fd, 0) == 0 || ftruncate(fd, SIZE * 2) == 0)
                TEST_FAIL("%s: ftruncate through a reader's fd", who);
        if (fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, 4096) == 0)
                TEST_FAIL("%s: a hole punched through a reader's fd", who);
        if (fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE) == 0)
                TEST_FAIL("%s: a seal added through a reader's fd", who);

        /* Reopened through /proc: root gets a read-write fd, through which the seals refuse every
         * write and growing; shrinking stays possible (tpd empties a region when it is done with
         * it), as root can stop tpd anyway. Nobody else can reopen it (the mode). */
        snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
        rw = open(path, O_RDWR | O_CLOEXEC);
        if (rw >= 0) {
                if (getuid() != 0)
                        TEST_FAIL("%s: a reader's fd reopened read-write", who);
                m = mmap(NULL, SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, rw, 0);
                if (m != MAP_FAILED)
                        TEST_FAIL("%s: a writable mapping through a reopened fd", who);
                if (write(rw, "x", 1) >= 0 || ftruncate(rw, SIZE * 2) == 0)
                        TEST_FAIL("%s: write or growth through a reopened fd", who);
                close(rw);
        }
}

int main(void) {
        ShmRegion r = SHM_REGION_NULL;
        const char *view;
        int fd;

        ASSERT_INT_EQ(shm_region_new(&r, "tpd-test", SIZE), 0);
        ASSERT(r.fd >= 0 && r.mem && r.size == SIZE);
        fd = shm_region_reader_fd(&r);
        ASSERT(fd >= 0);
        ASSERT((fcntl(fd, F_GETFL) & O_ACCMODE) == O_RDONLY);
        ASSERT(fcntl(fd, F_GETFD) & FD_CLOEXEC);

        view = mmap(NULL, SIZE, PROT_READ, MAP_SHARED, fd, 0);
        ASSERT(view != MAP_FAILED);
        ASSERT(view[0] == 0 && view[SIZE - 1] == 0);
        /* tpd's mapping stays writable after the seals, and readers see what it writes. */
        memcpy(r.mem, "hello", 6);
        memcpy((char *) r.mem + SIZE - 6, "world", 6);
        ASSERT(strcmp(view, "hello") == 0 && strcmp(view + SIZE - 6, "world") == 0);

        check_no_write(fd, "root");
        if (geteuid() == 0) {
                pid_t pid = fork();
                int status;

                ASSERT(pid >= 0);
                if (pid == 0) {
                        if (setgroups(0, NULL) < 0 || setgid(65534) < 0 || setuid(65534) < 0)
                                _exit(2);
                        check_no_write(fd, "nobody");
                        _exit(0);
                }
                ASSERT(waitpid(pid, &status, 0) == pid);
                ASSERT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        } else
                printf("not root: the test as nobody is left out\n");

        ASSERT(strcmp(view, "hello") == 0 && strcmp(view + SIZE - 6, "world") == 0);
        ASSERT(munmap((void *) view, SIZE) == 0);
        shm_region_done(&r);
        ASSERT(r.fd == -1 && !r.mem);
        close(fd);

        /* Retired: an fd a reader kept holds nothing. */
        ASSERT_INT_EQ(shm_region_new(&r, "tpd-test", SIZE), 0);
        fd = shm_region_reader_fd(&r);
        ASSERT(fd >= 0);
        memset(r.mem, 1, SIZE);
        shm_region_retire(&r);
        ASSERT(r.fd == -1 && !r.mem);
        {
                struct stat st;

                ASSERT(fstat(fd, &st) == 0);
                ASSERT_INT_EQ(st.st_size, 0);
        }
        close(fd);
        printf("shm: read-only for readers, writable for tpd\n");
        return 0;
}
