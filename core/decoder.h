/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* The decoder's insides, shared by decode.c (plans, records) and decode-variant.c (the variants of a
 * record's line): nothing outside core/decode*.c includes this (its name sorts after decode.h, which it
 * needs first). */

#include <traceevent/trace-seq.h>

#include "core/symbolic.h"

/* Included after core/decode.h, whose types it completes: not from it, which would make the two one
 * module (tests/layers). */

typedef enum FieldKind {
        FIELD_UNSIGNED,
        FIELD_SIGNED,
        FIELD_POINTER,
        FIELD_STRING,      /* char name[N] */
        FIELD_STRING_LOC,  /* __data_loc char[] name, or __rel_loc */
        FIELD_STRING_TAIL, /* char name[]: the rest of the record */
        FIELD_ARRAY,       /* other fixed arrays, elements as integers */
        FIELD_ARRAY_LOC,   /* __data_loc of other element types */
        FIELD_ARRAY_TAIL,
} FieldKind;

typedef struct FieldPlan {
        uint32_t key; /* offset of `,"name":` in the plan's key text */
        uint16_t key_len;
        uint16_t offset;
        uint16_t size; /* of the field, or of the location word for *_LOC */
        uint8_t kind;
        uint8_t elem_size; /* integer width: the field's, or its elements' for arrays */
        bool is_signed;
        bool relative; /* __rel_loc: offsets count from the end of the field */
} FieldPlan;

struct EventPlan {
        struct tep_event *event;
        SymbolicProgram sym; /* compiled on first use */
        char *name;          /* "system:event" */
        char *keys;          /* `,"event":"s:e","pid":` then each field's key */
        uint32_t head_len;   /* length of the `,"event"…"pid":` part */
        uint16_t pid_offset;
        uint16_t n_fields;
        size_t max_fixed; /* worst-case bytes of everything but dynamic strings and arrays */
        FieldPlan fields[];
};

struct Decoder {
        struct tep_handle *tep;
        DecoderCallbacks cb;
        EventPlan **plans; /* by event id */
        size_t n_plans;
        struct trace_seq seq;
        DecoderStats stats;
        uint8_t *scratch; /* see decoder_padded_raw() */
        size_t scratch_used;
        /* ftrace:kernel_stack: its id (-1: not looked up since the formats changed, -2: none) and
         * where its frames start in a record. */
        int stack_id;
        int stack_looked_at; /* the tep handle's count of formats then */
        uint16_t stack_frames_offset;
};

/* A record holds 16-bit __data_loc offsets and lengths, and fields end within
 * DECODER_FIELD_END_MAX bytes: nothing libtraceevent reads lies further than this from its start
 * (a __rel_loc offset counts from its field's end, at most a page's size from it). */
#define SCRATCH_SIZE (DECODER_PADDED_MAX + DECODER_FIELD_END_MAX + 16)

/* Appends ,"cgroup":… when the callback knows pid's cgroup at ts, with room for the line's end. */
int decoder_put_cgroup(Decoder *d, JsonBuf *b, int32_t pid, uint64_t ts);
