/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <stdbool.h>
#include <stddef.h>

/* Lines of a file, each at most max bytes (the newline not counted), in a buffer that grows up to
 * that: a file of one endless line costs no more. */
typedef struct LineReader {
        int fd;
        size_t max;
        char *buf;
        size_t cap;
        size_t start, end; /* buf[start, end): read, not yet returned */
        size_t scanned;    /* buf[start, scanned) holds no newline */
        bool eof;
} LineReader;

/* Starts reading fd, with head (n_head bytes) read of it already. 0 or -ENOMEM. */
int line_reader_init(LineReader *r, int fd, size_t max, const void *head, size_t n_head);
void line_reader_done(LineReader *r);

/* The next line, its newline included (none at the end of the file), in *ret (valid until the
 * next call): 1, 0 after the last line, -E2BIG for a line longer than max, or another negative
 * errno. */
int line_next(LineReader *r, const char **ret, size_t *ret_len);
