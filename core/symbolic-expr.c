/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* One print argument of an event's format, compiled for "sym" (core/symbolic.c): the tree of
 * SymNodes it becomes, with its constants folded and its tables as arrays of numbers, and the
 * value of a node for a record. */
#include <ctype.h>
#include <string.h>

#include <traceevent/event-parse.h>

#include "core/symbolic-expr.h"
#include "util.h"

SymNode *sym_node_free(SymNode *n) {
        if (!n)
                return NULL;
        sym_node_free(n->a);
        sym_node_free(n->b);
        sym_node_free(n->c);
        free(n->entries);
        free(n->owned);
        free(n);
        return NULL;
}

/* A number as the kernel writes it into a format: 0x1f, 12, -1, 1UL. */
static bool sym_parse_number(const char *s, uint64_t *ret) {
        char *end;

        if (!s || !(isdigit((unsigned char) s[0]) || (s[0] == '-' && isdigit((unsigned char) s[1]))))
                return false;
        errno = 0;
        *ret = strtoull(s, &end, 0);
        if (errno != 0)
                return false;
        end += strspn(end, "uUlL");
        return *end == '\0';
}

uint64_t sym_eval(const SymNode *n, const uint8_t *data) {
        uint64_t a, b;

        switch (n->kind) {
        case SYM_NUM:
                return n->value;
        case SYM_FIELD:
                return load_unsigned(data + n->offset, n->size) & n->value;
        case SYM_CAST:
                return sym_eval(n->a, data) & n->value;
        case SYM_COND:
                return sym_eval(n->a, data) ? sym_eval(n->b, data) : sym_eval(n->c, data);
        case SYM_UNARY:
                a = sym_eval(n->a, data);
                switch (n->op[0]) {
                case '!':
                        return !a;
                case '~':
                        return ~a;
                case '-':
                        return -a;
                default:
                        return a;
                }
        case SYM_BINARY:
                break;
        default:
                return 0;
        }

        a = sym_eval(n->a, data);
        b = sym_eval(n->b, data);
        /* The operators of libtraceevent's eval_num_arg(), on unsigned 64-bit values as there. */
        switch (n->op[0]) {
        case '|':
                return n->op[1] ? a || b : a | b;
        case '&':
                return n->op[1] ? a && b : a & b;
        case '^':
                return a ^ b;
        case '+':
                return a + b;
        case '-':
                return a - b;
        case '*':
                return a * b;
        case '/':
                return b ? a / b : 0;
        case '%':
                return b ? a % b : 0;
        case '=':
                return a == b;
        case '!':
                return a != b;
        case '<':
                return n->op[1] == '<' ? (b < 64 ? a << b : 0) : n->op[1] == '=' ? a <= b : a < b;
        case '>':
                return n->op[1] == '>' ? (b < 64 ? a >> b : 0) : n->op[1] == '=' ? a >= b : a > b;
        default:
                return 0;
        }
}

/* The mask of a cast to type, as libtraceevent's eval_type_str() applies it. */
static uint64_t sym_cast_mask(const char *type) {
        static const struct {
                const char *name;
                uint64_t mask;
        } casts[] = {
                { "u8", 0xff },        { "s8", 0xff },
                { "char", 0xff },      { "unsigned char", 0xff },
                { "u16", 0xffff },     { "s16", 0xffff },
                { "short", 0xffff },   { "unsigned short", 0xffff },
                { "u32", 0xffffffff }, { "s32", 0xffffffff },
                { "int", 0xffffffff }, { "unsigned int", 0xffffffff },
        };

        for (size_t i = 0; i < ELEMENTSOF(casts); i++)
                if (streq(type, casts[i].name))
                        return casts[i].mask;
        return UINT64_MAX;
}

static int sym_compile_num(SymCompile *sc, const struct tep_print_arg *arg, SymNode **ret);

/* A condition: its fields choose, they are not what is rendered. */
static int sym_compile_cond(SymCompile *sc, const struct tep_print_arg *arg, SymNode **ret) {
        bool was = sc->in_cond;
        int r;

        sc->in_cond = true;
        r = sym_compile_num(sc, arg, ret);
        sc->in_cond = was;
        return r;
}

SymNode *sym_node_new(SymKind kind) {
        SymNode *n = calloc(1, sizeof(SymNode));

        if (n)
                n->kind = kind;
        return n;
}

/* Folds a node of constants into a constant, and a field masked by a constant (a cast, or
 * `field & MASK` as in sched_switch's prev_state) into the field: one load and one AND a record. */
static void sym_fold(SymNode *n) {
        SymNode *field = NULL;
        uint64_t mask = 0;

        if (n->kind == SYM_CAST && n->a->kind == SYM_FIELD) {
                field = n->a;
                mask = n->value;
                n->a = NULL;
        } else if (n->kind == SYM_BINARY && streq(n->op, "&") && n->a->kind == SYM_FIELD &&
                   n->b->kind == SYM_NUM) {
                field = n->a;
                mask = n->b->value;
                n->a = NULL;
        } else if (n->kind == SYM_BINARY && streq(n->op, "&") && n->b->kind == SYM_FIELD &&
                   n->a->kind == SYM_NUM) {
                field = n->b;
                mask = n->a->value;
                n->b = NULL;
        }
        if (field) {
                sym_node_free(n->a);
                sym_node_free(n->b);
                *n = *field;
                n->value &= mask;
                free(field);
                return;
        }
        if ((n->a && n->a->kind != SYM_NUM) || (n->b && n->b->kind != SYM_NUM) ||
            (n->c && n->c->kind != SYM_NUM))
                return;
        n->value = sym_eval(n, NULL);
        n->kind = SYM_NUM;
        n->a = sym_node_free(n->a);
        n->b = sym_node_free(n->b);
        n->c = sym_node_free(n->c);
}

/* The names that older kernels leave in their tables and libtraceevent knows (its eval_flag()):
 * other names have no number in the format, and no readable form here either. */
static int sym_known_name(const char *name, uint64_t *ret) {
        static const char *const softirqs[] = { "HI_SOFTIRQ",      "TIMER_SOFTIRQ", "NET_TX_SOFTIRQ",
                                                "NET_RX_SOFTIRQ",  "BLOCK_SOFTIRQ", "IRQ_POLL_SOFTIRQ",
                                                "TASKLET_SOFTIRQ", "SCHED_SOFTIRQ", "HRTIMER_SOFTIRQ",
                                                "RCU_SOFTIRQ" };

        for (size_t i = 0; i < ELEMENTSOF(softirqs); i++)
                if (streq(name, softirqs[i])) {
                        *ret = i;
                        return 0;
                }
        if (streq(name, "HRTIMER_NORESTART") || streq(name, "HRTIMER_RESTART")) {
                *ret = streq(name, "HRTIMER_RESTART");
                return 0;
        }
        return -ENOENT;
}

static int sym_compile_table(const struct tep_print_flag_sym *list, SymNode *n) {
        size_t k = 0;

        for (const struct tep_print_flag_sym *f = list; f; f = f->next)
                k++;
        n->entries = calloc(MAX(k, (size_t) 1), sizeof(SymEntry));
        if (!n->entries)
                return -ENOMEM;
        for (const struct tep_print_flag_sym *f = list; f; f = f->next) {
                uint64_t v;

                /* The kernel's tables end in { 0, NULL }, which libtraceevent may keep. */
                if (!f->str || !f->value || streq(f->str, "((void *)0)"))
                        continue;
                if (!sym_parse_number(f->value, &v) && sym_known_name(f->value, &v) < 0)
                        return -EOPNOTSUPP;
                n->entries[n->n_entries++] = (SymEntry){ v, f->str, strlen(f->str) };
        }
        return 0;
}

static int sym_compile_num(SymCompile *sc, const struct tep_print_arg *arg, SymNode **ret) {
        _cleanup_(sym_node_freep) SymNode *n = NULL;
        const struct tep_format_field *f;
        int r;

        if (!arg)
                return -EOPNOTSUPP;
        switch (arg->type) {
        case TEP_PRINT_ATOM:
                if (!(n = sym_node_new(SYM_NUM)))
                        return -ENOMEM;
                if (!sym_parse_number(arg->atom.atom, &n->value))
                        return -EOPNOTSUPP;
                break;
        case TEP_PRINT_FIELD:
                f = arg->field.field ?: tep_find_any_field(sc->event, arg->field.name);
                if (!f || (!sc->in_cond && sc->field && sc->field != f) ||
                    f->flags & (TEP_FIELD_IS_ARRAY | TEP_FIELD_IS_DYNAMIC | TEP_FIELD_IS_STRING) ||
                    !(f->size == 1 || f->size == 2 || f->size == 4 || f->size == 8))
                        return -EOPNOTSUPP;
                if (!sc->in_cond)
                        sc->field = f;
                else if (sc->cond_field && sc->cond_field != f)
                        sc->cond_many = true;
                else
                        sc->cond_field = f;
                if (!(n = sym_node_new(SYM_FIELD)))
                        return -ENOMEM;
                n->offset = (uint16_t) f->offset;
                n->size = (uint8_t) f->size;
                n->value = UINT64_MAX;
                sc->end = MAX(sc->end, (size_t) f->offset + (size_t) f->size);
                break;
        case TEP_PRINT_TYPE:
                if (!(n = sym_node_new(SYM_CAST)))
                        return -ENOMEM;
                n->value = sym_cast_mask(arg->typecast.type);
                r = sym_compile_num(sc, arg->typecast.item, &n->a);
                if (r < 0)
                        return r;
                sym_fold(n);
                break;
        case TEP_PRINT_OP: {
                const char *op = arg->op.op;

                if (!op || strlen(op) > 2 || streq(op, "["))
                        return -EOPNOTSUPP;
                if (streq(op, "?")) {
                        const struct tep_print_arg *alt = arg->op.right;

                        if (!alt || alt->type != TEP_PRINT_OP || !alt->op.op || !streq(alt->op.op, ":"))
                                return -EOPNOTSUPP;
                        if (!(n = sym_node_new(SYM_COND)))
                                return -ENOMEM;
                        r = sym_compile_cond(sc, arg->op.left, &n->a);
                        if (r >= 0)
                                r = sym_compile_num(sc, alt->op.left, &n->b);
                        if (r >= 0)
                                r = sym_compile_num(sc, alt->op.right, &n->c);
                        if (r < 0)
                                return r;
                } else if (!arg->op.left || arg->op.left->type == TEP_PRINT_NULL) {
                        if (!(n = sym_node_new(SYM_UNARY)))
                                return -ENOMEM;
                        r = sym_compile_num(sc, arg->op.right, &n->a);
                        if (r < 0)
                                return r;
                } else {
                        if (!strchr("|&^+-*/%=!<>", op[0]) || (op[0] == '!' && op[1] != '=') ||
                            (op[0] == '=' && op[1] != '='))
                                return -EOPNOTSUPP;
                        if (!(n = sym_node_new(SYM_BINARY)))
                                return -ENOMEM;
                        r = sym_compile_num(sc, arg->op.left, &n->a);
                        if (r >= 0)
                                r = sym_compile_num(sc, arg->op.right, &n->b);
                        if (r < 0)
                                return r;
                }
                memcpy(n->op, op, strlen(op));
                sym_fold(n);
                break;
        }
        default:
                return -EOPNOTSUPP;
        }
        *ret = TAKE_PTR(n);
        return 0;
}

int sym_compile_text(SymCompile *sc, const struct tep_print_arg *arg, SymNode **ret) {
        _cleanup_(sym_node_freep) SymNode *n = NULL;
        int r;

        if (!arg)
                return -EOPNOTSUPP;
        switch (arg->type) {
        case TEP_PRINT_ATOM:
                if (!(n = sym_node_new(SYM_TEXT)))
                        return -ENOMEM;
                n->text = arg->atom.atom ?: "";
                n->text_len = strlen(n->text);
                break;
        case TEP_PRINT_FLAGS:
        case TEP_PRINT_SYMBOL:
                if (!(n = sym_node_new(arg->type == TEP_PRINT_FLAGS ? SYM_FLAGS : SYM_SYMBOL)))
                        return -ENOMEM;
                n->text = arg->type == TEP_PRINT_FLAGS ? arg->flags.delim : NULL;
                n->text_len = n->text ? strlen(n->text) : 0;
                r = sym_compile_num(sc, arg->type == TEP_PRINT_FLAGS ? arg->flags.field : arg->symbol.field,
                                    &n->a);
                if (r >= 0)
                        r = sym_compile_table(
                                arg->type == TEP_PRINT_FLAGS ? arg->flags.flags : arg->symbol.symbols, n);
                if (r < 0)
                        return r;
                sc->has_table = true;
                break;
        case TEP_PRINT_OP: {
                const struct tep_print_arg *alt = arg->op.right;

                if (!arg->op.op || !streq(arg->op.op, "?") || !alt || alt->type != TEP_PRINT_OP ||
                    !alt->op.op || !streq(alt->op.op, ":"))
                        return -EOPNOTSUPP;
                if (!(n = sym_node_new(SYM_COND)))
                        return -ENOMEM;
                r = sym_compile_cond(sc, arg->op.left, &n->a);
                if (r >= 0)
                        r = sym_compile_text(sc, alt->op.left, &n->b);
                if (r >= 0)
                        r = sym_compile_text(sc, alt->op.right, &n->c);
                if (r < 0)
                        return r;
                break;
        }
        default:
                return -EOPNOTSUPP;
        }
        *ret = TAKE_PTR(n);
        return 0;
}

bool sym_arg_is_text(const struct tep_print_arg *arg) {
        const struct tep_print_arg *alt;
        uint64_t v;

        if (!arg)
                return false;
        switch (arg->type) {
        case TEP_PRINT_FLAGS:
        case TEP_PRINT_SYMBOL:
                return true;
        case TEP_PRINT_ATOM:
                return !sym_parse_number(arg->atom.atom, &v);
        case TEP_PRINT_OP:
                alt = arg->op.right;
                if (!arg->op.op || !streq(arg->op.op, "?") || !alt || alt->type != TEP_PRINT_OP)
                        return false;
                return (sym_arg_is_text(alt->op.left) || sym_arg_is_text(alt->op.right)) &&
                       (sym_arg_is_text(alt->op.left) || alt->op.left->type == TEP_PRINT_ATOM) &&
                       (sym_arg_is_text(alt->op.right) || alt->op.right->type == TEP_PRINT_ATOM);
        default:
                return false;
        }
}

static bool sym_is_plain(const char *s, size_t n) {
        for (size_t i = 0; i < n; i++)
                if (s[i] < 0x20 || s[i] > 0x7e || s[i] == '"' || s[i] == '\\')
                        return false;
        return true;
}

/* "0x" and 16 digits for a number no name covers. */
size_t sym_node_max_len(const SymNode *n, bool *plain) {
        size_t max = 0, sum = 0;

        switch (n->kind) {
        case SYM_TEXT:
                *plain = *plain && sym_is_plain(n->text, n->text_len);
                return n->text_len;
        case SYM_COND:
                return MAX(sym_node_max_len(n->b, plain), sym_node_max_len(n->c, plain));
        case SYM_FLAGS:
                *plain = *plain && sym_is_plain(n->text ?: "", n->text_len);
                for (size_t i = 0; i < n->n_entries; i++) {
                        *plain = *plain && sym_is_plain(n->entries[i].name, n->entries[i].len);
                        sum += n->entries[i].len + n->text_len;
                }
                return sum + 18 + n->text_len;
        case SYM_SYMBOL:
                for (size_t i = 0; i < n->n_entries; i++) {
                        *plain = *plain && sym_is_plain(n->entries[i].name, n->entries[i].len);
                        max = MAX(max, n->entries[i].len);
                }
                return MAX(max, (size_t) 18);
        default:
                return 0;
        }
}
