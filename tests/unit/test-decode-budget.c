/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The decoder reserves each record's worst case before writing it. That worst case must count the
 * record's head (`,"event":"system:event","pid":`) too: kprobe, uprobe and user_events names can
 * be 64+64 bytes, and with a 15-byte comm of control characters (six bytes each once escaped) and
 * the longest numbers, a record written at the end of a buffer ran past it. Every fill level of a
 * buffer is tried here; under ASan an overrun is reported at the write, and in any build the
 * buffer's length must stay within its capacity.
 */
#include <traceevent/event-parse.h>

#include "core/decode.h"
#include "tpd-test.h"

#define PAGE 4096U
#define CAP 4096U

static const char comm[] = "\x01\x02\x03\x04\x05\x06\x07\x08\x0b\x0c\x0e\x0f\x10\x11\x12";

static const char *test_comm(void *userdata, int pid, uint64_t ts) {
        return comm;
}

static char *format_text(const char *event) {
        char *text;

        ASSERT(asprintf(&text,
                        "name: %s\n"
                        "ID: 1000\n"
                        "format:\n"
                        "\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n"
                        "\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n"
                        "\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n"
                        "\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n"
                        "\n"
                        "\tfield:int n;\toffset:8;\tsize:4;\tsigned:1;\n"
                        "\n"
                        "print fmt: \"n=%%d\", REC->n\n",
                        event) > 0);
        return text;
}

int main(void) {
        char system[65], event[65], *text, *name;
        struct tep_handle *tep = tep_alloc();
        DecoderCallbacks cb = { .comm = test_comm };
        uint8_t page[PAGE] = {};
        uint64_t ts = 18000000000000000000ULL, commit = 16;
        uint32_t header = 3; /* a data entry of 3 words, no time delta */
        uint16_t id = 1000;
        int32_t pid = INT32_MIN, n = INT32_MIN;
        size_t line_len = 0;
        Decoder *d;

        ASSERT(tep);
        tep_set_long_size(tep, 8);
        tep_set_page_size(tep, PAGE);
        memset(system, 's', 64);
        memset(event, 'e', 64);
        system[64] = event[64] = 0;
        text = format_text(event);
        ASSERT_INT_EQ(tep_parse_event(tep, text, strlen(text), system), TEP_ERRNO__SUCCESS);
        free(text);
        ASSERT_INT_EQ(decoder_new(tep, &cb, &d), 0);
        ASSERT(asprintf(&name, "%s:%s", system, event) > 0);
        ASSERT(decoder_event_name(d, 1000) && strcmp(decoder_event_name(d, 1000), name) == 0);
        free(name);

        /* One record with the longest numbers the fields allow. */
        memcpy(page, &ts, 8);
        memcpy(page + 8, &commit, 8);
        memcpy(page + 16, &header, 4);
        memcpy(page + 20, &id, 2);
        memcpy(page + 24, &pid, 4);
        memcpy(page + 28, &n, 4);

        for (size_t fill = 0; fill < CAP; fill++) {
                Batch *b = batch_new();

                ASSERT(b);
                /* A buffer of exactly CAP bytes, filled up to fill: the decoder must grow it rather
                 * than write past its end. */
                b->buf.data = malloc(CAP);
                ASSERT(b->buf.data);
                b->buf.cap = CAP;
                memset(b->buf.data, 'x', fill);
                b->buf.len = fill;

                ASSERT_INT_EQ(decoder_decode_page(d, page, PAGE, 4000000000U, b), 1);
                if (b->buf.len > b->buf.cap)
                        TEST_FAIL("filled to %zu: the record ends at %zu, past the buffer's %zu bytes", fill,
                                  b->buf.len, b->buf.cap);
                ASSERT_INT_EQ(b->records[0].offset, fill);
                if (line_len == 0) {
                        line_len = b->records[0].length;
                        /* What makes the record long: the name, the escaped comm, the numbers. */
                        ASSERT(line_len > 128 + 15 * 6 + 3 * 11);
                }
                ASSERT_INT_EQ(b->records[0].length, line_len);
                ASSERT(memmem(b->buf.data + fill, line_len, "\"comm\":\"\\u0001\\u0002", 20));
                ASSERT(memmem(b->buf.data + fill, line_len, "\"pid\":-2147483648,", 18));
                ASSERT(memmem(b->buf.data + fill, line_len, "\"n\":-2147483648}}\n", 18));
                batch_unref(b);
        }

        decoder_free(d);
        tep_free(tep);
        return 0;
}
