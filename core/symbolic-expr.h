/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct tep_event;
struct tep_format_field;
struct tep_print_arg;

/*
 * The print arguments that core/symbolic.c turns into "sym" text: each compiled once into a tree
 * of SymNodes, which a record evaluates with a few loads and operations. Only for core/symbolic.c.
 */

typedef enum SymKind {
        SYM_NUM,    /* value */
        SYM_FIELD,  /* the unsigned integer at offset, of size bytes, as libtraceevent reads it, & value */
        SYM_CAST,   /* a & value */
        SYM_UNARY,  /* op a */
        SYM_BINARY, /* a op b */
        SYM_COND,   /* a ? b : c */
        SYM_TEXT,   /* text */
        SYM_FLAGS,  /* a as flags of the table, joined by text */
        SYM_SYMBOL, /* a as one symbol of the table */
} SymKind;

typedef struct SymEntry {
        uint64_t value;
        const char *name; /* owned by the tep handle's format, which outlives the plan */
        size_t len;
} SymEntry;

typedef struct SymNode {
        uint8_t kind;
        char op[3];
        uint8_t size;
        uint16_t offset;
        uint64_t value;
        const char *text;
        size_t text_len;
        char *owned; /* text of the format between two arguments */
        struct SymNode *a, *b, *c;
        SymEntry *entries;
        size_t n_entries;
} SymNode;

/* What compiling one argument found out, beyond its tree. */
typedef struct SymCompile {
        struct tep_event *event;
        const struct tep_format_field *field; /* the one field whose value the argument renders */
        /* Fields read only to choose (the condition of a ternary: kvm_exit's isa, ext4's found):
         * the argument's field when it renders no other. */
        const struct tep_format_field *cond_field;
        bool cond_many;
        bool in_cond;
        bool has_table;
        size_t end; /* of the fields the argument reads: a shorter record gets no "sym" */
} SymCompile;

SymNode *sym_node_new(SymKind kind);
SymNode *sym_node_free(SymNode *n);
static inline void sym_node_freep(SymNode **n) {
        sym_node_free(*n);
}

/* The value of a numeric node for the record data (NULL for a tree of constants), with the
 * operators and the unsigned 64-bit arithmetic of libtraceevent. */
uint64_t sym_eval(const SymNode *n, const uint8_t *data);

/* Whether a print argument renders text of its own making (a flag or symbol table, or a ternary
 * choosing between texts), rather than a field's value or string. */
bool sym_arg_is_text(const struct tep_print_arg *arg);
/* Compiles a print argument that sym_arg_is_text() into *ret, noting in sc the fields it reads.
 * Returns 0 with *ret set, -ENOMEM, or -EOPNOTSUPP for an argument that cannot be evaluated from
 * the format alone. */
int sym_compile_text(SymCompile *sc, const struct tep_print_arg *arg, SymNode **ret);

/* The longest text a compiled node can make; *plain is cleared unless all of its text is printable
 * ASCII that JSON takes as it is. */
size_t sym_node_max_len(const SymNode *n, bool *plain);
