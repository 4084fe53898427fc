/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The "sym" variant of records (decoder_encode_variant() with DECODER_VARIANT_SYM) on recorded
 * pages: sched_switch's prev_state equals the kernel's own text of the same records (the dataset's
 * trace.txt), also for values crafted into a record (flags joined, "R", "+"); raw_syscalls ids and
 * negative returns get their names; "fields" is the plain line's, and the print variant is unchanged
 * by a sym variant made in between. "cgroup" (DECODER_VARIANT_CGROUP, from the decoder's callback)
 * comes after "sym" and before "print", whether written into the plain lines or into a variant.
 *
 *   test-symbolic DATADIR
 */

#include <limits.h>
#include <string.h>

#include <json-c/json.h>
#include <traceevent/event-parse.h>

#include "core/decode.h"
#include "core/encode.h"
#include "tpd-test.h"
#include "util.h"

#define PAGE 4096U

static struct tep_handle *tep_load(const char *dir, const char *const *formats) {
        struct tep_handle *tep = tep_alloc();
        char path[PATH_MAX + 80];
        char *buf;
        size_t len;

        ASSERT(tep);
        tep_set_long_size(tep, 8);
        tep_set_page_size(tep, PAGE);
        snprintf(path, sizeof(path), "%s/header_page", dir);
        buf = test_read_file(path, &len);
        ASSERT(buf);
        ASSERT(tep_parse_header_page(tep, buf, len, 8) >= 0);
        free(buf);
        for (; *formats; formats++) {
                const char *dot = strchr(*formats, '.');
                char system[64];

                snprintf(system, sizeof(system), "%.*s", (int) (dot - *formats), *formats);
                snprintf(path, sizeof(path), "%s/%s.format", dir, *formats);
                buf = test_read_file(path, &len);
                ASSERT(buf);
                ASSERT_INT_EQ(tep_parse_event(tep, buf, len, system), TEP_ERRNO__SUCCESS);
                free(buf);
        }
        return tep;
}

/* Decodes every page of cpuN.pages into one batch. */
static size_t len_pages;

static Batch *decode_all(Decoder *d, const char *dir, unsigned cpu, uint8_t **ret_pages) {
        char path[PATH_MAX + 16];
        uint8_t *pages;
        size_t len;
        Batch *b = batch_new();

        ASSERT(b);
        snprintf(path, sizeof(path), "%s/cpu%u.pages", dir, cpu);
        pages = (uint8_t *) test_read_file(path, &len);
        ASSERT(pages && len % PAGE == 0);
        for (size_t i = 0; i < len / PAGE; i++)
                ASSERT(decoder_decode_page(d, pages + i * PAGE, PAGE, cpu, b) >= 0);
        b->plain_end = b->buf.len;
        *ret_pages = pages;
        len_pages = len;
        return b;
}

static json_object *variant_json(Decoder *d, Batch *b, size_t i, unsigned variant) {
        Record *rec;
        json_object *o;

        ASSERT_INT_EQ(decoder_encode_variant(d, b, i, variant), 0);
        rec = &b->records[i];
        ASSERT(rec->print_length > 0 && rec->variant == variant);
        ASSERT(b->buf.data[rec->print_offset + rec->print_length - 1] == '\n');
        o = json_tokener_parse(strndupa(b->buf.data + rec->print_offset, rec->print_length - 1));
        ASSERT(o);
        return o;
}

static const char *sym_of(json_object *o, const char *field) {
        json_object *sym, *v;

        if (!json_object_object_get_ex(o, "sym", &sym))
                TEST_FAIL("no \"sym\" in %s", json_object_to_json_string(o));
        if (!json_object_object_get_ex(sym, field, &v))
                return NULL;
        return json_object_get_string(v);
}

/* The prev_state texts of the kernel's own output, in order. */
static size_t kernel_states(const char *dir, char states[][16], size_t max) {
        char path[PATH_MAX + 16], *text, *line, *save = NULL;
        size_t n = 0;

        snprintf(path, sizeof(path), "%s/trace.txt", dir);
        text = test_read_file(path, NULL);
        ASSERT(text);
        for (line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
                const char *p = strstr(line, " prev_state=");

                if (line[0] == '#' || !p)
                        continue;
                ASSERT(n < max);
                ASSERT(sscanf(p, " prev_state=%15s", states[n]) == 1);
                n++;
        }
        free(text);
        return n;
}

static void test_sched_switch(const char *datadir) {
        static const char *const formats[] = { "sched.sched_switch", NULL };
        static char states[4096][16];
        char dir[PATH_MAX];
        struct tep_handle *tep;
        struct tep_format_field *field;
        Decoder *d = NULL;
        uint8_t *pages;
        Batch *b;
        size_t n;
        /* What the kernel's print format makes of crafted values: mask 0xff, preempt bit 0x100. */
        static const struct {
                uint32_t value;
                const char *text;
        } crafted[] = {
                { 0x0, "R" },    { 0x1, "S" },   { 0x2, "D" },
                { 0x3, "S|D" },  { 0x80, "I" },  { 0x100, "R+" },
                { 0x101, "S+" }, { 0x200, "R" }, { 0x7f, "S|D|T|t|X|Z|P" },
                { 0x102, "D+" },
        };

        snprintf(dir, sizeof(dir), "%s/sched_switch", datadir);
        tep = tep_load(dir, formats);
        ASSERT_INT_EQ(decoder_new(tep, NULL, &d), 0);
        b = decode_all(d, dir, 0, &pages);
        n = kernel_states(dir, states, ELEMENTSOF(states));
        ASSERT_INT_EQ(b->n_records, n);

        for (size_t i = 0; i < b->n_records; i++) {
                json_object *o = variant_json(d, b, i, DECODER_VARIANT_SYM), *fields, *plain;
                json_object *both = variant_json(d, b, i, DECODER_VARIANT_SYM | DECODER_VARIANT_PRINT),
                            *print;

                ASSERT_STR_EQ(sym_of(o, "prev_state"), states[i]);
                /* Numbers stay numbers, and the rest of the line is the plain one. */
                plain = json_tokener_parse(
                        strndupa(b->buf.data + b->records[i].offset, b->records[i].length - 1));
                ASSERT(json_object_object_get_ex(o, "fields", &fields));
                ASSERT(json_object_equal(fields, json_object_object_get(plain, "fields")));
                ASSERT(json_object_is_type(json_object_object_get(fields, "prev_state"), json_type_int));
                ASSERT(!json_object_object_get_ex(o, "print", NULL));
                ASSERT_STR_EQ(sym_of(both, "prev_state"), states[i]);
                ASSERT(json_object_object_get_ex(both, "print", &print));
                ASSERT(strstr(json_object_get_string(print), "prev_state="));
                json_object_put(o);
                json_object_put(both);
                json_object_put(plain);
        }
        printf("sched_switch: %zu records, \"sym\" equal to the kernel's prev_state text\n", n);

        /* "sym" written into the plain lines while decoding (every stream wants it): the same text,
         * no variant needed for it, and "print" added after it once. */
        {
                Batch *inl = batch_new();

                ASSERT(inl);
                inl->variant = DECODER_VARIANT_SYM;
                for (size_t i = 0; i < len_pages / PAGE; i++)
                        ASSERT(decoder_decode_page(d, pages + i * PAGE, PAGE, 0, inl) >= 0);
                ASSERT_INT_EQ(inl->n_records, n);
                for (size_t i = 0; i < inl->n_records; i++) {
                        json_object *plain = json_tokener_parse(strndupa(
                                inl->buf.data + inl->records[i].offset, inl->records[i].length - 1));
                        json_object *both;
                        const char *line;

                        ASSERT(plain);
                        ASSERT_STR_EQ(sym_of(plain, "prev_state"), states[i]);
                        ASSERT_INT_EQ(decoder_encode_variant(d, inl, i, DECODER_VARIANT_SYM), 0);
                        ASSERT_INT_EQ(inl->records[i].print_length, 0);
                        both = variant_json(d, inl, i, DECODER_VARIANT_SYM | DECODER_VARIANT_PRINT);
                        ASSERT_STR_EQ(sym_of(both, "prev_state"), states[i]);
                        ASSERT(json_object_object_get_ex(both, "print", NULL));
                        line = strndupa(inl->buf.data + inl->records[i].print_offset,
                                        inl->records[i].print_length);
                        ASSERT(strstr(line, "\"sym\"") && !strstr(strstr(line, "\"sym\"") + 1, "\"sym\""));
                        json_object_put(plain);
                        json_object_put(both);
                }
                batch_unref(inl);
                printf("sched_switch: \"sym\" in the plain lines equal too; \"print\" added after it\n");
        }

        /* Crafted values in the first record's prev_state. */
        field = tep_find_field(tep_find_event_by_name(tep, "sched", "sched_switch"), "prev_state");
        ASSERT(field && field->size >= 4);
        for (size_t k = 0; k < ELEMENTSOF(crafted); k++) {
                uint8_t *raw = (uint8_t *) b->records[0].raw;
                json_object *o;

                memcpy(raw + field->offset, &crafted[k].value, 4);
                if (field->size == 8)
                        memset(raw + field->offset + 4, 0, 4);
                b->records[0].print_length = 0;
                o = variant_json(d, b, 0, DECODER_VARIANT_SYM);
                if (strcmp(sym_of(o, "prev_state"), crafted[k].text) != 0)
                        TEST_FAIL("prev_state 0x%x: \"%s\", the kernel prints \"%s\"", crafted[k].value,
                                  sym_of(o, "prev_state"), crafted[k].text);
                json_object_put(o);
        }
        printf("sched_switch: %zu crafted prev_state values as the kernel prints them\n",
               ELEMENTSOF(crafted));

        batch_unref(b);
        free(pages);
        decoder_free(d);
        tep_free(tep);
}

static void test_syscalls(const char *datadir) {
        static const char *const formats[] = { "raw_syscalls.sys_exit", "sched.sched_wakeup",
                                               "signal.signal_generate", NULL };
        char dir[PATH_MAX];
        struct tep_handle *tep;
        Decoder *d = NULL;
        size_t exits = 0, errors = 0;

        snprintf(dir, sizeof(dir), "%s/signed", datadir);
        tep = tep_load(dir, formats);
        ASSERT_INT_EQ(decoder_new(tep, NULL, &d), 0);
        for (unsigned cpu = 0; cpu < 2; cpu++) {
                uint8_t *pages;
                Batch *b = decode_all(d, dir, cpu, &pages);

                for (size_t i = 0; i < b->n_records; i++) {
                        json_object *o, *fields, *event;
                        int64_t id, ret;

                        if (b->records[i].kind != RECORD_EVENT)
                                continue;
                        o = variant_json(d, b, i, DECODER_VARIANT_SYM);
                        ASSERT(json_object_object_get_ex(o, "event", &event));
                        if (strcmp(json_object_get_string(event), "raw_syscalls:sys_exit") != 0) {
                                json_object_put(o);
                                continue;
                        }
                        ASSERT(json_object_object_get_ex(o, "fields", &fields));
                        id = json_object_get_int64(json_object_object_get(fields, "id"));
                        ret = json_object_get_int64(json_object_object_get(fields, "ret"));
#if defined(__x86_64__)
                        if (id == 0)
                                ASSERT_STR_EQ(sym_of(o, "id"), "read");
                        if (id == 3)
                                ASSERT_STR_EQ(sym_of(o, "id"), "close");
                        if (id == 62)
                                ASSERT_STR_EQ(sym_of(o, "id"), "kill");
#endif
                        ASSERT(id < 0 || sym_of(o, "id"));
                        if (ret < 0 && ret >= -4095) {
                                ASSERT_STR_EQ(sym_of(o, "ret"), strerrorname_np((int) -ret));
                                errors++;
                        } else
                                ASSERT(!sym_of(o, "ret"));
                        exits++;
                        json_object_put(o);
                }
                batch_unref(b);
                free(pages);
        }
        ASSERT(exits > 0);
        printf("raw_syscalls:sys_exit: %zu records named, %zu of them with an errno\n", exits, errors);
        decoder_free(d);
        tep_free(tep);
}

/* A format with what kernels write: a field rendered by several conversions with text between
 * them, a table chosen by a condition on another field, flags with bits no name covers. */
static const char synthetic_format[] =
        "name: tpdsym\n"
        "ID: 900\n"
        "format:\n"
        "\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n"
        "\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n"
        "\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n"
        "\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n"
        "\n"
        "\tfield:unsigned int icr;\toffset:8;\tsize:4;\tsigned:0;\n"
        "\tfield:unsigned int isa;\toffset:12;\tsize:4;\tsigned:0;\n"
        "\tfield:unsigned int reason;\toffset:16;\tsize:4;\tsigned:0;\n"
        "\tfield:unsigned long flags;\toffset:24;\tsize:8;\tsigned:0;\n"
        "\n"
        "print fmt: \"icr %x (%s|%s) reason %s flags=%s\", REC->icr, "
        "__print_symbolic((REC->icr >> 8 & 0x7), {0x0, \"Fixed\"}, {0x1, \"LowPrio\"}), "
        "(REC->icr & 0x800) ? \"logical\" : \"physical\", "
        "(REC->isa == 1) ? __print_symbolic(REC->reason & 0xffff, { 0, \"A0\" }, { 1, \"A1\" }) : "
        "__print_symbolic(REC->reason, { 0, \"B0\" }, { 1, \"B1\" }), "
        "__print_flags(REC->flags, \"|\", { 0x1, \"ONE\" }, { 0x4, \"FOUR\" })\n";

static void test_synthetic(const char *datadir) {
        static const struct {
                uint32_t icr, isa, reason;
                uint64_t flags;
                const char *icr_text, *reason_text, *flags_text;
        } cases[] = {
                { 0x900, 1, 0x10001, 0x7, "LowPrio|logical", "A1", "ONE|FOUR|0x2" },
                { 0x100, 0, 0x1, 0x4, "LowPrio|physical", "B1", "FOUR" },
                { 0x0, 0, 0x7, 0x0, "Fixed|physical", "0x7", "" },
                { 0x700, 1, 0x5, 0x1, "0x7|physical", "0x5", "ONE" },
        };
        char dir[PATH_MAX];
        static const char *const none[] = { NULL };
        struct tep_handle *tep;
        Decoder *d = NULL;

        snprintf(dir, sizeof(dir), "%s/sched_switch", datadir);
        tep = tep_load(dir, none);
        ASSERT_INT_EQ(tep_parse_event(tep, synthetic_format, sizeof(synthetic_format) - 1, "tpdtest"),
                      TEP_ERRNO__SUCCESS);
        ASSERT_INT_EQ(decoder_new(tep, NULL, &d), 0);
        for (size_t k = 0; k < ELEMENTSOF(cases); k++) {
                uint8_t page[PAGE] = {};
                uint8_t *payload = page + 16 + 4;
                uint64_t commit = 4 + 32;
                uint32_t header = 32 / 4; /* type_len: the payload's 4-byte words, delta 0 */
                uint16_t id = 900;
                json_object *o, *print;
                char want[128];
                Batch *b = batch_new();

                ASSERT(b);
                memcpy(page + 8, &commit, 8);
                memcpy(page + 16, &header, 4);
                memcpy(payload, &id, 2);
                memcpy(payload + 8, &cases[k].icr, 4);
                memcpy(payload + 12, &cases[k].isa, 4);
                memcpy(payload + 16, &cases[k].reason, 4);
                memcpy(payload + 24, &cases[k].flags, 8);
                ASSERT_INT_EQ(decoder_decode_page(d, page, PAGE, 0, b), 1);
                o = variant_json(d, b, 0, DECODER_VARIANT_SYM | DECODER_VARIANT_PRINT);
                ASSERT_STR_EQ(sym_of(o, "icr"), cases[k].icr_text);
                ASSERT_STR_EQ(sym_of(o, "reason"), cases[k].reason_text);
                ASSERT_STR_EQ(sym_of(o, "flags"), cases[k].flags_text);
                ASSERT(!sym_of(o, "isa"));
                /* The same text as libtraceevent's whole line. */
                ASSERT(json_object_object_get_ex(o, "print", &print));
                snprintf(want, sizeof(want), "icr %x (%s) reason %s flags=%s", cases[k].icr,
                         cases[k].icr_text, cases[k].reason_text, cases[k].flags_text);
                ASSERT_STR_EQ(json_object_get_string(print), want);
                json_object_put(o);
                batch_unref(b);
        }
        printf("synthetic: %zu records, texts of several conversions, of tables chosen by another field, "
               "of leftover flags\n",
               ELEMENTSOF(cases));
        decoder_free(d);
        tep_free(tep);
}

/* Records of odd pids are in "/odd\x01" (JSON text, escaped), of pid 0 nowhere known. */
static const char *odd_cgroup(void *userdata, int pid, uint64_t ts, size_t *ret_len) {
        static const char text[] = "\"/odd\\u0001\"";

        if (pid % 2 == 0)
                return NULL;
        *ret_len = sizeof(text) - 1;
        return text;
}

/* The keys of a line, in order, joined by spaces. */
static const char *keys_of(json_object *o) {
        static char buf[256];
        size_t n = 0;

        buf[0] = '\0';
        json_object_object_foreach(o, key, value) {
                (void) value;
                n += (size_t) snprintf(buf + n, sizeof(buf) - n, "%s%s", n ? " " : "", key);
        }
        return buf;
}

static void test_cgroup(const char *datadir) {
        static const char *const formats[] = { "sched.sched_switch", NULL };
        DecoderCallbacks cb = { .cgroup = odd_cgroup };
        char dir[PATH_MAX];
        struct tep_handle *tep;
        Decoder *d = NULL;
        uint8_t *pages;
        size_t odd = 0;
        Batch *b, *inl;

        snprintf(dir, sizeof(dir), "%s/sched_switch", datadir);
        tep = tep_load(dir, formats);
        ASSERT_INT_EQ(decoder_new(tep, &cb, &d), 0);
        b = decode_all(d, dir, 0, &pages);
        inl = batch_new();
        ASSERT(inl);
        inl->variant = DECODER_VARIANT_SYM | DECODER_VARIANT_CGROUP;
        for (size_t i = 0; i < len_pages / PAGE; i++)
                ASSERT(decoder_decode_page(d, pages + i * PAGE, PAGE, 0, inl) >= 0);
        ASSERT(b->n_records > 0 && inl->n_records == b->n_records);
        for (size_t i = 0; i < b->n_records; i++) {
                bool known = b->records[i].pid % 2 != 0;
                const char *want = known ? "ts cpu event pid fields sym cgroup print"
                                         : "ts cpu event pid fields sym print";
                json_object *plain = json_tokener_parse(
                        strndupa(inl->buf.data + inl->records[i].offset, inl->records[i].length - 1));
                json_object *made = variant_json(
                        d, b, i, DECODER_VARIANT_SYM | DECODER_VARIANT_CGROUP | DECODER_VARIANT_PRINT);
                json_object *added = variant_json(
                        d, inl, i, DECODER_VARIANT_SYM | DECODER_VARIANT_CGROUP | DECODER_VARIANT_PRINT);
                json_object *v;

                ASSERT(plain);
                ASSERT_STR_EQ(keys_of(plain),
                              known ? "ts cpu event pid fields sym cgroup" : "ts cpu event pid fields sym");
                ASSERT_STR_EQ(keys_of(made), want);
                ASSERT_STR_EQ(keys_of(added), want);
                if (known) {
                        ASSERT(json_object_object_get_ex(made, "cgroup", &v));
                        ASSERT_STR_EQ(json_object_get_string(v), "/odd\x01");
                        odd++;
                }
                json_object_put(plain);
                json_object_put(made);
                json_object_put(added);
        }
        ASSERT(odd > 0);
        printf("sched_switch: \"cgroup\" of %zu of %zu records after \"sym\" and before \"print\", in the "
               "plain lines "
               "or added\n",
               odd, b->n_records);
        batch_unref(inl);
        batch_unref(b);
        free(pages);
        decoder_free(d);
        tep_free(tep);
}

int main(int argc, char *argv[]) {
        if (argc != 2)
                TEST_FAIL("usage: test-symbolic DATADIR");
        test_sched_switch(argv[1]);
        test_syscalls(argv[1]);
        test_synthetic(argv[1]);
        test_cgroup(argv[1]);
        return 0;
}
