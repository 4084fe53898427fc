/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * tpctl's protobuf encoder (client/protobuf.c), byte for byte: varints at their edges, tags,
 * negative int64s (ten bytes), strings, submessages with back-patched 2-byte lengths, nested, one
 * that outgrows them and moves up for 4 bytes, and long ones with 4-byte lengths, including a
 * length that needs all four bytes and one too long for them.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "protobuf.h"
#include "tpd-test.h"

#define ASSERT_PB(pb, ...)                                                  \
        do {                                                                \
                static const uint8_t _want[] = { __VA_ARGS__ };             \
                ASSERT_INT_EQ((pb)->error, 0);                              \
                ASSERT_MEM_EQ((pb)->data, (pb)->len, _want, sizeof(_want)); \
                pb_reset(pb);                                               \
        } while (0)

int main(void) {
        Pb pb = {};
        uint8_t *big;
        size_t a, b;

        pb_varint(&pb, 0);
        pb_varint(&pb, 1);
        pb_varint(&pb, 127);
        pb_varint(&pb, 128);
        pb_varint(&pb, 300);
        pb_varint(&pb, 16383);
        pb_varint(&pb, 16384);
        ASSERT_PB(&pb, 0x00, 0x01, 0x7f, 0x80, 0x01, 0xac, 0x02, 0xff, 0x7f, 0x80, 0x80, 0x01);
        pb_varint(&pb, UINT64_MAX);
        ASSERT_PB(&pb, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01);

        /* Tags: field << 3 | wire type; field 16 needs two bytes, 327 (generic) too. */
        pb_uint(&pb, 1, 150);
        pb_uint(&pb, 15, 1);
        pb_uint(&pb, 16, 1);
        pb_uint(&pb, 327, 0);
        ASSERT_PB(&pb, 0x08, 0x96, 0x01, 0x78, 0x01, 0x80, 0x01, 0x01, 0xb8, 0x14, 0x00);

        /* int32 and int64: two's complement in ten bytes, as protobuf does (not zigzag). */
        pb_int(&pb, 2, -1);
        pb_int(&pb, 2, -2);
        pb_int(&pb, 2, 5);
        ASSERT_PB(&pb, 0x10, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 0x10, 0xfe, 0xff,
                  0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 0x10, 0x05);

        pb_string(&pb, 2, "testing");
        pb_string(&pb, 3, "");
        pb_bytes(&pb, 4, "\0\1", 2);
        ASSERT_PB(&pb, 0x12, 0x07, 't', 'e', 's', 't', 'i', 'n', 'g', 0x1a, 0x00, 0x22, 0x02, 0x00, 0x01);

        /* A string is written as UTF-8 whatever it holds (a process's name from /proc): valid
         * sequences as they are, every other byte as U+FFFD. */
        pb_string(&pb, 1, "\xc3\xa9)\xff\n\xe2\x82");
        ASSERT_PB(&pb, 0x0a, 0x0d, 0xc3, 0xa9, ')', 0xef, 0xbf, 0xbd, '\n', 0xef, 0xbf, 0xbd, 0xef, 0xbf,
                  0xbd);

        /* Submessages: the length in two bytes, padded with a continuation bit under 128. */
        a = pb_begin(&pb, 1);
        pb_uint(&pb, 1, 3);
        b = pb_begin(&pb, 2);
        pb_string(&pb, 1, "ab");
        pb_end(&pb, b);
        pb_end(&pb, a);
        ASSERT_INT_EQ(a, 3);
        ASSERT_PB(&pb, 0x0a, 0x89, 0x00, 0x08, 0x03, 0x12, 0x84, 0x00, 0x0a, 0x02, 'a', 'b');
        a = pb_begin(&pb, 5);
        pb_end(&pb, a);
        ASSERT_PB(&pb, 0x2a, 0x80, 0x00);

        /* 300 bytes: 0xac 0x02. */
        a = pb_begin(&pb, 1);
        for (int i = 0; i < 150; i++)
                pb_uint(&pb, 1, 0);
        pb_end(&pb, a);
        ASSERT_INT_EQ(pb.len, 3 + 300);
        ASSERT_MEM_EQ(pb.data, 3, "\x0a\xac\x02", 3);
        pb_reset(&pb);

        /* 16383 bytes fit two; 16384 move up behind four, the field after them too, and so does
         * the message around them, now longer than 16383 bytes too. */
        big = calloc(PB_LENGTH_MAX - 4, 1);
        ASSERT(big);
        a = pb_begin(&pb, 1);
        pb_raw(&pb, big, 16383);
        pb_end(&pb, a);
        ASSERT_INT_EQ(pb.len, 3 + 16383);
        ASSERT_MEM_EQ(pb.data, 3, "\x0a\xff\x7f", 3);
        pb_reset(&pb);
        a = pb_begin(&pb, 2);
        b = pb_begin(&pb, 1);
        memset(big, 0xaa, 16384);
        pb_raw(&pb, big, 16384);
        pb_end(&pb, b);
        pb_uint(&pb, 3, 7);
        pb_end(&pb, a);
        ASSERT_INT_EQ(pb.error, 0);
        ASSERT_INT_EQ(pb.len, 5 + 5 + 16384 + 2);
        /* 16391 and 16384 in four bytes each. */
        ASSERT_MEM_EQ(pb.data, 10, "\x12\x87\x80\x81\x00\x0a\x80\x80\x81\x00", 10);
        ASSERT_INT_EQ(pb.data[10], 0xaa);
        ASSERT_INT_EQ(pb.data[10 + 16383], 0xaa);
        ASSERT_MEM_EQ(pb.data + 10 + 16384, 2, "\x18\x07", 2);
        memset(big, 0, 16384);
        pb_reset(&pb);

        /* Long: four bytes, padded with continuation bits. */
        a = pb_begin_long(&pb, 1);
        pb_string(&pb, 1, "ab");
        pb_end_long(&pb, a);
        ASSERT_INT_EQ(a, 5);
        ASSERT_PB(&pb, 0x0a, 0x84, 0x80, 0x80, 0x00, 0x0a, 0x02, 'a', 'b');

        /* The largest length, 2^28 - 1, takes all four bytes; one more does not fit, and the error
         * sticks. Field 1 of 2^28 - 6 bytes: a tag, a 4-byte length and the bytes. */
        a = pb_begin_long(&pb, 1);
        pb_bytes(&pb, 1, big, PB_LENGTH_MAX - 5);
        pb_end_long(&pb, a);
        ASSERT_INT_EQ(pb.error, 0);
        ASSERT_INT_EQ(pb.len, 5 + PB_LENGTH_MAX);
        ASSERT_MEM_EQ(pb.data, 10, "\x0a\xff\xff\xff\x7f\x0a\xfa\xff\xff\x7f", 10);
        pb_reset(&pb);
        a = pb_begin_long(&pb, 1);
        pb_bytes(&pb, 1, big, PB_LENGTH_MAX - 4);
        pb_end_long(&pb, a);
        ASSERT_INT_EQ(pb.error, -E2BIG);
        pb_uint(&pb, 1, 1);
        ASSERT_INT_EQ(pb.error, -E2BIG);
        ASSERT_INT_EQ(pb.len, 5 + PB_LENGTH_MAX + 1);

        /* A short one too long even for four bytes. */
        pb_done(&pb);
        a = pb_begin(&pb, 1);
        pb_bytes(&pb, 1, big, PB_LENGTH_MAX - 4);
        pb_end(&pb, a);
        ASSERT_INT_EQ(pb.error, -E2BIG);
        free(big);
        pb_done(&pb);
        return 0;
}
