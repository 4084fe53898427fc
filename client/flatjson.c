/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "flatjson.h"
#include "util.h"

/* Arrays and objects nested deeper than this are not a record's. */
#define DEPTH_MAX 64

typedef struct Parser {
        const char *p, *end;
        char *out; /* where the next unescaped string goes */
} Parser;

static void skip_ws(Parser *ps) {
        while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r'))
                ps->p++;
}

static int hex4(const char *p, const char *end) {
        int v = 0;

        if (end - p < 4)
                return -1;
        for (int i = 0; i < 4; i++) {
                char c = p[i];
                int d = c >= '0' && c <= '9'   ? c - '0'
                        : c >= 'a' && c <= 'f' ? c - 'a' + 10
                        : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                               : -1;

                if (d < 0)
                        return -1;
                v = v * 16 + d;
        }
        return v;
}

static char *put_utf8(char *o, uint32_t c) {
        if (c < 0x80)
                *o++ = (char) c;
        else if (c < 0x800) {
                *o++ = (char) (0xc0 | c >> 6);
                *o++ = (char) (0x80 | (c & 0x3f));
        } else if (c < 0x10000) {
                *o++ = (char) (0xe0 | c >> 12);
                *o++ = (char) (0x80 | (c >> 6 & 0x3f));
                *o++ = (char) (0x80 | (c & 0x3f));
        } else {
                *o++ = (char) (0xf0 | c >> 18);
                *o++ = (char) (0x80 | (c >> 12 & 0x3f));
                *o++ = (char) (0x80 | (c >> 6 & 0x3f));
                *o++ = (char) (0x80 | (c & 0x3f));
        }
        return o;
}

/* A string at ps->p (its opening quote), unescaped into ps->out when value is set. Unescaped, a
 * string is never longer than its text: the buffer has room. A lone surrogate becomes U+FFFD. */
static bool string(Parser *ps, FlatValue *value) {
        const char *p = ps->p + 1;
        char *o = ps->out, *start = o;

        for (;;) {
                const char *run = p;

                while (p < ps->end && *p != '"' && *p != '\\' && (unsigned char) *p >= 0x20)
                        p++;
                if (value) {
                        memcpy(o, run, (size_t) (p - run));
                        o += p - run;
                }
                if (p >= ps->end || (unsigned char) *p < 0x20)
                        return false;
                if (*p == '"')
                        break;
                if (ps->end - p < 2)
                        return false;
                switch (p[1]) {
                case '"':
                case '\\':
                case '/':
                        if (value)
                                *o++ = p[1];
                        p += 2;
                        continue;
                case 'b':
                case 'f':
                case 'n':
                case 'r':
                case 't':
                        if (value)
                                *o++ = p[1] == 'b'   ? '\b'
                                       : p[1] == 'f' ? '\f'
                                       : p[1] == 'n' ? '\n'
                                       : p[1] == 'r' ? '\r'
                                                     : '\t';
                        p += 2;
                        continue;
                case 'u': {
                        int c = hex4(p + 2, ps->end), lo;

                        if (c < 0)
                                return false;
                        p += 6;
                        if (c >= 0xd800 && c < 0xdc00 && ps->end - p >= 6 && p[0] == '\\' && p[1] == 'u' &&
                            (lo = hex4(p + 2, ps->end)) >= 0xdc00 && lo < 0xe000) {
                                c = 0x10000 + ((c - 0xd800) << 10) + (lo - 0xdc00);
                                p += 6;
                        } else if (c >= 0xd800 && c < 0xe000)
                                c = 0xfffd;
                        if (value)
                                o = put_utf8(o, (uint32_t) c);
                        continue;
                }
                default:
                        return false;
                }
        }
        ps->p = p + 1;
        if (value) {
                *o++ = 0;
                ps->out = o;
                *value = (FlatValue){ .kind = FLAT_STRING, .s = start, .len = (size_t) (o - start - 1) };
        }
        return true;
}

/* An integer, or the text of a number that is not one (a fraction, an exponent, out of range). */
static bool number(Parser *ps, FlatValue *value) {
        const char *start = ps->p, *p = start;
        bool negative = p < ps->end && *p == '-', integer = true, overflow = false;
        uint64_t v = 0;

        if (negative)
                p++;
        /* JSON's numbers: no leading zero. */
        if (p >= ps->end || *p < '0' || *p > '9' ||
            (*p == '0' && p + 1 < ps->end && p[1] >= '0' && p[1] <= '9'))
                return false;
        for (; p < ps->end && *p >= '0' && *p <= '9'; p++) {
                if (v > (UINT64_MAX - (uint64_t) (*p - '0')) / 10)
                        overflow = true;
                v = v * 10 + (uint64_t) (*p - '0');
        }
        if (p < ps->end && *p == '.') {
                integer = false;
                if (++p >= ps->end || *p < '0' || *p > '9')
                        return false;
                while (p < ps->end && *p >= '0' && *p <= '9')
                        p++;
        }
        if (p < ps->end && (*p == 'e' || *p == 'E')) {
                integer = false;
                if (++p < ps->end && (*p == '+' || *p == '-'))
                        p++;
                if (p >= ps->end || *p < '0' || *p > '9')
                        return false;
                while (p < ps->end && *p >= '0' && *p <= '9')
                        p++;
        }
        ps->p = p;
        if (!value)
                return true;
        if (!integer || overflow || (negative && v > (uint64_t) INT64_MAX + 1))
                *value = (FlatValue){ .kind = FLAT_OTHER, .s = start, .len = (size_t) (p - start) };
        else if (negative)
                *value = (FlatValue){ .kind = FLAT_INT, .i = (int64_t) (0 - v) };
        else if (v > INT64_MAX)
                *value = (FlatValue){ .kind = FLAT_UINT, .u = v };
        else
                *value = (FlatValue){ .kind = FLAT_INT, .i = (int64_t) v };
        return true;
}

static bool value(Parser *ps, FlatValue *ret, unsigned depth);

/* The members of an object at ps->p, into *members when members is set (else only checked). */
static int object(Parser *ps, FlatMember **members, size_t *n, size_t *cap, unsigned depth) {
        bool first = true;

        ps->p++;
        for (;;) {
                FlatMember m;
                FlatValue *v = NULL;

                skip_ws(ps);
                if (ps->p < ps->end && *ps->p == '}' && first)
                        break;
                if (ps->p >= ps->end || *ps->p != '"')
                        return -EBADMSG;
                m.name = ps->p + 1;
                if (!string(ps, NULL))
                        return -EBADMSG;
                m.name_len = (size_t) (ps->p - 1 - m.name);
                skip_ws(ps);
                if (ps->p >= ps->end || *ps->p != ':')
                        return -EBADMSG;
                ps->p++;
                skip_ws(ps);
                if (members) {
                        if (*n == *cap) {
                                size_t c = MAX(*cap * 2, (size_t) 16);
                                FlatMember *a = reallocarray(*members, c, sizeof(FlatMember));
                                if (!a)
                                        return -ENOMEM;
                                *members = a;
                                *cap = c;
                        }
                        v = &m.v;
                }
                if (!value(ps, v, depth + 1))
                        return -EBADMSG;
                if (members)
                        (*members)[(*n)++] = m;
                skip_ws(ps);
                first = false;
                if (ps->p < ps->end && *ps->p == ',') {
                        ps->p++;
                        continue;
                }
                if (ps->p < ps->end && *ps->p == '}')
                        break;
                return -EBADMSG;
        }
        ps->p++;
        return 0;
}

static bool array(Parser *ps, unsigned depth) {
        ps->p++;
        skip_ws(ps);
        if (ps->p < ps->end && *ps->p == ']') {
                ps->p++;
                return true;
        }
        for (;;) {
                skip_ws(ps);
                if (!value(ps, NULL, depth + 1))
                        return false;
                skip_ws(ps);
                if (ps->p < ps->end && *ps->p == ',') {
                        ps->p++;
                        continue;
                }
                if (ps->p < ps->end && *ps->p == ']') {
                        ps->p++;
                        return true;
                }
                return false;
        }
}

static bool literal(Parser *ps, const char *word) {
        size_t n = strlen(word);

        if ((size_t) (ps->end - ps->p) < n || memcmp(ps->p, word, n) != 0)
                return false;
        ps->p += n;
        return true;
}

/* A value at ps->p: strings and integers as such into *ret, anything else as its text, checked;
 * with ret NULL, only checked (and nothing written to the string buffer). */
static bool value(Parser *ps, FlatValue *ret, unsigned depth) {
        const char *start = ps->p;
        bool ok;

        if (ps->p >= ps->end || depth > DEPTH_MAX)
                return false;
        switch (*ps->p) {
        case '"':
                return string(ps, ret);
        case '{':
                ok = object(ps, NULL, NULL, NULL, depth) == 0;
                break;
        case '[':
                ok = array(ps, depth);
                break;
        case 't':
                ok = literal(ps, "true");
                break;
        case 'f':
                ok = literal(ps, "false");
                break;
        case 'n':
                ok = literal(ps, "null");
                break;
        default:
                return number(ps, ret);
        }
        if (ret)
                *ret = (FlatValue){ .kind = FLAT_OTHER, .s = start, .len = (size_t) (ps->p - start) };
        return ok;
}

int flat_parse(FlatRecord *r, const char *line, size_t n) {
        Parser ps = { .p = line, .end = line + n };
        const FlatValue *fields;
        int k;

        r->n_top = r->n_fields = 0;
        r->has_fields = false;
        if (n + 1 > r->buf_cap) {
                char *b = realloc(r->buf, n + 1);
                if (!b)
                        return -ENOMEM;
                r->buf = b;
                r->buf_cap = n + 1;
        }
        ps.out = r->buf;
        skip_ws(&ps);
        if (ps.p >= ps.end || *ps.p != '{')
                return -EBADMSG;
        k = object(&ps, &r->top, &r->n_top, &r->cap_top, 0);
        if (k < 0)
                return k;
        skip_ws(&ps);
        if (ps.p != ps.end)
                return -EBADMSG;

        /* "fields" (the last, if repeated), an object: read again, its members flat. */
        fields = flat_get(r->top, r->n_top, "fields");
        if (fields && fields->kind == FLAT_OTHER && fields->s[0] == '{') {
                ps = (Parser){ .p = fields->s, .end = fields->s + fields->len, .out = ps.out };
                k = object(&ps, &r->fields, &r->n_fields, &r->cap_fields, 1);
                if (k < 0)
                        return k;
                r->has_fields = true;
        }
        return 0;
}

void flat_done(FlatRecord *r) {
        free(r->top);
        free(r->fields);
        free(r->buf);
        *r = (FlatRecord){};
}

const FlatValue *flat_get(const FlatMember *members, size_t n, const char *name) {
        size_t len = strlen(name);

        /* The last of a repeated name, as json-c keeps it. */
        for (size_t i = n; i > 0; i--)
                if (members[i - 1].name_len == len && memcmp(members[i - 1].name, name, len) == 0)
                        return &members[i - 1].v;
        return NULL;
}
