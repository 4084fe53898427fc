/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "linereader.h"
#include "util.h"

/* A read of up to this much: stream lines come in bursts of pages. */
#define LINE_READER_START (256U * 1024U)

int line_reader_init(LineReader *r, int fd, size_t max, const void *head, size_t n_head) {
        *r = (LineReader){ .fd = fd, .max = max, .cap = MAX((size_t) LINE_READER_START, n_head) };
        r->buf = malloc(r->cap);
        if (!r->buf)
                return -ENOMEM;
        if (n_head > 0)
                memcpy(r->buf, head, n_head);
        r->end = n_head;
        return 0;
}

void line_reader_done(LineReader *r) {
        free(r->buf);
}

int line_reader_next(LineReader *r, const char **ret, size_t *ret_len) {
        char *nl = memchr(r->buf + r->scanned, '\n', r->end - r->scanned);
        size_t len;

        if (!nl && !(r->eof && r->end > r->start)) {
                r->scanned = r->end;
                return 0;
        }
        len = nl ? (size_t) (nl - r->buf) + 1 - r->start : r->end - r->start;
        if (len - (nl ? 1 : 0) > r->max)
                return -E2BIG;
        *ret = r->buf + r->start;
        *ret_len = len;
        r->start += len;
        r->scanned = r->start;
        return 1;
}

ssize_t line_reader_fill(LineReader *r) {
        ssize_t n;

        if (r->end - r->start > r->max)
                return -E2BIG;
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
        do
                n = read(r->fd, r->buf + r->end, r->cap - r->end);
        while (n < 0 && errno == EINTR);
        if (n < 0)
                return -errno;
        if (n == 0)
                r->eof = true;
        r->end += (size_t) n;
        return n;
}

void line_reader_drop(LineReader *r) {
        r->start = r->scanned = r->end;
}

int line_next(LineReader *r, const char **ret, size_t *ret_len) {
        for (;;) {
                ssize_t n;
                int k = line_reader_next(r, ret, ret_len);

                if (k != 0 || r->eof)
                        return k;
                n = line_reader_fill(r);
                if (n < 0)
                        return (int) n;
        }
}

static bool has_prefix(const char *p, const char *end, const char *prefix) {
        size_t n = strlen(prefix);

        return (size_t) (end - p) >= n && memcmp(p, prefix, n) == 0;
}

/* The digits at p, at most 19 of them. Returns what follows, or NULL when there are none. */
static const char *parse_digits(const char *p, const char *end, uint64_t *ret) {
        const char *s = p;
        uint64_t v = 0;

        while (p < end && p - s < 19 && *p >= '0' && *p <= '9')
                v = v * 10 + (uint64_t) (*p++ - '0');
        if (p == s)
                return NULL;
        *ret = v;
        return p;
}

/* The string that begins at p, up to its closing quote: its length, or false without one. */
static bool string_at(const char *p, const char *end, const char **ret, size_t *ret_len) {
        const char *q = memchr(p, '"', (size_t) (end - p));

        if (!q)
                return false;
        *ret = p;
        *ret_len = (size_t) (q - p);
        return true;
}

void line_head_parse(const char *line, size_t n, LineHead *ret) {
        const char *end = line + n, *p, *q;

        *ret = (LineHead){};
        if (!has_prefix(line, end, "{\"ts\":"))
                return;
        p = parse_digits(line + 6, end, &ret->ts);
        if (!p)
                return;
        ret->has_ts = true;
        ret->after_ts = p;
        if (has_prefix(p, end, ",\"cpu\":")) {
                q = parse_digits(p + 7, end, &ret->cpu);
                if (!q)
                        return;
                p = q;
                ret->has_cpu = true;
        } else if (has_prefix(p, end, ",\"clock\":")) {
                ret->clock = true;
                return;
        } else if (has_prefix(p, end, ",\"notice\":\"sync\"")) {
                ret->sync = true;
                return;
        }
        if (has_prefix(p, end, ",\"event\":")) {
                ret->event = true;
                if (!has_prefix(p + 9, end, "\"") || !string_at(p + 10, end, &ret->name, &ret->name_len))
                        return;
                p = ret->name + ret->name_len + 1;
                if (!has_prefix(p, end, ",\"pid\":") || !(q = parse_digits(p + 7, end, &ret->pid)))
                        return;
                ret->has_pid = true;
                if (has_prefix(q, end, ",\"comm\":\""))
                        (void) string_at(q + 9, end, &ret->comm, &ret->comm_len);
        } else if (has_prefix(p, end, ",\"lost\":")) {
                ret->lost = true;
                p = parse_digits(p + 8, end, &ret->n_lost);
                if (p && has_prefix(p, end, ",\"cause\":\""))
                        (void) string_at(p + 10, end, &ret->cause, &ret->cause_len);
        }
}
