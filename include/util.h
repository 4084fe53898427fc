/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/*
 * Small ownership helpers in the style of systemd: variables declared with a cleanup attribute are
 * released when they go out of scope, and TAKE_PTR()/TAKE_FD() hand ownership over explicitly.
 */

#define _cleanup_(f) __attribute__((cleanup(f)))
#define _unused_ __attribute__((unused))
#define _likely_(x) __builtin_expect(!!(x), 1)
#define _unlikely_(x) __builtin_expect(!!(x), 0)
#define _printf_(a, b) __attribute__((format(printf, a, b)))

#define ELEMENTSOF(x) (sizeof(x) / sizeof((x)[0]))
#define MIN(a, b) ((a) < (b) ? (a) : (b))
#define MAX(a, b) ((a) > (b) ? (a) : (b))

#define TAKE_PTR(p)                        \
        ({                                 \
                __typeof__(p) _ptr_ = (p); \
                (p) = NULL;                \
                _ptr_;                     \
        })

#define TAKE_FD(fd)              \
        ({                       \
                int _fd_ = (fd); \
                (fd) = -1;       \
                _fd_;            \
        })

static inline void freep(void *p) {
        free(*(void **) p);
}
#define _cleanup_free_ _cleanup_(freep)

static inline int safe_close(int fd) {
        if (fd >= 0) {
                int saved = errno;
                close(fd);
                errno = saved;
        }
        return -1;
}

static inline void closep(int *fd) {
        safe_close(*fd);
}
#define _cleanup_close_ _cleanup_(closep)

/* Declares foop() for a destructor foo() that accepts NULL, for use with _cleanup_(). */
#define DEFINE_TRIVIAL_CLEANUP_FUNC(type, func) \
        static inline void func##p(type *p) {   \
                if (*p)                         \
                        func(*p);               \
        }

/* A clock's time in nanoseconds, for what is compared with trace time stamps. */
static inline uint64_t now_nsec(clockid_t clock) {
        struct timespec ts;

        clock_gettime(clock, &ts);
        return (uint64_t) ts.tv_sec * 1000000000ULL + (uint64_t) ts.tv_nsec;
}

/* A clock's time in microseconds (CLOCK_MONOTONIC for timeouts, intervals and rates): every time
 * tpd and tpctl take is read here or by now_nsec(). */
static inline uint64_t now_usec(clockid_t clock) {
        return now_nsec(clock) / 1000;
}

/* Whether this process sees pids as trace records carry them: the initial PID namespace's (the inode
 * number of include/linux/proc_ns.h). */
static inline bool pid_namespace_is_initial(void) {
        struct stat st;

        return stat("/proc/self/ns/pid", &st) == 0 && st.st_ino == 0xEFFFFFFCU;
}

static inline bool streq(const char *a, const char *b) {
        return strcmp(a, b) == 0;
}

static inline bool streq_ptr(const char *a, const char *b) {
        if (!a || !b)
                return a == b;
        return streq(a, b);
}

static inline const char *strempty(const char *s) {
        return s ?: "";
}

/* Returns -errno of the last failed libc call, never 0: a caller that saw failure must fail. */
static inline int negative_errno(void) {
        return errno > 0 ? -errno : -EIO;
}

/* Writes all of p to a blocking fd, across short writes and EINTR. */
static inline int write_all(int fd, const void *p, size_t len) {
        const char *c = p;

        while (len > 0) {
                ssize_t k = write(fd, c, len);
                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        return negative_errno();
                }
                if (k == 0)
                        return -EIO;
                c += k;
                len -= (size_t) k;
        }
        return 0;
}

/* NULL-terminated string arrays. */
static inline size_t strv_length(char *const *l) {
        size_t n = 0;
        while (l && l[n])
                n++;
        return n;
}

static inline char **strv_free(char **l) {
        for (size_t i = 0; l && l[i]; i++)
                free(l[i]);
        free(l);
        return NULL;
}

static inline void strv_freep(char ***l) {
        strv_free(*l);
}
#define _cleanup_strv_free_ _cleanup_(strv_freep)

static inline void *mfree(void *p) {
        free(p);
        return NULL;
}

/* Makes room in the array *p, of *cap elements of size bytes, for n: doubling, from 16. 0, or
 * -ENOMEM with the array as it was. Use ARRAY_RESERVE(). */
static inline int array_reserve(void **p, size_t *cap, size_t n, size_t size) {
        size_t c = *cap ? *cap : 16;
        void *q;

        if (n <= *cap)
                return 0;
        while (c < n)
                c *= 2;
        q = reallocarray(*p, c, size);
        if (!q)
                return -ENOMEM;
        *p = q;
        *cap = c;
        return 0;
}
#define ARRAY_RESERVE(p, cap, n) array_reserve((void **) &(p), &(cap), (n), sizeof(*(p)))

/* A key for hashing values a user may choose (pids), drawn anew by each table: a user who cannot
 * see it cannot steer values into one bucket. Not a secret worth blocking for at boot: the clock
 * when getrandom() has nothing yet. Odd, for hash_bucket(). */
static inline uint64_t hash_key_new(void) {
        struct timespec ts = {};
        uint64_t k;

        if (getrandom(&k, sizeof(k), GRND_NONBLOCK) != (ssize_t) sizeof(k)) {
                (void) clock_gettime(CLOCK_BOOTTIME, &ts);
                k = ((uint64_t) ts.tv_sec * 1000000000ULL + (uint64_t) ts.tv_nsec) * 0x9E3779B97F4A7C15ULL ^
                    (uint64_t) getpid();
        }
        return k | 1;
}

/* The bucket of value among 2^bits (1..32): multiply by the key, then MurmurHash3's 64-bit finalizer.
 * Multiply-shift alone is universal (two given values share a bucket with probability at most
 * 2^(1 - bits)), but it maps values in arithmetic progression (pids that agree modulo a power of two,
 * which a user gets by forking) to a progression of buckets: for about one key in 2^bits, dozens of
 * them share one. The finalizer, a bijection that mixes every bit into every other, scatters them. */
static inline uint32_t hash_bucket(uint64_t key, uint32_t value, unsigned bits) {
        uint64_t h = (uint64_t) value * key;

        h ^= h >> 33;
        h *= 0xff51afd7ed558ccdULL;
        h ^= h >> 33;
        h *= 0xc4ceb9fe1a85ec53ULL;
        h ^= h >> 33;
        return (uint32_t) (h >> (64 - bits));
}

/* The integer of size bytes (1, 2, 4; anything else reads 8) at p, which may be unaligned, in the
 * machine's byte order: a field of a record, as the kernel wrote it. */
static inline uint64_t load_unsigned(const uint8_t *p, unsigned size) {
        switch (size) {
        case 1:
                return *p;
        case 2: {
                uint16_t v;
                memcpy(&v, p, 2);
                return v;
        }
        case 4: {
                uint32_t v;
                memcpy(&v, p, 4);
                return v;
        }
        default: {
                uint64_t v;
                memcpy(&v, p, 8);
                return v;
        }
        }
}

/* The inverse of load_unsigned(): the low size bytes of v at p, in the machine's byte order. */
static inline void store_unsigned(uint8_t *p, uint64_t v, unsigned size) {
        switch (size) {
        case 1:
                *p = (uint8_t) v;
                break;
        case 2: {
                uint16_t x = (uint16_t) v;
                memcpy(p, &x, 2);
                break;
        }
        case 4: {
                uint32_t x = (uint32_t) v;
                memcpy(p, &x, 4);
                break;
        }
        default:
                memcpy(p, &v, 8);
        }
}

static inline int64_t load_signed(const uint8_t *p, unsigned size) {
        switch (size) {
        case 1:
                return (int8_t) *p;
        case 2:
                return (int16_t) load_unsigned(p, 2);
        case 4:
                return (int32_t) load_unsigned(p, 4);
        default:
                return (int64_t) load_unsigned(p, 8);
        }
}
