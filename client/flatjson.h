/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * A record of tpd's NDJSON (docs/design.md §3) read flat, for the Perfetto writer (perfetto.c): the
 * members of the line's object, and those of its "fields" object, each an integer, a string or
 * the JSON text of anything else (an array, an object, a fraction, true, false, null). Any JSON
 * is read (whitespace, escapes, members in any order), but nothing is built: a line costs one pass
 * and no allocation once the buffers are warm, where json-c's parser makes an object per value.
 */

typedef enum FlatKind {
        FLAT_INT,    /* i */
        FLAT_UINT,   /* u: an integer above INT64_MAX */
        FLAT_STRING, /* s: unescaped, NUL-terminated, len bytes (a \u0000 included) */
        FLAT_OTHER,  /* s: the value's JSON text, len bytes, not NUL-terminated */
} FlatKind;

typedef struct FlatValue {
        FlatKind kind;
        int64_t i;
        uint64_t u;
        const char *s;
        size_t len;
} FlatValue;

typedef struct FlatMember {
        const char *name; /* as the line has it between its quotes (escapes kept) */
        size_t name_len;
        FlatValue v;
} FlatMember;

typedef struct FlatRecord {
        FlatMember *top, *fields;
        size_t n_top, n_fields, cap_top, cap_fields;
        bool has_fields; /* "fields" is an object */
        char *buf;       /* the unescaped strings */
        size_t buf_cap;
} FlatRecord;

/* Reads one JSON object of n bytes (whitespace around it allowed): 0, -EBADMSG when it is not one,
 * -ENOMEM. Values stay valid until the next call. */
int flat_parse(FlatRecord *r, const char *line, size_t n);
void flat_done(FlatRecord *r);

/* The member name of members (n of them; the last, when the name is repeated), or NULL. A name
 * written with escapes is not found by its unescaped form. */
const FlatValue *flat_get(const FlatMember *members, size_t n, const char *name);
