/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "util.h"

/*
 * A protocol buffers encoder for tpctl's Perfetto traces (perfetto.c): fields appended to a growing
 * buffer. A submessage is opened with pb_begin(), which reserves 2 bytes for its length, and closed
 * with pb_end(), which writes it there as a 2-byte varint (padded with a continuation bit under 128:
 * valid protobuf, as Perfetto's own writer pads its lengths to 4 bytes), or, for a body of 16 KiB or
 * more, moves the body up to make room for a 4-byte one. A message expected to be large (a packet,
 * a bundle of events) is opened with pb_begin_long() and closed with pb_end_long(): 4 bytes
 * reserved, nothing moved. A submessage is at most 2^28 - 1 bytes. Errors stick: the first is kept
 * in error (-ENOMEM, -E2BIG) and later calls do nothing. The small calls are inline: a trace is
 * millions of them.
 */

typedef struct Pb {
        uint8_t *data;
        size_t len, cap;
        int error;
} Pb;

enum {
        PB_VARINT = 0,
        PB_FIXED64 = 1,
        PB_LEN = 2,
};

#define PB_LENGTH_SIZE 2U
#define PB_LENGTH_SHORT_MAX ((1U << 14) - 1)
#define PB_LENGTH_LONG_SIZE 4U
#define PB_LENGTH_MAX ((1U << 28) - 1)
/* A tag and a varint: 5 + 10 bytes at most. */
#define PB_FIELD_MAX 15U

/* Room for n more bytes, or NULL (and error set). */
uint8_t *pb_grow(Pb *pb, size_t n);

static inline uint8_t *pb_room(Pb *pb, size_t n) {
        if (_likely_(pb->cap - pb->len >= n && pb->error == 0))
                return pb->data + pb->len;
        return pb_grow(pb, n);
}

static inline size_t pb_put_varint(uint8_t *p, uint64_t v) {
        size_t n = 0;

        while (v >= 0x80) {
                p[n++] = (uint8_t) (v | 0x80);
                v >>= 7;
        }
        p[n++] = (uint8_t) v;
        return n;
}

static inline void pb_varint(Pb *pb, uint64_t v) {
        uint8_t *p = pb_room(pb, 10);

        if (p)
                pb->len += pb_put_varint(p, v);
}

static inline void pb_tag(Pb *pb, uint32_t field, unsigned wire_type) {
        pb_varint(pb, ((uint64_t) field << 3) | wire_type);
}

/* uint32, uint64, bool, enum. */
static inline void pb_uint(Pb *pb, uint32_t field, uint64_t v) {
        uint8_t *p = pb_room(pb, PB_FIELD_MAX);
        size_t n;

        if (!p)
                return;
        n = pb_put_varint(p, ((uint64_t) field << 3) | PB_VARINT);
        pb->len += n + pb_put_varint(p + n, v);
}

/* int32, int64 (not sint: a negative number is 10 bytes, as protobuf encodes them). */
static inline void pb_int(Pb *pb, uint32_t field, int64_t v) {
        pb_uint(pb, field, (uint64_t) v);
}

/* n bytes of fields encoded before, as they are. */
static inline void pb_raw(Pb *pb, const void *p, size_t n) {
        uint8_t *d = pb_room(pb, n);

        if (d && n > 0) {
                memcpy(d, p, n);
                pb->len += n;
        }
}

void pb_bytes(Pb *pb, uint32_t field, const void *p, size_t n);
/* s as valid UTF-8: a byte that is not part of a valid sequence is written as U+FFFD. */
void pb_string(Pb *pb, uint32_t field, const char *s);
/* The same, of n bytes. */
void pb_string_n(Pb *pb, uint32_t field, const char *s, size_t n);

/* Returns where the submessage's body starts, for pb_end(). */
static inline size_t pb_begin(Pb *pb, uint32_t field) {
        uint8_t *p = pb_room(pb, 5 + PB_LENGTH_SIZE);

        if (p)
                pb->len += pb_put_varint(p, ((uint64_t) field << 3) | PB_LEN) + PB_LENGTH_SIZE;
        return pb->len;
}

/* A body of 16 KiB or more, given 4 bytes. */
void pb_end_grow(Pb *pb, size_t at);

static inline void pb_end(Pb *pb, size_t at) {
        size_t n = pb->len - at;

        if (_likely_(n <= PB_LENGTH_SHORT_MAX && pb->error == 0)) {
                pb->data[at - 2] = (uint8_t) (n | 0x80);
                pb->data[at - 1] = (uint8_t) (n >> 7);
                return;
        }
        pb_end_grow(pb, at);
}

size_t pb_begin_long(Pb *pb, uint32_t field);
void pb_end_long(Pb *pb, size_t at);

void pb_reset(Pb *pb);
void pb_done(Pb *pb);
