/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"
#include "shm.h"
#include "util.h"

#ifndef MFD_NOEXEC_SEAL
#define MFD_NOEXEC_SEAL 0x0008U
#endif

int shm_region_new(ShmRegion *ret, const char *name, size_t size) {
        _cleanup_close_ int fd = -1;
        void *mem;

        /* Never executable (and no warning from kernels since 6.3, nor a refusal under
         * vm.memfd_noexec=2); older kernels do not know the flag. */
        fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING | MFD_NOEXEC_SEAL);
        if (fd < 0 && errno == EINVAL)
                fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
        if (fd < 0)
                return -errno;
        if (ftruncate(fd, (off_t) size) < 0)
                return -errno;
        mem = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (mem == MAP_FAILED)
                return -errno;
        /* A memfd is made 0777: anyone holding an fd of it could reopen it read-write through
         * /proc/PID/fd. The seals then refuse every write but tpd's mapping's, and a change of
         * size, which would make tpd fault on its own mapping. */
        if (fchmod(fd, 0400) < 0 ||
            fcntl(fd, F_ADD_SEALS, F_SEAL_GROW | F_SEAL_FUTURE_WRITE | F_SEAL_SEAL) < 0) {
                int r = -errno;
                (void) munmap(mem, size);
                return r;
        }
        *ret = (ShmRegion){ .fd = TAKE_FD(fd), .mem = mem, .size = size };
        return 0;
}

int shm_region_reader_fd(const ShmRegion *r) {
        char path[64];
        int fd;

        /* Reopened, not duplicated: a dup shares tpd's read-write open file. */
        snprintf(path, sizeof(path), "/proc/self/fd/%d", r->fd);
        fd = open(path, O_RDONLY | O_CLOEXEC);
        return fd < 0 ? -errno : fd;
}

void shm_region_done(ShmRegion *r) {
        if (r->mem)
                (void) munmap(r->mem, r->size);
        safe_close(r->fd);
        *r = SHM_REGION_NULL;
}

void shm_region_retire(ShmRegion *r) {
        /* Only tpd's fd may change the size (the readers' are read-only): a client that kept its
         * fd keeps no memory, and reads SIGBUS where the region was. */
        if (r->fd >= 0 && ftruncate(r->fd, 0) < 0)
                log_debug_errno(errno, "Failed to truncate shared memory: %m");
        shm_region_done(r);
}
