/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/encode.h"
#include "protobuf.h"

static uint8_t *pb_reserve(Pb *pb, size_t n) {
        if (pb->error < 0)
                return NULL;
        if (pb->len + n > pb->cap) {
                size_t cap = pb->cap > 0 ? pb->cap : 4096;
                uint8_t *p;

                while (cap < pb->len + n)
                        cap *= 2;
                p = realloc(pb->data, cap);
                if (!p) {
                        pb->error = -ENOMEM;
                        return NULL;
                }
                pb->data = p;
                pb->cap = cap;
        }
        pb->len += n;
        return pb->data + pb->len - n;
}

void pb_varint(Pb *pb, uint64_t v) {
        uint8_t buf[10];
        size_t n = 0;
        uint8_t *p;

        do {
                buf[n++] = (uint8_t) ((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
                v >>= 7;
        } while (v > 0);
        p = pb_reserve(pb, n);
        if (p)
                memcpy(p, buf, n);
}

void pb_tag(Pb *pb, uint32_t field, unsigned wire_type) {
        pb_varint(pb, ((uint64_t) field << 3) | wire_type);
}

void pb_uint(Pb *pb, uint32_t field, uint64_t v) {
        pb_tag(pb, field, PB_VARINT);
        pb_varint(pb, v);
}

void pb_int(Pb *pb, uint32_t field, int64_t v) {
        pb_uint(pb, field, (uint64_t) v);
}

void pb_bytes(Pb *pb, uint32_t field, const void *p, size_t n) {
        uint8_t *d;

        pb_tag(pb, field, PB_LEN);
        pb_varint(pb, n);
        d = pb_reserve(pb, n);
        if (d && n > 0)
                memcpy(d, p, n);
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

        for (i = 0; i < n; i += k ? k : 1)
                out += (k = utf8_sequence_length(u + i, n - i)) ? k : 3;
        if (out == n) {
                pb_bytes(pb, field, s, n);
                return;
        }
        pb_tag(pb, field, PB_LEN);
        pb_varint(pb, out);
        d = pb_reserve(pb, out);
        for (i = 0; d && i < n; i += k ? k : 1) {
                k = utf8_sequence_length(u + i, n - i);
                memcpy(d, k ? s + i : replacement, k ? k : 3);
                d += k ? k : 3;
        }
}

size_t pb_begin(Pb *pb, uint32_t field) {
        pb_tag(pb, field, PB_LEN);
        (void) pb_reserve(pb, PB_LENGTH_SIZE);
        return pb->len;
}

void pb_end(Pb *pb, size_t at) {
        size_t n;

        if (pb->error < 0)
                return;
        n = pb->len - at;
        if (n > PB_LENGTH_MAX) {
                pb->error = -E2BIG;
                return;
        }
        for (size_t i = 0; i < PB_LENGTH_SIZE; i++)
                pb->data[at - PB_LENGTH_SIZE + i] =
                        (uint8_t) (((n >> (7 * i)) & 0x7f) | (i + 1 < PB_LENGTH_SIZE ? 0x80 : 0));
}

void pb_reset(Pb *pb) {
        pb->len = 0;
}

void pb_done(Pb *pb) {
        free(pb->data);
        *pb = (Pb){};
}
