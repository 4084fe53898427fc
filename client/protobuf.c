/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/encode.h"
#include "protobuf.h"

uint8_t *pb_grow(Pb *pb, size_t n) {
        size_t cap;
        uint8_t *p;

        if (pb->error < 0)
                return NULL;
        if (pb->cap - pb->len >= n)
                return pb->data + pb->len;
        cap = pb->cap > 0 ? pb->cap : 4096;
        while (cap < pb->len + n)
                cap *= 2;
        p = realloc(pb->data, cap);
        if (!p) {
                pb->error = -ENOMEM;
                return NULL;
        }
        pb->data = p;
        pb->cap = cap;
        return pb->data + pb->len;
}

void pb_bytes(Pb *pb, uint32_t field, const void *p, size_t n) {
        pb_tag(pb, field, PB_LEN);
        pb_varint(pb, n);
        pb_raw(pb, p, n);
}

/* A string field must be UTF-8 (protobuf parsers reject or warn at other bytes), and the strings
 * come from a local user's process names and arguments too: each byte that is not part of a valid
 * sequence becomes U+FFFD, as in tpd's JSON (core/encode.h). Valid text is copied as it is. */
void pb_string(Pb *pb, uint32_t field, const char *s) {
        pb_string_n(pb, field, s, strlen(s));
}

void pb_string_n(Pb *pb, uint32_t field, const char *s, size_t n) {
        static const char replacement[] = "\xef\xbf\xbd";
        const unsigned char *u = (const unsigned char *) s;
        size_t out = 0, i, k;
        uint8_t *d;

        /* ASCII, most often: no sequence to look at. */
        for (i = 0; i < n && u[i] < 0x80; i++)
                ;
        out = i;
        for (; i < n; i += k ? k : 1)
                out += (k = utf8_sequence_length(u + i, n - i)) ? k : 3;
        if (out == n) {
                pb_bytes(pb, field, s, n);
                return;
        }
        pb_tag(pb, field, PB_LEN);
        pb_varint(pb, out);
        d = pb_room(pb, out);
        if (d)
                pb->len += out;
        for (i = 0; d && i < n; i += k ? k : 1) {
                k = utf8_sequence_length(u + i, n - i);
                memcpy(d, k ? s + i : replacement, k ? k : 3);
                d += k ? k : 3;
        }
}

/* The 4-byte varint of n, padded, at d. */
static void put_length_long(uint8_t *d, size_t n) {
        for (size_t i = 0; i < PB_LENGTH_LONG_SIZE; i++)
                d[i] = (uint8_t) (((n >> (7 * i)) & 0x7f) | (i + 1 < PB_LENGTH_LONG_SIZE ? 0x80 : 0));
}

void pb_end_grow(Pb *pb, size_t at) {
        size_t n = pb->len - at, grow = PB_LENGTH_LONG_SIZE - PB_LENGTH_SIZE;
        uint8_t *d;

        if (pb->error < 0)
                return;
        if (n > PB_LENGTH_MAX) {
                pb->error = -E2BIG;
                return;
        }
        if (!pb_room(pb, grow))
                return;
        d = pb->data + at - PB_LENGTH_SIZE;
        memmove(d + PB_LENGTH_LONG_SIZE, d + PB_LENGTH_SIZE, n);
        pb->len += grow;
        put_length_long(d, n);
}

size_t pb_begin_long(Pb *pb, uint32_t field) {
        uint8_t *p = pb_room(pb, 5 + PB_LENGTH_LONG_SIZE);

        if (p)
                pb->len += pb_put_varint(p, ((uint64_t) field << 3) | PB_LEN) + PB_LENGTH_LONG_SIZE;
        return pb->len;
}

void pb_end_long(Pb *pb, size_t at) {
        size_t n = pb->len - at;

        if (pb->error < 0)
                return;
        if (n > PB_LENGTH_MAX) {
                pb->error = -E2BIG;
                return;
        }
        put_length_long(pb->data + at - PB_LENGTH_LONG_SIZE, n);
}

void pb_reset(Pb *pb) {
        pb->len = 0;
}

void pb_done(Pb *pb) {
        free(pb->data);
        *pb = (Pb){};
}
