/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/*
 * What the fuzz targets share with the replay driver: libFuzzer's entry point and a file reader.
 * Built with libFuzzer under clang, or with fuzz-replay.c's main() under any compiler.
 */

#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The whole file, NUL-terminated; NULL with errno set on failure. */
static inline char *fuzz_read_file(const char *path, size_t *ret_len) {
        struct stat st;
        size_t len = 0;
        ssize_t n = 0;
        char *buf;
        int fd;

        fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return NULL;
        if (fstat(fd, &st) < 0 || !(buf = malloc((size_t) st.st_size + 1))) {
                close(fd);
                return NULL;
        }
        while (len < (size_t) st.st_size && (n = read(fd, buf + len, (size_t) st.st_size - len)) > 0)
                len += (size_t) n;
        close(fd);
        if (n < 0) {
                free(buf);
                return NULL;
        }
        buf[len] = 0;
        *ret_len = len;
        return buf;
}
