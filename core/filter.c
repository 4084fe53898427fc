/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <inttypes.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>

#include <traceevent/event-parse.h>

#include "core/filter.h"
#include "tpd-protocol.h"
#include "util.h"

/*
 * Why canonical text: libtraceevent 1.7 and the kernel read the same language differently.
 * libtraceevent reads "&&" and "||" strictly left to right (the kernel binds "&&" tighter), joins
 * adjacent "..." strings, treats a backslash before the closing quote as an escape (and then runs
 * past the end of the text: the crash of issue 7), turns a one-character '...' string into a
 * number, has no "~" glob and no "&" test, and silently reads an unknown field as false. Both read
 * 0-prefixed numbers as octal. The canonical text avoids every one of these.
 */

typedef enum TokenType {
        TOKEN_END,
        TOKEN_FIELD,
        TOKEN_NUMBER,
        TOKEN_STRING,
        TOKEN_AND,    /* && */
        TOKEN_OR,     /* || */
        TOKEN_NOT,    /* ! */
        TOKEN_LPAREN, /* ( */
        TOKEN_RPAREN, /* ) */
        TOKEN_EQ,     /* == */
        TOKEN_NE,     /* != */
        TOKEN_LT,     /* < */
        TOKEN_LE,     /* <= */
        TOKEN_GT,     /* > */
        TOKEN_GE,     /* >= */
        TOKEN_BAND,   /* & */
        TOKEN_GLOB,   /* ~ */
} TokenType;

static const char *const token_text[] = {
        [TOKEN_END] = "end of filter",
        [TOKEN_FIELD] = "field",
        [TOKEN_NUMBER] = "number",
        [TOKEN_STRING] = "string",
        [TOKEN_AND] = "&&",
        [TOKEN_OR] = "||",
        [TOKEN_NOT] = "!",
        [TOKEN_LPAREN] = "(",
        [TOKEN_RPAREN] = ")",
        [TOKEN_EQ] = "==",
        [TOKEN_NE] = "!=",
        [TOKEN_LT] = "<",
        [TOKEN_LE] = "<=",
        [TOKEN_GT] = ">",
        [TOKEN_GE] = ">=",
        [TOKEN_BAND] = "&",
        [TOKEN_GLOB] = "~",
};

typedef struct Token {
        TokenType type;
        size_t pos;      /* offset in the text */
        const char *str; /* FIELD, STRING: the name or the value (without quotes), not terminated */
        size_t len;
        uint64_t number; /* NUMBER: the magnitude */
        bool negative;   /* NUMBER: written with a '-' (kernel filters, signed fields) */
} Token;

typedef enum NodeKind {
        NODE_PREDICATE,
        NODE_AND,
        NODE_OR,
        NODE_NOT,
} NodeKind;

typedef struct Node Node;
struct Node {
        NodeKind kind;
        Node *left, *right; /* NOT uses left only */
        /* PREDICATE */
        const struct tep_format_field *field;
        TokenType op;
        Token value;
};

typedef struct Parser {
        const struct tep_event *event;
        const char *text;
        size_t length;
        FilterTarget target;
        size_t pos;
        Token tok; /* the current token, read ahead */
        unsigned depth;
        unsigned n_predicates;
        char *message;
        int error;
        /* filter_canonicalize_stream(): the text is read as the kernel reads it, and the first
         * construct only the kernel reads is noted here instead of failing the parse. */
        bool kernel_too;
        char *stream_message;
        int stream_error;
} Parser;

typedef struct Buffer {
        char *data;
        size_t len, size;
        bool oom;
        unsigned depth, max_depth; /* of the parentheses written, "! (" counting once */
} Buffer;

static Node *node_free(Node *n) {
        if (!n)
                return NULL;
        node_free(n->left);
        node_free(n->right);
        free(n);
        return NULL;
}
DEFINE_TRIVIAL_CLEANUP_FUNC(Node *, node_free);

static int message_format(char **ret, size_t pos, const char *format, va_list ap) {
        char reason[256];

        vsnprintf(reason, sizeof(reason), format, ap);
        if (asprintf(ret, "column %zu: %s", pos + 1, reason) < 0) {
                *ret = NULL;
                return -ENOMEM;
        }
        return -EINVAL;
}

/* Records the first error only; the message names a column and shows no byte of the input that
 * is not printable ASCII. */
_printf_(3, 4) static int parser_fail(Parser *p, size_t pos, const char *format, ...) {
        va_list ap;

        if (p->error)
                return p->error;
        va_start(ap, format);
        p->error = message_format(&p->message, pos, format, ap);
        va_end(ap);
        return p->error;
}

/* A construct of a stream filter that only the kernel reads: an error, unless the text is read
 * for the kernel too (filter_canonicalize_stream()), which notes the first one and reads on. */
_printf_(3, 4) static int parser_kernel_only(Parser *p, size_t pos, const char *format, ...) {
        char **message = p->kernel_too ? &p->stream_message : &p->message;
        int *error = p->kernel_too ? &p->stream_error : &p->error;
        va_list ap;

        if (*error == 0) {
                va_start(ap, format);
                *error = message_format(message, pos, format, ap);
                va_end(ap);
        }
        if (p->kernel_too)
                return *error == -ENOMEM ? -ENOMEM : 0;
        return *error;
}

static bool is_ident_start(char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

static bool is_ident(char c) {
        return is_ident_start(c) || (c >= '0' && c <= '9');
}

static int hex_value(char c) {
        if (c >= '0' && c <= '9')
                return c - '0';
        if (c >= 'a' && c <= 'f')
                return c - 'a' + 10;
        if (c >= 'A' && c <= 'F')
                return c - 'A' + 10;
        return -1;
}

static int lex_number(Parser *p, Token *t) {
        const char *s = p->text + p->pos;
        unsigned base = 10;
        size_t i = 0, digits = 0;
        uint64_t v = 0;

        if (s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
                base = 16;
                i = 2;
        } else if (s[0] == '0' && is_ident(s[1]))
                return parser_fail(p, p->pos,
                                   "a number may not start with 0 (the kernel reads it as octal)");

        for (; is_ident(s[i]); i++, digits++) {
                int d = hex_value(s[i]);

                if (d < 0 || (unsigned) d >= base)
                        return parser_fail(p, p->pos + i, "invalid digit in a number");
                if (v > (UINT64_MAX - (unsigned) d) / base)
                        return parser_fail(p, p->pos, "number does not fit in 64 bits");
                v = v * base + (unsigned) d;
        }
        if (digits == 0)
                return parser_fail(p, p->pos, "hexadecimal number without digits");
        t->type = TOKEN_NUMBER;
        t->number = v;
        p->pos += i;
        return 0;
}

static int lex_string(Parser *p, Token *t) {
        char quote = p->text[p->pos];
        size_t start = p->pos + 1, i;

        for (i = start; i < p->length && p->text[i] != quote; i++) {
                unsigned char c = (unsigned char) p->text[i];

                if (c == '\\')
                        return parser_fail(p, i,
                                           "backslashes are not allowed in strings "
                                           "(the kernel has no escapes)");
                if (c == '"')
                        return parser_fail(p, i, "a string may not contain '\"'");
                /* tep_filter_add_filter_str() (1.7.1) takes any ',' for a separator of event names and
                 * then computes a negative length: an allocation of 2^64 - 1 bytes. */
                if (c == ',' && p->target == FILTER_STREAM) {
                        int r = parser_kernel_only(p, i,
                                                   "a stream filter's string may not contain ',' "
                                                   "(libtraceevent splits on it)");
                        if (r < 0)
                                return r;
                }
                if (c < 0x20 || c >= 0x7f)
                        return parser_fail(p, i, "byte 0x%02x in a string: only printable ASCII is allowed",
                                           c);
        }
        if (i >= p->length)
                return parser_fail(p, p->pos, "unterminated string");
        if (i - start > FILTER_STRING_MAX)
                return parser_fail(p, p->pos, "string longer than %u bytes", FILTER_STRING_MAX);
        t->type = TOKEN_STRING;
        t->str = p->text + start;
        t->len = i - start;
        p->pos = i + 1;
        return 0;
}

/* Reads the next token into p->tok. */
static int lex(Parser *p) {
        Token *t = &p->tok;
        const char *s;
        unsigned char c;

        while (p->pos < p->length && (p->text[p->pos] == ' ' || p->text[p->pos] == '\t'))
                p->pos++;
        *t = (Token){ .pos = p->pos };
        if (p->pos >= p->length) {
                t->type = TOKEN_END;
                return 0;
        }
        s = p->text + p->pos;
        c = (unsigned char) s[0];

        if (is_ident_start((char) c)) {
                size_t n = 0;
                while (is_ident(s[n]))
                        n++;
                t->type = TOKEN_FIELD;
                t->str = s;
                t->len = n;
                p->pos += n;
                return 0;
        }
        if (c >= '0' && c <= '9')
                return lex_number(p, t);
        if (c == '"' || c == '\'')
                return lex_string(p, t);

        switch (c) {
        case '&':
                t->type = s[1] == '&' ? TOKEN_AND : TOKEN_BAND;
                break;
        case '|':
                if (s[1] != '|')
                        return parser_fail(p, p->pos, "'|' is not an operator (did you mean '||'?)");
                t->type = TOKEN_OR;
                break;
        case '!':
                t->type = s[1] == '=' ? TOKEN_NE : TOKEN_NOT;
                break;
        case '=':
                if (s[1] != '=')
                        return parser_fail(p, p->pos, "'=' is not an operator (did you mean '=='?)");
                t->type = TOKEN_EQ;
                break;
        case '<':
                t->type = s[1] == '=' ? TOKEN_LE : TOKEN_LT;
                break;
        case '>':
                t->type = s[1] == '=' ? TOKEN_GE : TOKEN_GT;
                break;
        case '~':
                t->type = TOKEN_GLOB;
                break;
        case '(':
                t->type = TOKEN_LPAREN;
                break;
        case ')':
                t->type = TOKEN_RPAREN;
                break;
        case '-':
                if (s[1] < '0' || s[1] > '9')
                        return parser_fail(p, p->pos, "'-' is not an operator");
                p->pos++;
                if (lex_number(p, t) < 0)
                        return p->error;
                t->pos--;
                t->negative = true;
                return 0;
        default:
                if (c < 0x20 || c >= 0x7f)
                        return parser_fail(p, p->pos, "byte 0x%02x is not allowed in a filter", c);
                return parser_fail(p, p->pos, "unexpected character '%c'", c);
        }
        p->pos += strlen(token_text[t->type]);
        return 0;
}

static const struct tep_format_field *find_field(const struct tep_event *e, const char *name, size_t len) {
        const struct tep_format_field *lists[] = { e->format.common_fields, e->format.fields };

        for (size_t i = 0; i < ELEMENTSOF(lists); i++)
                for (const struct tep_format_field *f = lists[i]; f; f = f->next)
                        if (f->name && strlen(f->name) == len && memcmp(f->name, name, len) == 0)
                                return f;
        return NULL;
}

typedef enum FieldKind {
        FIELD_NUMERIC,
        FIELD_STRING,
        FIELD_OTHER,
} FieldKind;

/* What both the kernel and libtraceevent compare the same way: char strings (static or dynamic)
 * and plain scalars. u8 arrays are strings to libtraceevent but not to the kernel; "char *" is a
 * string to the kernel (6.x) but a number to libtraceevent. */
static FieldKind field_kind(const struct tep_format_field *f) {
        bool chars = f->type && strstr(f->type, "char");

        if (f->flags & (TEP_FIELD_IS_ARRAY | TEP_FIELD_IS_DYNAMIC))
                return chars && (f->flags & TEP_FIELD_IS_STRING) ? FIELD_STRING : FIELD_OTHER;
        if ((f->flags & TEP_FIELD_IS_POINTER) && chars)
                return FIELD_OTHER;
        if (f->size == 1 || f->size == 2 || f->size == 4 || f->size == 8)
                return FIELD_NUMERIC;
        return FIELD_OTHER;
}

static int parse_or(Parser *p, Node **ret);

static int parse_predicate(Parser *p, Node **ret) {
        Token name = p->tok, op, value;
        const struct tep_format_field *f;
        FieldKind kind;
        Node *n;
        int r;

        if (name.type != TOKEN_FIELD)
                return parser_fail(p, name.pos, "expected a field name, '(' or '!', found %s",
                                   token_text[name.type]);
        f = find_field(p->event, name.str, name.len);
        if (!f)
                return parser_fail(p, name.pos, "'%.*s' is not a field of %s:%s", (int) MIN(name.len, 64U),
                                   name.str, strempty(p->event->system), strempty(p->event->name));
        kind = field_kind(f);
        if (kind == FIELD_OTHER)
                return parser_fail(p, name.pos, "field '%s' (%s) cannot be filtered on", f->name,
                                   strempty(f->type));
        if (++p->n_predicates > FILTER_PREDICATES_MAX)
                return parser_fail(p, name.pos, "more than %u comparisons", FILTER_PREDICATES_MAX);

        r = lex(p);
        if (r < 0)
                return r;
        op = p->tok;
        switch (op.type) {
        case TOKEN_EQ:
        case TOKEN_NE:
                break;
        case TOKEN_LT:
        case TOKEN_LE:
        case TOKEN_GT:
        case TOKEN_GE:
        case TOKEN_BAND:
                if (kind == FIELD_STRING)
                        return parser_fail(p, op.pos, "'%s' is a string field: compare it with ==, != or ~",
                                           f->name);
                if (op.type == TOKEN_BAND && p->target == FILTER_STREAM &&
                    (r = parser_kernel_only(p, op.pos, "'&' is only supported in kernel filters (enable)")) <
                            0)
                        return r;
                break;
        case TOKEN_GLOB:
                if (kind == FIELD_NUMERIC)
                        return parser_fail(p, op.pos, "'%s' is a numeric field: '~' compares strings",
                                           f->name);
                if (p->target == FILTER_STREAM &&
                    (r = parser_kernel_only(p, op.pos, "'~' is only supported in kernel filters (enable)")) <
                            0)
                        return r;
                break;
        default:
                return parser_fail(p, op.pos, "expected a comparison operator after '%s', found %s", f->name,
                                   token_text[op.type]);
        }

        r = lex(p);
        if (r < 0)
                return r;
        value = p->tok;
        if (kind == FIELD_STRING && value.type != TOKEN_STRING)
                return parser_fail(p, value.pos,
                                   "'%s' is a string field: expected a quoted string, found %s", f->name,
                                   token_text[value.type]);
        if (kind == FIELD_NUMERIC && value.type != TOKEN_NUMBER)
                return parser_fail(p, value.pos, "'%s' is a numeric field: expected a number, found %s",
                                   f->name, token_text[value.type]);
        /* The kernel reads the value of a signed field with kstrtoll(), of an unsigned one with
         * kstrtoull(); libtraceevent reads no sign at all. */
        if (value.type == TOKEN_NUMBER && value.negative) {
                if (p->target == FILTER_STREAM &&
                    (r = parser_kernel_only(p, value.pos,
                                            "negative numbers are only supported in kernel filters "
                                            "(enable)")) < 0)
                        return r;
                if (!(f->flags & TEP_FIELD_IS_SIGNED))
                        return parser_fail(p, value.pos,
                                           "'%s' is unsigned: it cannot be compared with a "
                                           "negative number",
                                           f->name);
                if (value.number > (uint64_t) INT64_MAX + 1)
                        return parser_fail(p, value.pos,
                                           "-%" PRIu64 " is out of range for the signed field '%s'",
                                           value.number, f->name);
        } else if (kind == FIELD_NUMERIC && (f->flags & TEP_FIELD_IS_SIGNED) && value.number > INT64_MAX)
                return parser_fail(p, value.pos, "%" PRIu64 " is out of range for the signed field '%s'",
                                   value.number, f->name);

        n = calloc(1, sizeof(Node));
        if (!n)
                return -ENOMEM;
        *n = (Node){ .kind = NODE_PREDICATE, .field = f, .op = op.type, .value = value };
        *ret = n;
        return lex(p);
}

/* Depth counts "!" and "(", with "! (" as one level: the kernel's canonical form writes every "!" so. */
static int parse_unary(Parser *p, bool after_not, Node **ret) {
        Token t = p->tok;
        _cleanup_(node_freep) Node *inner = NULL;
        bool counted = !(after_not && t.type == TOKEN_LPAREN);
        int r;

        if (t.type != TOKEN_NOT && t.type != TOKEN_LPAREN)
                return parse_predicate(p, ret);

        if (counted && ++p->depth > FILTER_DEPTH_MAX)
                return parser_fail(p, t.pos, "nested deeper than %u levels", FILTER_DEPTH_MAX);
        r = lex(p);
        if (r < 0)
                return r;
        if (t.type == TOKEN_NOT) {
                Node *n;

                r = parse_unary(p, true, &inner);
                if (r < 0)
                        return r;
                n = calloc(1, sizeof(Node));
                if (!n)
                        return -ENOMEM;
                *n = (Node){ .kind = NODE_NOT, .left = TAKE_PTR(inner) };
                *ret = n;
        } else {
                r = parse_or(p, &inner);
                if (r < 0)
                        return r;
                if (p->tok.type != TOKEN_RPAREN)
                        return parser_fail(p, p->tok.pos,
                                           "expected ')' to close the '(' at column %zu, found %s",
                                           t.pos + 1, token_text[p->tok.type]);
                r = lex(p);
                if (r < 0)
                        return r;
                *ret = TAKE_PTR(inner);
        }
        if (counted)
                p->depth--;
        return 0;
}

static int parse_binary(Parser *p, TokenType op, Node **ret) {
        _cleanup_(node_freep) Node *left = NULL;
        int r;

        r = op == TOKEN_OR ? parse_binary(p, TOKEN_AND, &left) : parse_unary(p, false, &left);
        if (r < 0)
                return r;
        while (p->tok.type == op) {
                _cleanup_(node_freep) Node *right = NULL;
                Node *n;

                r = lex(p);
                if (r < 0)
                        return r;
                r = op == TOKEN_OR ? parse_binary(p, TOKEN_AND, &right) : parse_unary(p, false, &right);
                if (r < 0)
                        return r;
                n = calloc(1, sizeof(Node));
                if (!n)
                        return -ENOMEM;
                *n = (Node){ .kind = op == TOKEN_OR ? NODE_OR : NODE_AND,
                             .left = TAKE_PTR(left),
                             .right = TAKE_PTR(right) };
                left = n;
        }
        *ret = TAKE_PTR(left);
        return 0;
}

static int parse_or(Parser *p, Node **ret) {
        return parse_binary(p, TOKEN_OR, ret);
}

static TokenType negate_op(TokenType op) {
        switch (op) {
        case TOKEN_EQ:
                return TOKEN_NE;
        case TOKEN_NE:
                return TOKEN_EQ;
        case TOKEN_LT:
                return TOKEN_GE;
        case TOKEN_GE:
                return TOKEN_LT;
        case TOKEN_GT:
                return TOKEN_LE;
        case TOKEN_LE:
                return TOKEN_GT;
        default:
                abort(); /* "&" and "~" are refused for streams */
        }
}

/*
 * For libtraceevent, "!" is pushed down to the comparisons (De Morgan): its parser leaks the "("
 * token of every "! ( ... )" (1.7.1, process_filter()), which a client could repeat at will.
 */
static void push_not_down(Node **np, bool negate) {
        Node *n = *np;

        switch (n->kind) {
        case NODE_PREDICATE:
                if (negate)
                        n->op = negate_op(n->op);
                break;
        case NODE_AND:
        case NODE_OR:
                if (negate)
                        n->kind = n->kind == NODE_AND ? NODE_OR : NODE_AND;
                push_not_down(&n->left, negate);
                push_not_down(&n->right, negate);
                break;
        case NODE_NOT:
                *np = TAKE_PTR(n->left);
                free(n);
                push_not_down(np, !negate);
                break;
        }
}

static void buffer_add(Buffer *b, const char *s, size_t n) {
        if (b->oom)
                return;
        if (b->len + n + 1 > b->size) {
                size_t size = MAX(b->size * 2, b->len + n + 1);
                char *d = realloc(b->data, size);
                if (!d) {
                        b->oom = true;
                        return;
                }
                b->data = d;
                b->size = size;
        }
        memcpy(b->data + b->len, s, n);
        b->len += n;
        b->data[b->len] = 0;
}

static void buffer_puts(Buffer *b, const char *s) {
        buffer_add(b, s, strlen(s));
}

static void emit(Buffer *b, const Node *n);

static void emit_operand(Buffer *b, const Node *n, bool wrap, bool after_not) {
        bool counted = wrap && !after_not;

        if (counted && ++b->depth > b->max_depth)
                b->max_depth = b->depth;
        if (wrap)
                buffer_puts(b, "( ");
        emit(b, n);
        if (wrap)
                buffer_puts(b, " )");
        if (counted)
                b->depth--;
}

/*
 * libtraceevent reads "a || b && c" as "(a || b) && c": a boolean operand on the right, or one of
 * the other operator on the left, is put in parentheses. "a && b && c" stays as it is, left to right
 * in both readers.
 */
static void emit(Buffer *b, const Node *n) {
        char num[24];

        switch (n->kind) {
        case NODE_PREDICATE:
                buffer_puts(b, n->field->name);
                buffer_puts(b, " ");
                buffer_puts(b, token_text[n->op]);
                buffer_puts(b, " ");
                if (n->value.type == TOKEN_NUMBER) {
                        snprintf(num, sizeof(num), "%s%" PRIu64,
                                 n->value.negative && n->value.number > 0 ? "-" : "", n->value.number);
                        buffer_puts(b, num);
                } else {
                        buffer_puts(b, "\"");
                        buffer_add(b, n->value.str, n->value.len);
                        buffer_puts(b, "\"");
                }
                break;
        case NODE_NOT:
                /* libtraceevent's "!" takes one comparison or one parenthesised group. */
                if (++b->depth > b->max_depth)
                        b->max_depth = b->depth;
                buffer_puts(b, "! ");
                emit_operand(b, n->left, true, true);
                b->depth--;
                break;
        case NODE_AND:
        case NODE_OR:
                emit_operand(b, n->left, n->left->kind == (n->kind == NODE_AND ? NODE_OR : NODE_AND), false);
                buffer_puts(b, n->kind == NODE_AND ? " && " : " || ");
                emit_operand(b, n->right, n->right->kind == NODE_AND || n->right->kind == NODE_OR, false);
                break;
        }
}

static int parse(Parser *p, Node **ret_root) {
        int r;

        p->length = strnlen(p->text, TPD_FILTER_MAX + 1);
        if (p->length > TPD_FILTER_MAX)
                return parser_fail(p, TPD_FILTER_MAX, "longer than %u bytes", TPD_FILTER_MAX);
        r = lex(p);
        if (r >= 0 && p->tok.type == TOKEN_END)
                r = parser_fail(p, 0, "empty filter");
        if (r >= 0)
                r = parse_or(p, ret_root);
        if (r >= 0 && p->tok.type != TOKEN_END)
                r = parser_fail(p, p->tok.pos, "unexpected %s after a complete expression",
                                p->tok.type == TOKEN_RPAREN ? "')'" : token_text[p->tok.type]);
        return r;
}

/* Writes root's canonical text for target (NULL ret: only checks it). */
static int canonical_text(Parser *p, Node **root, FilterTarget target, char **ret) {
        Buffer b = {};
        int r = 0;

        if (target == FILTER_STREAM)
                push_not_down(root, false);
        emit(&b, *root);
        if (b.oom)
                r = -ENOMEM;
        /* The kernel takes less than a page, and canonical text can be longer than the input. */
        /* Parentheses added for precedence can nest deeper than the input did. */
        else if (b.max_depth > FILTER_DEPTH_MAX)
                r = parser_fail(p, 0, "nested deeper than %u levels once normalised", FILTER_DEPTH_MAX);
        else if (b.len >= TPD_FILTER_MAX)
                r = parser_fail(p, 0, "%zu bytes once normalised, the limit is %u", b.len,
                                TPD_FILTER_MAX - 1);
        if (r >= 0 && ret)
                *ret = TAKE_PTR(b.data);
        free(b.data);
        return r;
}

int filter_canonicalize(const struct tep_event *event, const char *text, FilterTarget target,
                        char **ret_canonical, char **ret_message) {
        Parser p = { .event = event, .text = text, .target = target };
        _cleanup_(node_freep) Node *root = NULL;
        int r;

        r = parse(&p, &root);
        if (r >= 0)
                r = canonical_text(&p, &root, target, ret_canonical);
        if (r < 0 && ret_message)
                *ret_message = TAKE_PTR(p.message);
        free(p.message);
        return r;
}

int filter_canonicalize_stream(const struct tep_event *event, const char *text, char **ret_canonical,
                               char **ret_message) {
        Parser p = { .event = event, .text = text, .target = FILTER_STREAM, .kernel_too = true };
        _cleanup_(node_freep) Node *root = NULL;
        int r;

        r = parse(&p, &root);
        if (r >= 0)
                r = canonical_text(&p, &root, FILTER_KERNEL, NULL);
        if (r >= 0 && p.stream_error == 0) {
                r = canonical_text(&p, &root, FILTER_STREAM, ret_canonical);
                if (r == -EINVAL) {
                        /* Within the kernel's limits, beyond libtraceevent's. */
                        p.stream_error = r;
                        p.stream_message = TAKE_PTR(p.message);
                        r = 0;
                }
        }
        if (r >= 0 && p.stream_error < 0) {
                r = p.stream_error == -EINVAL ? -EOPNOTSUPP : p.stream_error;
                free(p.message);
                p.message = TAKE_PTR(p.stream_message);
        }
        if (r < 0 && ret_message)
                *ret_message = TAKE_PTR(p.message);
        free(p.message);
        free(p.stream_message);
        return r;
}
