/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <stddef.h>

/*
 * Shared memory that tpd writes and its clients may only read: a memfd that tpd maps read-write,
 * sealed so that nobody can write it, map it writable, grow it or punch it through any fd
 * (F_SEAL_FUTURE_WRITE leaves tpd's own mapping writable), owned by root with mode 0400, and
 * handed out as fresh read-only fds. A client can neither reopen such an fd for writing (the mode)
 * nor change its size (ftruncate needs a writable fd), so tpd never faults on it; tpd shrinks it to
 * nothing when it is done with it, so that an fd a client kept holds no memory. The memory is
 * tpd's: its pages count in tpd's RSS (RssShmem) as tpd first writes them.
 */

typedef struct ShmRegion {
        int fd; /* tpd's, read-write; -1 when none */
        void *mem;
        size_t size;
} ShmRegion;

#define SHM_REGION_NULL ((ShmRegion){ .fd = -1 })

/* A region of size bytes, zero-filled, mapped read-write at ret->mem. */
int shm_region_new(ShmRegion *ret, const char *name, size_t size);
/* A new fd for a reader: read-only, close-on-exec. */
int shm_region_reader_fd(const ShmRegion *r);
void shm_region_done(ShmRegion *r);
/* The same, after truncating it to nothing: every reader's mapping reads SIGBUS from then on. */
void shm_region_retire(ShmRegion *r);
