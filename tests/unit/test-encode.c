/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The JSON writers of the record path: exact output bytes for integers, pointers and strings
 * (escaping, UTF-8 kept or replaced byte by byte with U+FFFD), each also parsed back by json-c in
 * strict mode with UTF-8 validation; and the Batch of lines with its lost records.
 */

#include <limits.h>
#include <sys/mman.h>

#include <json-c/json.h>

#include "core/encode.h"
#include "tpd-test.h"

#define FFFD "\xef\xbf\xbd"

/* Parses text as exactly one JSON value, strictly, rejecting invalid UTF-8; NULL if it is not. */
static json_object *parse_strict(const char *text, size_t len) {
        json_tokener *tok = json_tokener_new();
        json_object *o;

        ASSERT(tok);
        json_tokener_set_flags(tok, JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8);
        o = json_tokener_parse_ex(tok, text, (int) len);
        if (o && json_tokener_get_parse_end(tok) != len) {
                json_object_put(o);
                o = NULL;
        }
        json_tokener_free(tok);
        return o;
}

/* A bare number only ends at a delimiter for an incremental parser: parse it inside an array. */
static json_object *parse_number(const char *text, size_t len) {
        char wrapped[64];
        json_object *a, *o;

        ASSERT(len + 2 < sizeof(wrapped));
        wrapped[0] = '[';
        memcpy(wrapped + 1, text, len);
        wrapped[len + 1] = ']';
        a = parse_strict(wrapped, len + 2);
        if (!a || json_object_array_length(a) != 1) {
                json_object_put(a);
                return NULL;
        }
        o = json_object_get(json_object_array_get_idx(a, 0));
        json_object_put(a);
        return o;
}

static void check_u64(uint64_t v, const char *expected) {
        JsonBuf b = {};
        json_object *o;

        ASSERT_INT_EQ(jsonbuf_reserve(&b, JSON_U64_MAX_LEN), 0);
        json_put_u64(&b, v);
        ASSERT_MEM_EQ(b.data, b.len, expected, strlen(expected));
        ASSERT(b.len <= JSON_U64_MAX_LEN);
        o = parse_number(b.data, b.len);
        ASSERT(o && json_object_is_type(o, json_type_int));
        ASSERT_U64_EQ(json_object_get_uint64(o), v);
        json_object_put(o);
        jsonbuf_done(&b);
}

static void check_i64(int64_t v, const char *expected) {
        JsonBuf b = {};
        json_object *o;

        ASSERT_INT_EQ(jsonbuf_reserve(&b, JSON_I64_MAX_LEN), 0);
        json_put_i64(&b, v);
        ASSERT_MEM_EQ(b.data, b.len, expected, strlen(expected));
        ASSERT(b.len <= JSON_I64_MAX_LEN);
        o = parse_number(b.data, b.len);
        ASSERT(o && json_object_is_type(o, json_type_int));
        ASSERT_INT_EQ(json_object_get_int64(o), v);
        json_object_put(o);
        jsonbuf_done(&b);
}

static void check_hex(uint64_t v, const char *expected) {
        JsonBuf b = {};
        json_object *o;

        ASSERT_INT_EQ(jsonbuf_reserve(&b, JSON_HEX_MAX_LEN), 0);
        json_put_hex(&b, v);
        ASSERT_MEM_EQ(b.data, b.len, expected, strlen(expected));
        ASSERT(b.len <= JSON_HEX_MAX_LEN);
        o = parse_strict(b.data, b.len);
        ASSERT(o && json_object_is_type(o, json_type_string));
        ASSERT_U64_EQ(strtoull(json_object_get_string(o), NULL, 16), v);
        json_object_put(o);
        jsonbuf_done(&b);
}

static void test_integers(void) {
        char buf[32];

        check_u64(0, "0");
        check_u64(9, "9");
        check_u64(10, "10");
        check_u64(99, "99");
        check_u64(100, "100");
        check_u64(101, "101");
        check_u64(1000, "1000");
        check_u64(4294967295U, "4294967295");
        check_u64(4294967296ULL, "4294967296");
        check_u64(9007199254740993ULL, "9007199254740993"); /* above 2^53: exact, not a double */
        check_u64(10000000000000000000ULL, "10000000000000000000");
        check_u64(UINT64_MAX, "18446744073709551615");
        /* Every power of ten and its neighbours: the two-digit loop's edges. */
        for (uint64_t p = 1; p <= 1000000000000000000ULL; p *= 10) {
                snprintf(buf, sizeof(buf), "%" PRIu64, p);
                check_u64(p, buf);
                snprintf(buf, sizeof(buf), "%" PRIu64, p - 1);
                check_u64(p - 1, buf);
                snprintf(buf, sizeof(buf), "%" PRIu64, p + 1);
                check_u64(p + 1, buf);
        }

        check_i64(0, "0");
        check_i64(-1, "-1");
        check_i64(1, "1");
        check_i64(-10, "-10");
        check_i64(-100, "-100");
        check_i64(INT32_MIN, "-2147483648");
        check_i64(INT64_MAX, "9223372036854775807");
        check_i64(INT64_MIN, "-9223372036854775808");
        check_i64(INT64_MIN + 1, "-9223372036854775807");

        check_hex(0, "\"0x0\"");
        check_hex(0xf, "\"0xf\"");
        check_hex(0x10, "\"0x10\"");
        check_hex(0xdeadbeef, "\"0xdeadbeef\"");
        check_hex(0xffff888102e20940ULL, "\"0xffff888102e20940\"");
        check_hex(UINT64_MAX, "\"0xffffffffffffffff\"");

        /* Values follow one another in one buffer without separators of their own. */
        {
                JsonBuf b = {};
                ASSERT_INT_EQ(jsonbuf_reserve(&b, 3 * JSON_U64_MAX_LEN), 0);
                json_put_u64(&b, 12);
                jsonbuf_putc(&b, ',');
                json_put_i64(&b, -34);
                jsonbuf_putc(&b, ',');
                json_put_hex(&b, 0xab);
                ASSERT_MEM_EQ(b.data, b.len, "12,-34,\"0xab\"", 13);
                jsonbuf_done(&b);
        }
}

/* Encodes n bytes of s placed at the very end of an accessible mapping: reading one byte more than
 * n would fault. Returns the output; checks it against the documented worst case. */
static char *encode_guarded(const char *s, size_t n, size_t *ret_len) {
        long pagesz = sysconf(_SC_PAGESIZE);
        size_t maplen = (n / (size_t) pagesz + 1) * (size_t) pagesz;
        uint8_t *map;
        char *copy, *out;
        JsonBuf b = {};

        map = mmap(NULL, maplen + (size_t) pagesz, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1,
                   0);
        ASSERT(map != MAP_FAILED);
        ASSERT(mprotect(map + maplen, (size_t) pagesz, PROT_NONE) == 0);
        copy = (char *) map + maplen - n;
        memcpy(copy, s, n);

        ASSERT_INT_EQ(jsonbuf_reserve(&b, JSON_STRING_MAX_LEN(n)), 0);
        json_put_string(&b, copy, n);
        ASSERT(b.len <= JSON_STRING_MAX_LEN(n));
        ASSERT(munmap(map, maplen + (size_t) pagesz) == 0);

        out = malloc(b.len + 1);
        ASSERT(out);
        memcpy(out, b.data, b.len);
        out[b.len] = 0;
        *ret_len = b.len;
        jsonbuf_done(&b);
        return out;
}

/* expected is the JSON text without its quotes; expected_value what a parser must read back. */
static void check_string_n(const char *s, size_t n, const char *expected, const char *expected_value) {
        size_t len, elen = strlen(expected);
        char *out = encode_guarded(s, n, &len);
        json_object *o;

        ASSERT(len >= 2 && out[0] == '"' && out[len - 1] == '"');
        ASSERT_MEM_EQ(out + 1, len - 2, expected, elen);
        for (size_t i = 0; i < len; i++)
                if ((unsigned char) out[i] < 0x20)
                        TEST_FAIL("raw control byte 0x%02x in output", (unsigned char) out[i]);

        o = parse_strict(out, len);
        if (!o)
                TEST_FAIL("not valid JSON: %s", out);
        ASSERT(json_object_is_type(o, json_type_string));
        if (expected_value)
                ASSERT_MEM_EQ(json_object_get_string(o), (size_t) json_object_get_string_len(o),
                              expected_value, strlen(expected_value));
        json_object_put(o);

        /* json_append_string() reserves by itself and writes the same. */
        {
                JsonBuf b = {};
                ASSERT_INT_EQ(json_append_string(&b, s, n), 0);
                ASSERT_MEM_EQ(b.data, b.len, out, len);
                jsonbuf_done(&b);
        }
        free(out);
}

static void check_string(const char *s, const char *expected, const char *expected_value) {
        check_string_n(s, strlen(s), expected, expected_value);
}

static void test_strings_plain(void) {
        check_string("", "", "");
        check_string("hello", "hello", "hello");
        check_string("slash / stays", "slash / stays", "slash / stays");
        check_string("\"", "\\\"", "\"");
        check_string("\\", "\\\\", "\\");
        check_string("a\"b\\c\"", "a\\\"b\\\\c\\\"", "a\"b\\c\"");
        check_string("\x7f", "\x7f", "\x7f"); /* DEL needs no escape in JSON */

        /* Stops at the first NUL; n bytes when there is none. */
        check_string_n("ab\0cd", 5, "ab", "ab");
        check_string_n("\0abc", 4, "", "");
        check_string_n("abcd", 2, "ab", "ab");
        check_string_n("abcd", 0, "", "");
        check_string_n("0123456789abcdef", 16, "0123456789abcdef", "0123456789abcdef");
}

static void test_strings_control(void) {
        char expected[8], value[2];

        for (int c = 1; c < 0x20; c++) {
                char in[2] = { (char) c, 0 };

                switch (c) {
                case '\n':
                        strcpy(expected, "\\n");
                        break;
                case '\t':
                        strcpy(expected, "\\t");
                        break;
                case '\r':
                        strcpy(expected, "\\r");
                        break;
                default:
                        snprintf(expected, sizeof(expected), "\\u%04x", c);
                }
                value[0] = (char) c, value[1] = 0;
                check_string(in, expected, value);
        }
        /* All of them in one string, between plain runs. */
        check_string("a\x01"
                     "b\x1f"
                     "c\nd\te\rf",
                     "a\\u0001b\\u001fc\\nd\\te\\rf",
                     "a\x01"
                     "b\x1f"
                     "c\nd\te\rf");
}

static void test_strings_utf8(void) {
        /* Valid sequences are kept as they are, at each length's boundaries. */
        static const char *const valid[] = {
                "\xc2\x80",         /* U+0080 */
                "\xc3\xa9",         /* é */
                "\xdf\xbf",         /* U+07FF */
                "\xe0\xa0\x80",     /* U+0800 */
                "\xe2\x82\xac",     /* € */
                "\xed\x9f\xbf",     /* U+D7FF, last before the surrogates */
                "\xee\x80\x80",     /* U+E000, first after them */
                "\xef\xbf\xbd",     /* U+FFFD itself */
                "\xef\xbf\xbf",     /* U+FFFF */
                "\xf0\x90\x80\x80", /* U+10000 */
                "\xf0\x9d\x84\x9e", /* 𝄞 */
                "\xf4\x8f\xbf\xbf", /* U+10FFFF, the last code point */
        };
        for (size_t i = 0; i < sizeof(valid) / sizeof(valid[0]); i++)
                check_string(valid[i], valid[i], valid[i]);
        check_string("x\xc3\xa9y\xe2\x82\xacz\xf0\x9d\x84\x9e!", "x\xc3\xa9y\xe2\x82\xacz\xf0\x9d\x84\x9e!",
                     "x\xc3\xa9y\xe2\x82\xacz\xf0\x9d\x84\x9e!");

        /* Every byte that does not start a valid sequence becomes one U+FFFD; the bytes after it
         * are looked at afresh. */
        check_string("\x80", FFFD, FFFD); /* lone continuation */
        check_string("\xbf", FFFD, FFFD);
        check_string("\xc0\x80", FFFD FFFD, FFFD FFFD); /* overlong NUL */
        check_string("\xc0\xaf", FFFD FFFD, FFFD FFFD); /* overlong '/' */
        check_string("\xc1\xbf", FFFD FFFD, FFFD FFFD);
        check_string("\xe0\x80\xaf", FFFD FFFD FFFD, FFFD FFFD FFFD); /* overlong 3 */
        check_string("\xe0\x9f\xbf", FFFD FFFD FFFD, FFFD FFFD FFFD);
        check_string("\xf0\x80\x80\xaf", FFFD FFFD FFFD FFFD, FFFD FFFD FFFD FFFD); /* overlong 4 */
        check_string("\xf0\x8f\xbf\xbf", FFFD FFFD FFFD FFFD, FFFD FFFD FFFD FFFD);
        check_string("\xed\xa0\x80", FFFD FFFD FFFD, FFFD FFFD FFFD);               /* U+D800 */
        check_string("\xed\xbf\xbf", FFFD FFFD FFFD, FFFD FFFD FFFD);               /* U+DFFF */
        check_string("\xf4\x90\x80\x80", FFFD FFFD FFFD FFFD, FFFD FFFD FFFD FFFD); /* U+110000 */
        check_string("\xf5\x80\x80\x80", FFFD FFFD FFFD FFFD, FFFD FFFD FFFD FFFD);
        check_string("\xf8\x88\x80\x80\x80", FFFD FFFD FFFD FFFD FFFD, NULL);
        check_string("\xfe\xff", FFFD FFFD, FFFD FFFD);
        /* Truncated sequences: before plain text, at the end of the string, before a NUL. */
        check_string("\xe2\x82"
                     "A",
                     FFFD FFFD "A", FFFD FFFD "A");
        check_string("\xf0\x9d\x84"
                     "B",
                     FFFD FFFD FFFD "B", FFFD FFFD FFFD "B");
        check_string("\xc3", FFFD, FFFD);
        check_string("end \xf0\x9f\x98", "end " FFFD FFFD FFFD, "end " FFFD FFFD FFFD);
        check_string_n("\xe2\x00\xac", 3, FFFD, FFFD);
        /* A valid sequence cut by n: the bytes past n are not read (the input ends at a guard
         * page) and what is left is invalid. */
        check_string_n("\xc3\xa9", 1, FFFD, FFFD);
        check_string_n("\xe2\x82\xac", 2, FFFD FFFD, FFFD FFFD);
        check_string_n("\xf0\x9d\x84\x9e", 3, FFFD FFFD FFFD, FFFD FFFD FFFD);
        /* Escapes and replacements next to each other. */
        check_string("\xff\"\x01\xc3\xa9\\", FFFD "\\\"\\u0001\xc3\xa9\\\\", FFFD "\"\x01\xc3\xa9\\");
}

static void test_strings_worst_case(void) {
        char in[256];
        size_t len;
        char *out;

        /* The documented bound is reached by control bytes and never passed by anything. */
        memset(in, 0x01, sizeof(in));
        out = encode_guarded(in, sizeof(in), &len);
        ASSERT_INT_EQ(len, JSON_STRING_MAX_LEN(sizeof(in)));
        free(out);
        for (int c = 1; c < 256; c++) {
                memset(in, c, sizeof(in));
                out = encode_guarded(in, sizeof(in), &len);
                ASSERT(len <= JSON_STRING_MAX_LEN(sizeof(in)));
                free(out);
        }
}

static void test_jsonbuf(void) {
        JsonBuf b = {};
        char *old;

        ASSERT_INT_EQ(jsonbuf_reserve(&b, 0), 0);
        ASSERT_INT_EQ(jsonbuf_reserve(&b, 10), 0);
        ASSERT(b.cap >= 10);
        jsonbuf_put(&b, "0123456789", 10);
        /* Growing keeps what was written. */
        ASSERT_INT_EQ(jsonbuf_reserve(&b, 100000), 0);
        ASSERT(b.cap - b.len >= 100000);
        ASSERT_MEM_EQ(b.data, b.len, "0123456789", 10);
        /* Room that is there already: no move. */
        old = b.data;
        ASSERT_INT_EQ(jsonbuf_reserve(&b, 5), 0);
        ASSERT(b.data == old);
        jsonbuf_done(&b);
        ASSERT(b.data == NULL && b.len == 0 && b.cap == 0);
}

static void test_batch(void) {
        Batch *b = batch_new();
        static const char lost1[] = "{\"ts\":5,\"cpu\":1,\"lost\":7,\"cause\":\"overrun\"}\n";
        static const char lost2[] = "{\"ts\":18446744073709551615,\"cpu\":4294967295,"
                                    "\"lost\":18446744073709551615,\"cause\":\"client\"}\n";
        Record *rec;

        ASSERT(b);
        ASSERT_INT_EQ(b->refs, 1);
        ASSERT(batch_ref(b) == b);
        ASSERT_INT_EQ(b->refs, 2);
        ASSERT(batch_unref(b) == NULL);
        ASSERT_INT_EQ(b->refs, 1);
        ASSERT(batch_ref(NULL) == NULL);
        ASSERT(batch_unref(NULL) == NULL);

        ASSERT_INT_EQ(batch_add_lost(b, 5, 1, 7, TPD_LOST_OVERRUN), 0);
        ASSERT_INT_EQ(batch_add_lost(b, UINT64_MAX, UINT_MAX, UINT64_MAX, TPD_LOST_CLIENT), 0);
        ASSERT_INT_EQ(b->n_records, 2);
        rec = &b->records[0];
        ASSERT_INT_EQ(rec->kind, TPD_LOST_OVERRUN);
        ASSERT_U64_EQ(rec->ts, 5);
        ASSERT_INT_EQ(rec->cpu, 1);
        ASSERT_U64_EQ(rec->lost, 7);
        ASSERT_INT_EQ(rec->pid, -1);
        ASSERT_INT_EQ(rec->offset, 0);
        ASSERT_MEM_EQ(b->buf.data + rec->offset, rec->length, lost1, sizeof(lost1) - 1);
        rec = &b->records[1];
        ASSERT_INT_EQ(rec->kind, TPD_LOST_CLIENT);
        ASSERT_INT_EQ(rec->offset, sizeof(lost1) - 1);
        ASSERT_MEM_EQ(b->buf.data + rec->offset, rec->length, lost2, sizeof(lost2) - 1);
        ASSERT_INT_EQ(b->buf.len, sizeof(lost1) - 1 + sizeof(lost2) - 1);
        for (size_t i = 0; i < 2; i++) {
                json_object *o = parse_strict(b->buf.data + b->records[i].offset, b->records[i].length - 1);
                ASSERT(o);
                json_object_put(o);
        }

        /* Record slots come zeroed, also after growth, and earlier ones survive it. */
        for (size_t i = 0; i < 1000; i++) {
                rec = batch_add_record(b);
                ASSERT(rec);
                ASSERT_INT_EQ(rec->length, 0);
                ASSERT_INT_EQ(rec->kind, 0);
                rec->offset = (uint32_t) i;
                rec->lost = i;
        }
        ASSERT_INT_EQ(b->n_records, 1002);
        ASSERT_U64_EQ(b->records[0].lost, 7);
        for (size_t i = 0; i < 1000; i++)
                ASSERT_U64_EQ(b->records[2 + i].lost, i);

        /* A reset keeps the memory for the next read. */
        {
                size_t cap = b->cap_records, bufcap = b->buf.cap;
                batch_reset(b);
                ASSERT_INT_EQ(b->n_records, 0);
                ASSERT_INT_EQ(b->buf.len, 0);
                ASSERT_INT_EQ(b->cap_records, cap);
                ASSERT_INT_EQ(b->buf.cap, bufcap);
                rec = batch_add_record(b);
                ASSERT(rec && rec->lost == 0 && rec->offset == 0);
        }
        ASSERT(batch_unref(b) == NULL);
}

int main(void) {
        test_integers();
        test_strings_plain();
        test_strings_control();
        test_strings_utf8();
        test_strings_worst_case();
        test_jsonbuf();
        test_batch();
        return EXIT_SUCCESS;
}
