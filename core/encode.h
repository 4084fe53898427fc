/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "loss.h"

#define _batch_likely(x) __builtin_expect(!!(x), 1)

/*
 * JSON output for the record path: a growable byte buffer with writers for the few value kinds a
 * trace record has, and the Batch, a refcounted run of encoded NDJSON lines shared by every
 * stream that selected them. Pure code: no I/O, no allocation per value once the buffer is warm.
 */

typedef struct JsonBuf {
        char *data;
        size_t len;
        size_t cap;
} JsonBuf;

/* Makes room for n more bytes. The put helpers below assume the room was made. */
int jsonbuf_reserve(JsonBuf *b, size_t n);
void jsonbuf_done(JsonBuf *b);

static inline void jsonbuf_put(JsonBuf *b, const void *p, size_t n) {
        __builtin_memcpy(b->data + b->len, p, n);
        b->len += n;
}

static inline void jsonbuf_putc(JsonBuf *b, char c) {
        b->data[b->len++] = c;
}

#define JSON_U64_MAX_LEN 20
#define JSON_I64_MAX_LEN 20
#define JSON_HEX_MAX_LEN 20 /* "0x" and 16 digits, quoted */

/* Worst-case output of json_put_string() for n input bytes: each byte may become "\u00XX". */
#define JSON_STRING_MAX_LEN(n) (6 * (size_t) (n) + 2)

void json_put_u64(JsonBuf *b, uint64_t v);
void json_put_i64(JsonBuf *b, int64_t v);
/* A pointer value as a quoted "0x…" string. */
void json_put_hex(JsonBuf *b, uint64_t v);
/* Up to n bytes of s, stopping at the first NUL, quoted and escaped. Bytes that are not valid
 * UTF-8 become U+FFFD, so the output is always valid JSON text. */
void json_put_string(JsonBuf *b, const char *s, size_t n);
/* Length of the valid UTF-8 sequence at s (at most n bytes), or 0 when it is not valid. */
size_t utf8_sequence_length(const unsigned char *s, size_t n);
/* Reserves and writes a string; for callers outside the hot path. */
int json_append_string(JsonBuf *b, const char *s, size_t n);

/* A record's kind: an event, or a count of records lost, whose kind is then its cause (TPD_LOST_*,
 * loss.h: the "cause" of its line). */
enum {
        RECORD_EVENT = 0,
        _RECORD_KIND_MAX = _TPD_LOST_MAX,
};

typedef struct Record {
        uint64_t ts;
        const void *raw; /* event payload inside the page; valid only while the page is */
        uint32_t raw_size;
        uint32_t offset; /* the JSON line in the batch's data, '\n' included */
        uint32_t length;
        uint32_t print_offset; /* the same line with "print" added; length 0 until made */
        uint32_t print_length;
        int32_t pid;
        uint32_t cpu;
        uint16_t event_id;
        uint8_t kind;
        uint8_t variant; /* what print_offset's line adds: DECODER_VARIANT_* bits (decode.h) */
        /* The ftrace:kernel_stack record the kernel wrote after this one (its payload), joined by the
         * decoder or by tpd's glue; NULL without. Valid only while its page is. */
        const void *stack;
        uint32_t stack_size;
        uint64_t lost;
        /* Of a lost record of the kernel's (overrun, dropped): its counter before these losses,
         * so that a stream started since is charged only with what came after its start. */
        uint64_t lost_base;
} Record;

/* Of lost records counted by the kernel from lost_base on, the part after its counter stood at base
 * (a stream's start). */
static inline uint64_t loss_after_base(uint64_t lost, uint64_t lost_base, uint64_t base) {
        uint64_t end = lost_base + lost;

        if (end <= base)
                return 0;
        return lost_base < base ? end - base : lost;
}

/* Encoded records of one read, shared by reference among the client queues that carry them.
 * Offsets rather than pointers, since the data may move while the batch is being filled. */
#define BATCH_IDS_MAX 8

typedef struct Batch {
        unsigned refs;
        JsonBuf buf;
        Record *records;
        size_t n_records;
        size_t cap_records;
        /* The event ids of the batch's records, while there are few: a stream that selects all of
         * them takes the whole batch at once. */
        uint16_t ids[BATCH_IDS_MAX];
        uint8_t n_ids;
        bool many_ids;
        uint32_t n_lost; /* lost records among the records */
        /* The plain lines end here; "print" variants made later are appended after. */
        size_t plain_end;
        /* What the plain lines carry beyond the plain record, DECODER_VARIANT_* bits (decode.h):
         * set by who fills the batch, when every stream wants that part. */
        uint8_t variant;
        /* A kernel stack record before any event record of the batch: its record was in the CPU's
         * previous batch (a read ended between the two). Valid only while its page is. */
        const void *lead_stack;
        uint32_t lead_stack_size;
        int32_t lead_stack_pid;
} Batch;

Batch *batch_new(void);
Batch *batch_ref(Batch *b);
Batch *batch_unref(Batch *b);
/* Empties a batch that nobody else holds, keeping its memory for the next read. */
void batch_reset(Batch *b);
/* Appends a record slot; returns NULL on allocation failure. */
Record *batch_add_record(Batch *b);
/* Notes that the batch holds a record of event id. */
static inline void batch_note_event(Batch *b, uint16_t id) {
        if (_batch_likely(b->n_ids > 0 && b->ids[b->n_ids - 1] == id))
                return;
        for (unsigned i = 0; i < b->n_ids; i++)
                if (b->ids[i] == id)
                        return;
        if (b->n_ids < BATCH_IDS_MAX)
                b->ids[b->n_ids++] = id;
        else
                b->many_ids = true;
}

/* The memory a batch keeps alive once offered, its lines: what a queue that references it is
 * charged. Not its spare room, nor its records: batch_trim() gives those back once the streams
 * took what they wanted, so a batch reused at the size of the largest read does not charge a
 * small read for that size, and a queued record costs its line rather than its line, its Record
 * and the allocator's doubling (about 2.7 times as much for a getppid record). */
size_t batch_memory(const Batch *b);
/* Drops the records (read only while the batch is offered) and the spare room of a batch that
 * queues still hold. */
void batch_trim(Batch *b);

/* Encodes a lost record ({"ts":…,"cpu":…,"lost":N,"cause":…}) as the batch's next record. */
int batch_add_lost(Batch *b, uint64_t ts, unsigned cpu, uint64_t count, int kind);
