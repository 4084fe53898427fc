/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/*
 * The unit tests' whole framework: assertions that print what differed and exit 1, a skip that
 * exits 77 (meson's "skipped"), and a file reader. Each test is a plain program; the first failed
 * assertion ends it, so a failure points at one line.
 */

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define TEST_EXIT_SKIP 77

#define TEST_FAIL(...)                                          \
        do {                                                    \
                fprintf(stderr, "%s:%d: ", __FILE__, __LINE__); \
                fprintf(stderr, __VA_ARGS__);                   \
                fputc('\n', stderr);                            \
                exit(EXIT_FAILURE);                             \
        } while (0)

#define ASSERT(expr)                                              \
        do {                                                      \
                if (!(expr))                                      \
                        TEST_FAIL("assertion failed: %s", #expr); \
        } while (0)

#define ASSERT_INT_EQ(a, b)                                                  \
        do {                                                                 \
                long long _a = (long long) (a), _b = (long long) (b);        \
                if (_a != _b)                                                \
                        TEST_FAIL("%s == %s: %lld != %lld", #a, #b, _a, _b); \
        } while (0)

#define ASSERT_U64_EQ(a, b)                                                             \
        do {                                                                            \
                uint64_t _a = (uint64_t) (a), _b = (uint64_t) (b);                      \
                if (_a != _b)                                                           \
                        TEST_FAIL("%s == %s: %" PRIu64 " != %" PRIu64, #a, #b, _a, _b); \
        } while (0)

/* Byte-exact comparison; on failure both sides are printed with non-printable bytes escaped. */
#define ASSERT_MEM_EQ(a, alen, b, blen)                                                               \
        do {                                                                                          \
                const void *_a = (a), *_b = (b);                                                      \
                size_t _al = (alen), _bl = (blen);                                                    \
                if (_al != _bl || (_al > 0 && memcmp(_a, _b, _al) != 0)) {                            \
                        fprintf(stderr, "%s:%d: %s != %s\n  got:      ", __FILE__, __LINE__, #a, #b); \
                        test_print_escaped(stderr, _a, _al);                                          \
                        fprintf(stderr, "\n  expected: ");                                            \
                        test_print_escaped(stderr, _b, _bl);                                          \
                        fputc('\n', stderr);                                                          \
                        exit(EXIT_FAILURE);                                                           \
                }                                                                                     \
        } while (0)

#define ASSERT_STR_EQ(a, b)                                    \
        do {                                                   \
                const char *_s = (a), *_t = (b);               \
                ASSERT(_s != NULL);                            \
                ASSERT_MEM_EQ(_s, strlen(_s), _t, strlen(_t)); \
        } while (0)

static inline void test_print_escaped(FILE *f, const void *p, size_t n) {
        const unsigned char *s = p;

        fputc('"', f);
        for (size_t i = 0; i < n; i++) {
                if (s[i] >= 0x20 && s[i] < 0x7f && s[i] != '\\')
                        fputc(s[i], f);
                else
                        fprintf(f, "\\x%02x", s[i]);
        }
        fprintf(f, "\" (%zu bytes)", n);
}

/* Reads a whole file into a NUL-terminated buffer; NULL (and errno) on failure. */
static inline char *test_read_file(const char *path, size_t *ret_len) {
        struct stat st;
        char *buf;
        ssize_t n;
        size_t len = 0;
        int fd;

        fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return NULL;
        if (fstat(fd, &st) < 0) {
                close(fd);
                return NULL;
        }
        buf = malloc((size_t) st.st_size + 1);
        if (!buf) {
                close(fd);
                return NULL;
        }
        while ((n = read(fd, buf + len, (size_t) st.st_size - len)) > 0)
                len += (size_t) n;
        close(fd);
        if (n < 0 || len != (size_t) st.st_size) {
                free(buf);
                errno = n < 0 ? errno : EIO;
                return NULL;
        }
        buf[len] = 0;
        if (ret_len)
                *ret_len = len;
        return buf;
}
