/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "linereader.h"
#include "util.h"

#define LINE_READER_START (64U * 1024U)

int line_reader_init(LineReader *r, int fd, size_t max, const void *head, size_t n_head) {
        *r = (LineReader){ .fd = fd, .max = max, .cap = MAX((size_t) LINE_READER_START, n_head) };
        r->buf = malloc(r->cap);
        if (!r->buf)
                return -ENOMEM;
        memcpy(r->buf, head, n_head);
        r->end = n_head;
        return 0;
}
void line_reader_done(LineReader *r) {
        free(r->buf);
}

int line_next(LineReader *r, const char **ret, size_t *ret_len) {
        for (;;) {
                char *nl = memchr(r->buf + r->scanned, '\n', r->end - r->scanned);
                size_t len;
                ssize_t n;

                if (nl || (r->eof && r->end > r->start)) {
                        len = nl ? (size_t) (nl - r->buf) + 1 - r->start : r->end - r->start;
                        if (len - (nl ? 1 : 0) > r->max)
                                return -E2BIG;
                        *ret = r->buf + r->start;
                        *ret_len = len;
                        r->start += len;
                        r->scanned = r->start;
                        return 1;
                }
                if (r->eof)
                        return 0;
                if (r->end - r->start > r->max)
                        return -E2BIG;
                r->scanned = r->end;
                if (r->start > 0) {
                        memmove(r->buf, r->buf + r->start, r->end - r->start);
                        r->end -= r->start;
                        r->scanned -= r->start;
                        r->start = 0;
                }
                if (r->end == r->cap) {
                        size_t cap = MIN(MAX(r->cap * 2, (size_t) LINE_READER_START), r->max + 2);
                        char *b = realloc(r->buf, cap);

                        if (!b)
                                return -ENOMEM;
                        r->buf = b;
                        r->cap = cap;
                }
                n = read(r->fd, r->buf + r->end, r->cap - r->end);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return -errno;
                if (n == 0)
                        r->eof = true;
                r->end += (size_t) n;
        }
}
