/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Kernel stacks: the symbols of /proc/kallsyms by address, as the kernel names them, and the join of
 * a kernel_stack record to the record before it, into "stack" of its line. */
#include <string.h>

#include <traceevent/event-parse.h>

#include "core/decode.h"
#include "core/ksyms.h"
#include "tpd-test.h"

static const char kallsyms[] = "ffffffff81000000 T srso_alias_untrain_ret\n"
                               "ffffffff81000000 T _stext\n"
                               "ffffffff81000100 t __pfx_clear_bss\n"
                               "ffffffff81000110 T clear_bss\n"
                               "ffffffff81000200 T __schedule\n"
                               "ffffffffc0000000 t mod_fn\t[mymod]\n";

static void test_ksyms(void) {
        char buf[128];
        Ksyms k;

        ASSERT_INT_EQ(ksyms_parse(&k, kallsyms, strlen(kallsyms)), 0);
        ASSERT_U64_EQ(k.n_entries, 6);
        /* Of symbols at one address, the first listed, as the kernel's lookup picks it. */
        ASSERT(ksyms_name(&k, 0xffffffff81000004ULL, buf, sizeof(buf)) > 0);
        ASSERT_STR_EQ(buf, "srso_alias_untrain_ret+0x4");
        ASSERT(ksyms_name(&k, 0xffffffff81000100ULL, buf, sizeof(buf)) > 0);
        ASSERT_STR_EQ(buf, "__pfx_clear_bss+0x0");
        ASSERT(ksyms_name(&k, 0xffffffff81000228ULL, buf, sizeof(buf)) > 0);
        ASSERT_STR_EQ(buf, "__schedule+0x28");
        ASSERT(ksyms_name(&k, 0xffffffffc0000010ULL, buf, sizeof(buf)) > 0);
        ASSERT_STR_EQ(buf, "mod_fn+0x10 [mymod]");
        /* Below the first symbol: none. Cut to the buffer. */
        ASSERT_U64_EQ(ksyms_name(&k, 0x1000, buf, sizeof(buf)), 0);
        ASSERT_U64_EQ(ksyms_name(&k, 0xffffffff81000228ULL, buf, 6), 5);
        ASSERT_STR_EQ(buf, "__sch");
        ksyms_done(&k);

        /* kptr_restrict: every address 0. */
        ASSERT_INT_EQ(ksyms_parse(&k, "0000000000000000 T _stext\n", 26), -ENODATA);
        ASSERT_INT_EQ(ksyms_parse(&k, "zz T x\n", 7), -EBADMSG);
        ASSERT_INT_EQ(ksyms_parse(&k, "ffffffff81000000 T\n", 19), -EBADMSG);
}

static const char switch_format[] =
        "name: tick\nID: 300\nformat:\n"
        "\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n"
        "\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n"
        "\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n"
        "\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\n"
        "\tfield:int x;\toffset:8;\tsize:4;\tsigned:1;\n\n"
        "print fmt: \"x=%d\", REC->x\n";
static const char stack_format[] =
        "name: kernel_stack\nID: 4\nformat:\n"
        "\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n"
        "\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n"
        "\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n"
        "\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\n"
        "\tfield:int size;\toffset:8;\tsize:4;\tsigned:1;\n"
        "\tfield:unsigned long caller[8];\toffset:16;\tsize:64;\tsigned:0;\n\n"
        "print fmt: \"\\t=> %ps\\n\", (void *)REC->caller[0]\n";

static Ksyms syms;

static size_t ksym(void *userdata, uint64_t address, char *buf, size_t size) {
        return ksyms_name(&syms, address, buf, size);
}

static void put_event(uint8_t *rec, int32_t pid) {
        uint16_t id = 300;

        memset(rec, 0, 12);
        memcpy(rec, &id, 2);
        memcpy(rec + 4, &pid, 4);
}

/* A kernel_stack record of pid with the frames, then a ULONG_MAX end when end. */
static size_t put_stack(uint8_t *rec, int32_t pid, const uint64_t *frames, size_t n, bool end) {
        uint16_t id = 4;
        int32_t size = (int32_t) n;
        uint64_t stop = UINT64_MAX;

        memset(rec, 0, 16);
        memcpy(rec, &id, 2);
        memcpy(rec + 4, &pid, 4);
        memcpy(rec + 8, &size, 4);
        memcpy(rec + 16, frames, n * 8);
        if (end)
                memcpy(rec + 16 + n * 8, &stop, 8);
        return 16 + (n + end) * 8;
}

static const char *variant_line_of(Decoder *d, Batch *b, size_t i, unsigned variant) {
        static char line[1024];
        const Record *r = &b->records[i];

        ASSERT_INT_EQ(decoder_encode_variant(d, b, i, variant), 0);
        ASSERT(r->print_length > 0 && r->print_length < sizeof(line));
        memcpy(line, b->buf.data + r->print_offset, r->print_length);
        line[r->print_length] = '\0';
        return line;
}

static const char *variant_line(Decoder *d, Batch *b, size_t i) {
        return variant_line_of(d, b, i, DECODER_VARIANT_STACK);
}

static void test_join(void) {
        static const uint64_t frames[] = { 0xffffffff81000228ULL, 0xffffffff81000004ULL, 0x10 };
        struct tep_handle *tep = tep_alloc();
        DecoderCallbacks cb = { .ksym = ksym };
        DecoderUnknownRun unknown = {};
        uint8_t ev[12], st[64], st2[64], ev2[12];
        size_t n, n2;
        Batch *b = batch_new();
        Decoder *d;

        ASSERT(tep && b);
        ASSERT_INT_EQ(ksyms_parse(&syms, kallsyms, strlen(kallsyms)), 0);
        tep_set_loglevel(TEP_LOG_NONE);
        ASSERT_INT_EQ(tep_parse_event(tep, switch_format, sizeof(switch_format) - 1, "t"),
                      TEP_ERRNO__SUCCESS);
        ASSERT_INT_EQ(tep_parse_event(tep, stack_format, sizeof(stack_format) - 1, "ftrace"),
                      TEP_ERRNO__SUCCESS);
        ASSERT_INT_EQ(decoder_new(tep, &cb, &d), 0);
        ASSERT_INT_EQ(decoder_stack_id(d), 4);

        /* A stack before any record of the batch: the batch's lead, for the record of the last
         * read. */
        n = put_stack(st, 7, frames, 3, true);
        ASSERT_INT_EQ(decoder_decode_record(d, 1, 0, st, n, &unknown, b), 0);
        ASSERT(b->lead_stack == st && b->lead_stack_pid == 7 && b->lead_stack_size == n);
        ASSERT_U64_EQ(b->n_records, 0);

        /* A record and its stack: joined, no record of its own; frames up to the ULONG_MAX end. */
        put_event(ev, 5);
        ASSERT_INT_EQ(decoder_decode_record(d, 2, 0, ev, sizeof(ev), &unknown, b), 1);
        n = put_stack(st, 5, frames, 3, true);
        ASSERT_INT_EQ(decoder_decode_record(d, 3, 0, st, n, &unknown, b), 0);
        ASSERT_U64_EQ(b->n_records, 1);
        ASSERT(b->records[0].stack == st && b->records[0].stack_size == n);
        ASSERT(strstr(variant_line(d, b, 0),
                      ",\"stack\":[\"__schedule+0x28\",\"srso_alias_untrain_ret+0x4\",\"[unknown]\"]}\n"));
        /* "print" shows the stack as trace-cmd report does, frames named. */
        ASSERT(strstr(variant_line_of(d, b, 0, DECODER_VARIANT_STACK | DECODER_VARIANT_PRINT),
                      "\"print\":\"x=0\\n<stack trace >\\n=> __schedule+0x28\\n=> "
                      "srso_alias_untrain_ret+0x4\\n=> [unknown]\"}\n"));
        /* The plain line has none. */
        ASSERT(!memmem(b->buf.data + b->records[0].offset, b->records[0].length, "stack", 5));

        /* A stack of another task than the record before: not its stack. Nor a second one. */
        put_event(ev2, 6);
        ASSERT_INT_EQ(decoder_decode_record(d, 4, 0, ev2, sizeof(ev2), &unknown, b), 1);
        n2 = put_stack(st2, 9, frames, 1, false);
        ASSERT_INT_EQ(decoder_decode_record(d, 5, 0, st2, n2, &unknown, b), 0);
        ASSERT(b->records[1].stack == NULL);
        ASSERT(!strstr(variant_line(d, b, 1), "stack"));
        /* Without an end marker, every frame to the record's end. */
        n2 = put_stack(st2, 6, frames, 2, false);
        ASSERT_INT_EQ(decoder_decode_record(d, 6, 0, st2, n2, &unknown, b), 0);
        b->records[1].print_length = 0; /* its variant is made anew */
        ASSERT(strstr(variant_line(d, b, 1),
                      "\"stack\":[\"__schedule+0x28\",\"srso_alias_untrain_ret+0x4\"]"));
        ASSERT_U64_EQ(b->n_records, 2);

        decoder_free(d);
        batch_unref(b);
        tep_free(tep);
        ksyms_done(&syms);
}

int main(void) {
        test_ksyms();
        test_join();
        return 0;
}
