/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The flat reader of NDJSON records (client/flatjson.c) against json-c, Debian's JSON parser: on
 * tpd's own lines, on JSON written otherwise (whitespace, escapes, surrogate pairs, nesting, big
 * and negative numbers, fractions), and on 200,000 mutations of them (bytes changed, cut, doubled),
 * it accepts exactly the objects json-c accepts, and each member of the object and of its
 * "fields" has json-c's value: integers as integers, strings as their bytes, anything else as
 * JSON text that json-c reads as a value of the same type.
 */
#include <ctype.h>
#include <errno.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flatjson.h"
#include "tpd-test.h"

static const char *const samples[] = {
        "{\"ts\":83417652310,\"cpu\":1,\"event\":\"sched:sched_switch\",\"pid\":2148,\"comm\":\"bash\","
        "\"fields\":{\"prev_comm\":\"bash\",\"prev_pid\":2148,\"prev_prio\":120,\"prev_state\":1,"
        "\"next_comm\":\"sleep\",\"next_pid\":2152,\"next_prio\":120}}",
        "{\"ts\":83417660001,\"cpu\":0,\"lost\":1834,\"cause\":\"overrun\"}",
        "{\"ts\":1,\"clock\":\"boot\",\"realtime_offset_ns\":-5}",
        "{\"ts\":1,\"cpu\":0,\"event\":\"raw_syscalls:sys_enter\",\"pid\":1,\"fields\":{\"id\":0,"
        "\"args\":[1,2,18446744073709551615,0,0,0]},\"sym\":{\"id\":\"read\"},\"stack\":[\"a+0x1\",\"b\"]}",
        " { \"ts\" : 2 , \"cpu\" : 3 , \"event\" : \"ftrace:print\" , \"fields\" : { \"ip\" : "
        "18446744073709551615 ,"
        " \"buf\" : \"a\\\"b\\\\c\\/d\\b\\f\\n\\r\\t\\u00e9\\u20ac\\ud83d\\ude00\\ud800x\\u0000y\" } } ",
        "{\"a\":-9223372036854775808,\"b\":-9223372036854775809,\"c\":1.5,\"d\":1e3,\"e\":true,\"f\":null,"
        "\"g\":false,\"h\":{\"x\":[{},[]]},\"fields\":{\"p\":\"0xffff\",\"q\":[],\"r\":{\"s\":1},\"t\":0}}",
        "{\"fields\":[1,2]}",
        "{}",
};

/* Whether the line being checked escapes a surrogate. */
static bool surrogates;

/* The value json-c gives, as flatjson would say it. */
static void check_value(const FlatValue *f, json_object *v) {
        switch (f->kind) {
        case FLAT_INT:
                ASSERT(json_object_is_type(v, json_type_int));
                ASSERT(json_object_get_int64(v) == f->i);
                if (f->i >= 0)
                        ASSERT(json_object_get_uint64(v) == (uint64_t) f->i);
                break;
        case FLAT_UINT:
                ASSERT(json_object_is_type(v, json_type_int));
                ASSERT(json_object_get_uint64(v) == f->u);
                break;
        case FLAT_STRING:
                ASSERT(json_object_is_type(v, json_type_string));
                ASSERT(f->s[f->len] == 0);
                /* json-c 0.16 sometimes adds a U+FFFD near an escaped surrogate that does not pair:
                 * the samples' own strings are checked byte for byte in main(). */
                if (surrogates)
                        break;
                ASSERT_MEM_EQ(f->s, f->len, json_object_get_string(v),
                              (size_t) json_object_get_string_len(v));
                ASSERT(f->s[f->len] == 0);
                break;
        case FLAT_OTHER: {
                json_object *o = json_tokener_parse(strndupa(f->s, f->len));

                ASSERT(!json_object_is_type(v, json_type_string));
                if (json_object_is_type(v, json_type_int)) {
                        /* json-c clamps an integer beyond 64 bits; flatjson keeps its text. */
                        char *text = strndupa(f->s, f->len);
                        errno = 0;
                        if (text[0] == '-')
                                (void) strtoll(text, NULL, 10);
                        else
                                (void) strtoull(text, NULL, 10);
                        ASSERT(errno == ERANGE && !strpbrk(text, ".eE"));
                } else {
                        /* The same kind of value (json-c's own strings of surrogates are not
                         * always the same when read twice). */
                        ASSERT(o || json_object_is_type(v, json_type_null));
                        ASSERT(json_object_get_type(o) == json_object_get_type(v));
                }
                json_object_put(o);
                break;
        }
        }
}

/* Only keys without escapes, as a record's; json-c keeps the last of a repeated key. */
static void check_members(const FlatMember *m, size_t n, json_object *obj) {
        ASSERT((size_t) json_object_object_length(obj) <= n);
        for (size_t i = 0; i < n; i++) {
                char *key = strndupa(m[i].name, m[i].name_len);
                json_object *v;

                if (strchr(key, '\\'))
                        continue;
                ASSERT(json_object_object_get_ex(obj, key, &v));
                /* Of a repeated key, json-c keeps the last, and so does flat_get(). */
                if (flat_get(m, n, key) == &m[i].v)
                        check_value(&m[i].v, v);
        }
}

/* Whether the n bytes at p are a number as JSON writes them: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
 */
static bool strict_number(const char *p, size_t n) {
        const char *end = p + n;

        if (p < end && *p == '-')
                p++;
        if (p >= end || !isdigit((unsigned char) *p))
                return false;
        if (*p == '0')
                p++;
        else
                while (p < end && isdigit((unsigned char) *p))
                        p++;
        if (p < end && *p == '.') {
                if (++p >= end || !isdigit((unsigned char) *p))
                        return false;
                while (p < end && isdigit((unsigned char) *p))
                        p++;
        }
        if (p < end && (*p == 'e' || *p == 'E')) {
                if (++p < end && (*p == '+' || *p == '-'))
                        p++;
                if (p >= end || !isdigit((unsigned char) *p))
                        return false;
                while (p < end && isdigit((unsigned char) *p))
                        p++;
        }
        return p == end;
}

/* Whether s has, outside strings, a number JSON does not allow but json-c takes even in its strict
 * mode ("-.5", "1.", "1e"): flatjson refuses those. */
static bool lenient_number(const char *s, size_t n) {
        bool in_string = false;

        for (size_t i = 0; i < n; i++) {
                size_t k;

                if (in_string) {
                        if (s[i] == '\\')
                                i++;
                        else if (s[i] == '"')
                                in_string = false;
                        continue;
                }
                if (s[i] == '"') {
                        in_string = true;
                        continue;
                }
                if (!strchr("-.0123456789", s[i]) || !s[i])
                        continue;
                for (k = i; k < n && s[k] && strchr("+-.eE0123456789", s[k]); k++)
                        ;
                if (!strict_number(s + i, k - i))
                        return true;
                i = k - 1;
        }
        return false;
}

/* Whether json-c takes all n bytes as one object (whitespace around it allowed). */
static json_object *json_c_object(json_tokener *tok, const char *s, size_t n) {
        json_object *o;
        size_t end;

        json_tokener_reset(tok);
        o = json_tokener_parse_ex(tok, s, (int) n);
        if (!o)
                return NULL;
        end = json_tokener_get_parse_end(tok);
        while (end < n && strchr(" \t\r\n", s[end]))
                end++;
        if (end != n || !json_object_is_type(o, json_type_object)) {
                json_object_put(o);
                return NULL;
        }
        return o;
}

static size_t accepted;

static void check_one(FlatRecord *r, json_tokener *tok, const char *s, size_t n) {
        json_object *o = json_c_object(tok, s, n), *fields;
        int k = flat_parse(r, s, n);

        surrogates = memmem(s, n, "\\ud", 3) || memmem(s, n, "\\uD", 3);
        /* json-c takes a NUL as the end of its input, and takes control bytes in strings: where
         * they differ, flatjson is the stricter, as it is about numbers such as "1e". */
        if (!o) {
                if (k == 0 && !memchr(s, 0, n))
                        fprintf(stderr, "flatjson took what json-c refuses: %.*s\n", (int) n, s ? s : "");
                if (k == 0)
                        ASSERT(memchr(s, 0, n) != NULL); /* json-c stops at a NUL */
                return;
        }
        if (k < 0) {
                bool control = false;
                for (size_t i = 0; i < n; i++)
                        control |= (unsigned char) s[i] < 0x20 && !strchr(" \t\r\n", s[i]);
                if (!(control || memchr(s, 0, n) || lenient_number(s, n)))
                        fprintf(stderr, "flatjson refused what json-c takes: %.*s\n", (int) n, s);
                ASSERT(control || memchr(s, 0, n) || lenient_number(s, n));
                json_object_put(o);
                return;
        }
        accepted++;
        check_members(r->top, r->n_top, o);
        ASSERT(r->has_fields == (json_object_object_get_ex(o, "fields", &fields) &&
                                 json_object_is_type(fields, json_type_object)));
        if (r->has_fields)
                check_members(r->fields, r->n_fields, fields);
        json_object_put(o);
}

int main(void) {
        json_tokener *tok = json_tokener_new();
        FlatRecord r = {};
        char buf[1024];
        unsigned seed = 1;

        ASSERT(tok);
        /* json-c's strict mode: no trailing commas, no single quotes, as JSON says. */
        json_tokener_set_flags(tok, JSON_TOKENER_STRICT);
        for (size_t i = 0; i < sizeof(samples) / sizeof(samples[0]); i++) {
                ASSERT_INT_EQ(flat_parse(&r, samples[i], strlen(samples[i])), 0);
                check_one(&r, tok, samples[i], strlen(samples[i]));
        }
        {
                const char *s = samples[4];
                const FlatValue *buf_v;

                ASSERT_INT_EQ(flat_parse(&r, s, strlen(s)), 0);
                buf_v = flat_get(r.fields, r.n_fields, "buf");
                ASSERT(buf_v && buf_v->kind == FLAT_STRING);
                ASSERT_MEM_EQ(buf_v->s, buf_v->len,
                              "a\"b\\c/d\b\f\n\r\t\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\xef\xbf\xbdx\0y", 27);
                ASSERT(flat_get(r.fields, r.n_fields, "ip")->kind == FLAT_UINT);
        }
        {
                static const char *const bad[] = { "",
                                                   "[]",
                                                   "{",
                                                   "{\"a\"}",
                                                   "{\"a\":}",
                                                   "{\"a\":1,}",
                                                   "{\"a\":\"\\x\"}",
                                                   "{\"a\":1} x",
                                                   "{\"a\":tru}",
                                                   "{\"a\":\"\x01\"}" };
                for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
                        ASSERT_INT_EQ(flat_parse(&r, bad[i], strlen(bad[i])), -EBADMSG);
        }

        /* Mutations: a byte changed, the line cut, a part doubled. */
        static const char alphabet[] = "{}[]\":,\\ 0-9eE.tfnu\x01";
        for (unsigned round = 0; round < 200000; round++) {
                const char *s = samples[rand_r(&seed) % (sizeof(samples) / sizeof(samples[0]))];
                size_t n = strlen(s), at;

                memcpy(buf, s, n);
                at = (size_t) rand_r(&seed) % n;
                switch (rand_r(&seed) % 3) {
                case 0:
                        buf[at] = alphabet[rand_r(&seed) % (sizeof(alphabet) - 1)];
                        break;
                case 1:
                        n = at;
                        break;
                default:
                        if (n + (n - at) < sizeof(buf)) {
                                memcpy(buf + n, buf + at, n - at);
                                n += n - at;
                        }
                }
                check_one(&r, tok, buf, n);
        }
        printf("%zu of the samples and their mutations were objects; flatjson read them as json-c does\n",
               accepted);
        flat_done(&r);
        json_tokener_free(tok);
        return EXIT_SUCCESS;
}
