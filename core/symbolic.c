/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Readable values ("sym", docs/design.md §3). For each argument of an event's print format that renders
 * one field through __print_flags or __print_symbolic (possibly inside a ternary: sched_switch's
 * prev_state is `(prev_state & MASK) ? __print_flags(prev_state & MASK, "|", ...) : "R"` followed
 * by `prev_state & PREEMPT ? "+" : ""`), the argument tree is compiled once into SymNodes
 * (core/symbolic-expr.c): the constant parts folded, the flag and symbol tables turned into arrays of
 * numbers. A record then costs a few loads, operations and table scans per such field, not libtraceevent's
 * printing of the whole line (which also parses each table value from text on every record). The text is
 * what the kernel prints: flags in table order joined by the delimiter, leftover bits as 0x…, an unknown
 * symbol as 0x…. A field's text is the concatenation of the text arguments that read only that field ("R"
 * and "+" make "R+"). An argument with anything else (a function, an array index, a name libtraceevent
 * itself cannot evaluate) gives its field no readable form.
 */

#include <ctype.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <traceevent/event-parse.h>

#include "core/encode.h"
#include "core/symbolic-expr.h"
#include "core/symbolic.h"
#include "util.h"

#define SYM_TEXT_MAX 512U

/* The build target's system call names by number (syscall-names.py makes syscall-names.c from
 * <sys/syscall.h>); NULL for unused numbers. */
extern const char *const syscall_names[];
extern const size_t syscall_names_count;
#define SYM_ARGS_MAX 16U

#define SYM_CACHE_SLOTS 16U
#define SYM_CACHE_TEXT 62U

typedef struct SymCacheSlot {
        uint64_t value;
        uint8_t valid;
        uint8_t len;
        char text[SYM_CACHE_TEXT]; /* `"name":"text"` */
} SymCacheSlot;

typedef enum SymFieldKind {
        SYMF_PRINT,   /* through the print format's arguments */
        SYMF_SYSCALL, /* a system call number of raw_syscalls */
        SYMF_ERRNO,   /* a system call's return: a negative one is an errno */
} SymFieldKind;

struct SymField {
        uint8_t kind;
        uint8_t size;
        uint16_t offset; /* of the field (SYMF_SYSCALL, SYMF_ERRNO) */
        size_t end;      /* of the fields the arguments read, conditions' included */
        unsigned index;  /* of the field in the format: the order of "sym" */
        char *key;       /* `"name":` */
        size_t key_len;
        const struct tep_format_field *field;
        SymNode *args[SYM_ARGS_MAX];
        unsigned n_args;
        bool has_table;    /* an argument goes through __print_flags or __print_symbolic */
        unsigned last_arg; /* index of the last print argument taken */
        /* The longest text the arguments can make, and whether all of their text is printable
         * ASCII that JSON takes as it is: then it is written straight into the line. */
        size_t max_len;
        bool plain;
        /* The text depends on the field's value alone (no condition reads another field): the
         * last texts made are kept by value, so a value seen before costs a look-up and a copy. */
        bool multi;
        SymCacheSlot *cache;
};

static void sym_fields_free(SymField *f, size_t n) {
        for (size_t i = 0; i < n; i++) {
                free(f[i].key);
                free(f[i].cache);
                for (unsigned k = 0; k < f[i].n_args && k < SYM_ARGS_MAX; k++)
                        sym_node_free(f[i].args[k]);
        }
        free(f);
}

static unsigned sym_field_index(const struct tep_event *event, const struct tep_format_field *field) {
        unsigned i = 0;

        for (const struct tep_format_field *f = event->format.fields; f; f = f->next, i++)
                if (f == field)
                        return i;
        return UINT_MAX;
}

static SymField *sym_field_get(SymField *fields, size_t *n, const struct tep_event *event,
                               const struct tep_format_field *field) {
        for (size_t i = 0; i < *n; i++)
                if (fields[i].field == field)
                        return &fields[i];
        fields[*n] = (SymField){ .field = field, .index = sym_field_index(event, field) };
        return &fields[(*n)++];
}

static int sym_field_cmp(const void *a, const void *b) {
        const SymField *x = a, *y = b;

        return x->index < y->index ? -1 : x->index > y->index;
}

/* Where each conversion of a print format is, by the argument it takes: the text between two
 * conversions is what the kernel writes between their arguments. */
typedef struct SymSpan {
        size_t start;
        size_t end;
} SymSpan;

static bool sym_format_spans(const char *fmt, SymSpan *spans, size_t n) {
        size_t k = 0;

        for (const char *p = fmt; p && *p; p++) {
                const char *start = p;

                if (*p != '%')
                        continue;
                if (p[1] == '%') {
                        p++;
                        continue;
                }
                p++;
                p += strspn(p, "-+ #0");
                for (int part = 0; part < 2; part++) {
                        /* A '*' width or precision takes an argument of its own. */
                        if (*p == '*') {
                                if (k >= n)
                                        return false;
                                spans[k++] = (SymSpan){ (size_t) (start - fmt), (size_t) (start - fmt) };
                                p++;
                        } else
                                p += strspn(p, "0123456789");
                        if (part == 0 && *p == '.')
                                p++;
                        else
                                break;
                }
                p += strspn(p, "hlLqjzt");
                if (!*p || k >= n)
                        return false;
                if (*p == 'p') /* %pS, %pI4, ...: the kernel's extensions */
                        while (isalnum((unsigned char) p[1]))
                                p++;
                spans[k++] = (SymSpan){ (size_t) (start - fmt), (size_t) (p + 1 - fmt) };
        }
        return k == n;
}

/* System call numbers and errnos: not in the print format, but what strace shows. */
static void sym_fields_syscall(const struct tep_event *event, SymField *fields, size_t *n) {
        bool raw_syscalls = streq(event->system, "raw_syscalls");
        bool sys_exit = (raw_syscalls && streq(event->name, "sys_exit")) ||
                        (streq(event->system, "syscalls") && strncmp(event->name, "sys_exit_", 9) == 0);

        for (const struct tep_format_field *f = event->format.fields; f; f = f->next) {
                SymFieldKind kind;

                if (raw_syscalls && streq(f->name, "id"))
                        kind = SYMF_SYSCALL;
                else if (sys_exit && streq(f->name, "ret"))
                        kind = SYMF_ERRNO;
                else
                        continue;
                if (f->flags & (TEP_FIELD_IS_ARRAY | TEP_FIELD_IS_DYNAMIC) ||
                    !(f->size == 1 || f->size == 2 || f->size == 4 || f->size == 8))
                        continue;
                fields[*n] = (SymField){ .kind = kind,
                                         .field = f,
                                         .index = sym_field_index(event, f),
                                         .offset = (uint16_t) f->offset,
                                         .size = (uint8_t) f->size };
                (*n)++;
        }
}

/* What the print format writes between its arguments k - 1 and k, as a text node: NULL for
 * nothing. */
static int sym_literal(const char *fmt, const SymSpan *spans, unsigned k, SymNode **ret) {
        _cleanup_(sym_node_freep) SymNode *n = NULL;
        size_t len = spans[k].start - spans[k - 1].end;

        *ret = NULL;
        if (len == 0)
                return 0;
        n = sym_node_new(SYM_TEXT);
        if (!n || !(n->owned = strndup(fmt + spans[k - 1].end, len)))
                return -ENOMEM;
        n->text = n->owned;
        n->text_len = len;
        *ret = TAKE_PTR(n);
        return 0;
}

/* Compiles print argument k, a text one, into the arguments of the field it renders. spans is
 * NULL when the format's conversions could not be matched with its arguments. */
static int sym_fields_add_arg(struct tep_event *event, const struct tep_print_arg *a, unsigned k,
                              const SymSpan *spans, SymField *fields, size_t *n) {
        _cleanup_(sym_node_freep) SymNode *node = NULL, *literal = NULL;
        SymCompile sc = { .event = event };
        const struct tep_format_field *field;
        SymField *sf;
        int r;

        r = sym_compile_text(&sc, a, &node);
        if (r == -ENOMEM)
                return r;
        field = sc.field ?: sc.cond_many ? NULL : sc.cond_field;
        /* Text of no field, or of a common one: nothing to add to "fields". */
        if (!field || sym_field_index(event, field) == UINT_MAX)
                return 0;
        sf = sym_field_get(fields, n, event, field);
        if (sf->kind != SYMF_PRINT || sf->n_args == UINT_MAX)
                return 0;
        /* One text is one run of conversions next to each other, with what the format
         * writes between them ("(%s|%s)"); a later one of the same field is left out. */
        if (sf->n_args > 0 && sf->last_arg + 1 != k)
                return 0;
        if (sf->n_args > 0 && spans && r >= 0 &&
            sym_literal(event->print_fmt.format, spans, k, &literal) < 0)
                return -ENOMEM;
        /* An argument we cannot evaluate leaves the field without a readable form: a part
         * of its text would be wrong. */
        if (r < 0 || sf->n_args + 2 > SYM_ARGS_MAX) {
                sf->n_args = UINT_MAX;
                return 0;
        }
        if (literal)
                sf->args[sf->n_args++] = TAKE_PTR(literal);
        sf->args[sf->n_args++] = TAKE_PTR(node);
        sf->last_arg = k;
        sf->multi = sf->multi || sc.cond_many || (sc.cond_field && sc.cond_field != field);
        sf->has_table = sf->has_table || sc.has_table;
        sf->end = MAX(sf->end, sc.end);
        return 0;
}

/* The fields that the print format's text arguments render, n_args of them. */
static int sym_fields_print(struct tep_event *event, size_t n_args, SymField *fields, size_t *n) {
        _cleanup_free_ SymSpan *spans = NULL;
        bool spans_ok;
        unsigned k = 0;
        int r;

        spans = calloc(MAX(n_args, (size_t) 1), sizeof(SymSpan));
        if (!spans)
                return -ENOMEM;
        spans_ok = sym_format_spans(event->print_fmt.format, spans, n_args);

        for (const struct tep_print_arg *a = event->print_fmt.args; a; a = a->next, k++) {
                if (!sym_arg_is_text(a))
                        continue;
                r = sym_fields_add_arg(event, a, k, spans_ok ? spans : NULL, fields, n);
                if (r < 0)
                        return r;
        }
        return 0;
}

/* Readies a field with a table, or of a system call, for records: its key, its cache and the
 * longest text it makes. Any other field is emptied, and keeps no key. */
static int sym_field_finish(SymField *sf) {
        bool keep = sf->kind != SYMF_PRINT || (sf->n_args != UINT_MAX && sf->has_table);
        JsonBuf key = {};

        if (sf->n_args == UINT_MAX)
                sf->n_args = 0;
        if (!keep) {
                for (unsigned j = 0; j < sf->n_args; j++)
                        sym_node_free(sf->args[j]);
                sf->n_args = 0;
                return 0;
        }
        if (json_append_string(&key, sf->field->name, strlen(sf->field->name)) < 0 ||
            jsonbuf_reserve(&key, 1) < 0) {
                jsonbuf_done(&key);
                return -ENOMEM;
        }
        jsonbuf_putc(&key, ':');
        sf->key = key.data;
        sf->key_len = key.len;
        if (!sf->multi) {
                sf->cache = calloc(SYM_CACHE_SLOTS, sizeof(SymCacheSlot));
                if (!sf->cache)
                        return -ENOMEM;
        }
        /* System call and errno names are C identifiers. */
        sf->plain = true;
        sf->max_len = 64;
        if (sf->kind == SYMF_PRINT) {
                sf->max_len = 0;
                for (unsigned j = 0; j < sf->n_args; j++)
                        sf->max_len += sym_node_max_len(sf->args[j], &sf->plain);
                if (sf->max_len > SYM_TEXT_MAX)
                        sf->plain = false;
        }
        return 0;
}

int symbolic_compile(SymbolicProgram *s, struct tep_event *event) {
        SymField *fields;
        size_t n = 0, n_args = 0, k = 0;
        int r;

        for (struct tep_print_arg *a = event->print_fmt.args; a; a = a->next)
                n_args++;
        /* A field per print argument at most, and the two of system calls. */
        fields = calloc(n_args + 2, sizeof(SymField));
        if (!fields)
                return -ENOMEM;

        sym_fields_syscall(event, fields, &n);
        r = sym_fields_print(event, n_args, fields, &n);
        for (size_t i = 0; r >= 0 && i < n; i++)
                r = sym_field_finish(&fields[i]);
        if (r < 0) {
                sym_fields_free(fields, n);
                return r;
        }

        /* Keep the fields with a key, in the format's order. */
        for (size_t i = 0; i < n; i++)
                if (fields[i].key)
                        fields[k++] = fields[i];
        n = k;
        qsort(fields, n, sizeof(SymField), sym_field_cmp);

        *s = (SymbolicProgram){ .fields = fields, .n_fields = (uint16_t) n, .compiled = true, .max = 16 };
        for (size_t i = 0; i < n; i++) {
                s->max += fields[i].key_len + 1 +
                          (fields[i].plain ? fields[i].max_len + 2 : JSON_STRING_MAX_LEN(SYM_TEXT_MAX));
                s->end = MAX(s->end, MAX(fields[i].end,
                                         (size_t) fields[i].field->offset + (size_t) fields[i].field->size));
        }
        return 0;
}

void symbolic_done(SymbolicProgram *s) {
        sym_fields_free(s->fields, s->n_fields);
        *s = (SymbolicProgram){};
}

/* Where a field's text goes: straight into the line when it is plain (room for max_len made),
 * else into a buffer of SYM_TEXT_MAX bytes, cut there, and escaped afterwards. */
typedef struct SymText {
        char *buf;
        size_t len;
        size_t cap;
} SymText;

static inline void sym_text_putn(SymText *t, const char *s, size_t n) {
        n = MIN(n, t->cap - t->len);
        memcpy(t->buf + t->len, s, n);
        t->len += n;
}

static void sym_text_hex(SymText *t, uint64_t v) {
        char hex[24];

        sym_text_putn(t, hex, (size_t) snprintf(hex, sizeof(hex), "0x%" PRIx64, v));
}

/* sym_eval(), with the common case inline: a (masked) field. */
static inline uint64_t sym_value(const SymNode *n, const uint8_t *data) {
        if (n->kind == SYM_FIELD)
                return load_unsigned(data + n->offset, n->size) & n->value;
        return sym_eval(n, data);
}

static void sym_text(const SymNode *n, const uint8_t *data, SymText *t) {
        uint64_t v;
        bool first = true;

        switch (n->kind) {
        case SYM_TEXT:
                sym_text_putn(t, n->text, n->text_len);
                return;
        case SYM_COND:
                sym_text(sym_value(n->a, data) ? n->b : n->c, data, t);
                return;
        case SYM_FLAGS:
                /* The kernel's trace_print_flags_seq(): table order, until no bit is left. */
                v = sym_value(n->a, data);
                for (size_t i = 0; i < n->n_entries && v; i++) {
                        uint64_t m = n->entries[i].value;

                        if ((v & m) != m)
                                continue;
                        if (!first && n->text_len > 0)
                                sym_text_putn(t, n->text, n->text_len);
                        sym_text_putn(t, n->entries[i].name, n->entries[i].len);
                        first = false;
                        v &= ~m;
                }
                if (v) {
                        if (!first && n->text_len > 0)
                                sym_text_putn(t, n->text, n->text_len);
                        sym_text_hex(t, v);
                }
                return;
        case SYM_SYMBOL:
                /* The kernel's trace_print_symbols_seq(): the first equal value, else the number. */
                v = sym_value(n->a, data);
                for (size_t i = 0; i < n->n_entries; i++)
                        if (n->entries[i].value == v) {
                                sym_text_putn(t, n->entries[i].name, n->entries[i].len);
                                return;
                        }
                sym_text_hex(t, v);
                return;
        default:
                return;
        }
}

void symbolic_put(SymbolicProgram *s, JsonBuf *b, const uint8_t *data, size_t size) {
        char buf[SYM_TEXT_MAX];
        bool first = true;

        jsonbuf_put(b, ",\"sym\":{", 8);
        for (size_t i = 0; size >= s->end && i < s->n_fields; i++) {
                SymField *sf = &s->fields[i];
                SymCacheSlot *slot = NULL;
                size_t start = b->len, from;
                const char *name = NULL;
                uint64_t value = 0;
                SymText t;
                int64_t v;

                if (sf->cache) {
                        value = load_unsigned(data + sf->field->offset, (unsigned) sf->field->size);
                        slot = &sf->cache[(value ^ (value >> 8)) % SYM_CACHE_SLOTS];
                        if (slot->valid && slot->value == value) {
                                if (slot->len > 0) {
                                        if (!first)
                                                jsonbuf_putc(b, ',');
                                        jsonbuf_put(b, slot->text, slot->len);
                                        first = false;
                                }
                                continue;
                        }
                }

                if (!first)
                        jsonbuf_putc(b, ',');
                from = b->len;
                jsonbuf_put(b, sf->key, sf->key_len);
                if (sf->plain) {
                        jsonbuf_putc(b, '"');
                        t = (SymText){ b->data + b->len, 0, sf->max_len };
                } else
                        t = (SymText){ buf, 0, sizeof(buf) };

                switch (sf->kind) {
                case SYMF_PRINT:
                        for (unsigned k = 0; k < sf->n_args; k++)
                                sym_text(sf->args[k], data, &t);
                        break;
                case SYMF_SYSCALL:
                        v = load_signed(data + sf->offset, sf->size);
                        if (v >= 0 && (uint64_t) v < syscall_names_count)
                                name = syscall_names[v];
                        break;
                case SYMF_ERRNO:
                        /* The kernel returns -errno, from -1 to -MAX_ERRNO (4095). */
                        v = load_signed(data + sf->offset, sf->size);
                        if (v < 0 && v >= -4095)
                                name = strerrorname_np((int) -v);
                        break;
                }
                if (sf->kind != SYMF_PRINT && !name) {
                        /* No name: no key either. */
                        b->len = start;
                        from = start;
                } else {
                        if (sf->kind != SYMF_PRINT)
                                sym_text_putn(&t, name, strlen(name));
                        if (sf->plain) {
                                b->len += t.len;
                                jsonbuf_putc(b, '"');
                        } else
                                json_put_string(b, t.buf, t.len);
                        first = false;
                }
                if (slot && b->len - from <= SYM_CACHE_TEXT) {
                        memcpy(slot->text, b->data + from, b->len - from);
                        slot->len = (uint8_t) (b->len - from);
                        slot->value = value;
                        slot->valid = 1;
                }
        }
        jsonbuf_putc(b, '}');
}
