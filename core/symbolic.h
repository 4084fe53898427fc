/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/encode.h"

struct tep_event;

/*
 * "sym": the readable forms of a record's integer fields (docs/design.md §3), the names the kernel
 * prints through __print_flags and __print_symbolic, system call names and errnos. The decoder
 * compiles an event's program once, into its plan, and runs it for each record that wants "sym".
 */

typedef struct SymField SymField;

typedef struct SymbolicProgram {
        SymField *fields; /* the fields with a readable form, in the format's order */
        uint16_t n_fields;
        bool compiled;
        size_t max; /* worst-case bytes of the "sym" object */
        size_t end; /* a record shorter than this gets an empty "sym" */
} SymbolicProgram;

/* Compiles the program of event into s, which must be zeroed, and sets s->compiled. The tep handle's
 * formats must outlive s. Returns 0 or -ENOMEM (s is left as it was). */
int symbolic_compile(SymbolicProgram *s, struct tep_event *event);
/* Frees what s holds and zeroes it. */
void symbolic_done(SymbolicProgram *s);

/* Appends `,"sym":{…}` for the record data of size bytes, of the event s was compiled for. The
 * caller reserved s->max bytes of room. */
void symbolic_put(SymbolicProgram *s, JsonBuf *b, const uint8_t *data, size_t size);
