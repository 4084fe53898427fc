/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <stddef.h>
#include <stdint.h>

/*
 * A protocol buffers encoder for `tpctl convert` (perfetto.c): fields appended to a growing buffer.
 * A submessage is opened with pb_begin(), which reserves its length as a 4-byte varint (padded with
 * continuation bits, valid protobuf, as Perfetto's own writer does), and closed with pb_end(), which
 * back-patches it: a submessage is at most 2^28 - 1 bytes. Errors stick: the first is kept in
 * error (-ENOMEM, -E2BIG) and later calls do nothing.
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

#define PB_LENGTH_SIZE 4U
#define PB_LENGTH_MAX ((1U << 28) - 1)

void pb_varint(Pb *pb, uint64_t v);
void pb_tag(Pb *pb, uint32_t field, unsigned wire_type);
/* uint32, uint64, bool, enum. */
void pb_uint(Pb *pb, uint32_t field, uint64_t v);
/* int32, int64 (not sint: a negative number is 10 bytes, as protobuf encodes them). */
void pb_int(Pb *pb, uint32_t field, int64_t v);
void pb_bytes(Pb *pb, uint32_t field, const void *p, size_t n);
/* s as valid UTF-8: a byte that is not part of a valid sequence is written as U+FFFD. */
void pb_string(Pb *pb, uint32_t field, const char *s);
/* The same, of n bytes. */
void pb_string_n(Pb *pb, uint32_t field, const char *s, size_t n);
/* Returns where the submessage's length goes, for pb_end(). */
size_t pb_begin(Pb *pb, uint32_t field);
void pb_end(Pb *pb, size_t at);
void pb_reset(Pb *pb);
void pb_done(Pb *pb);
