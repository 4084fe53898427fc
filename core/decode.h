/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "core/encode.h"

struct tep_handle;

/*
 * The decoder turns ring-buffer sub-buffer pages into NDJSON records (docs/design.md §3). Pure code: it
 * reads formats from a tep handle that the caller filled, and asks the caller, through callbacks,
 * for the two facts a page does not hold (a pid's command name, and how many events were lost
 * when the page only says "some"). For each event id it compiles a plan once: the JSON key text,
 * offsets, sizes and kinds of the fields, so a record costs no lookups by name.
 */

typedef struct Decoder Decoder;
struct tep_event;

/* What a format may describe, beyond which decoder_check_event() refuses it: __data_loc offsets are
 * 16 bits, so no field of a record lies further; names are C identifiers. */
#define DECODER_FIELD_END_MAX 65535U
#define DECODER_NAME_MAX 255U

/* Whether tpd may read records by the format of event: every field within DECODER_FIELD_END_MAX
 * bytes, common_type the 2 bytes at 0 and common_pid 4 bytes, names not too long. The kernel's
 * formats always pass; a format read from a file may not. Returns 0 or -EBADMSG, with *ret_field
 * the name of the field at fault (NULL when the event's names are). Events that fail have no plan:
 * their records are of unknown events. */
int decoder_check_event(const struct tep_event *event, const char **ret_field);

typedef struct DecoderCallbacks {
        /* The command name of pid for its record written at ts (NUL-terminated), or NULL when
         * unknown. */
        const char *(*comm)(void *userdata, int pid, uint64_t ts);
        /* Events lost on cpu before this page, when the page flags a loss; stored is the count the
         * page holds, NULL when it had no room for one. Without the callback the stored count is
         * taken (and none when there is none). */
        uint64_t (*missed)(void *userdata, unsigned cpu, const uint64_t *stored);
        /* The cgroup v2 path pid was in at ts as JSON text, a string quoted and escaped (*ret_len
         * bytes, not NUL-terminated), or NULL when unknown: for DECODER_VARIANT_CGROUP. */
        const char *(*cgroup)(void *userdata, int pid, uint64_t ts, size_t *ret_len);
        /* The kernel symbol of a stack frame's address as "symbol+0xoff" into buf (NUL-terminated,
         * cut to size): its length, 0 when unknown. For DECODER_VARIANT_STACK. */
        size_t (*ksym)(void *userdata, uint64_t address, char *buf, size_t size);
        void *userdata;
} DecoderCallbacks;

typedef struct DecoderStats {
        uint64_t records;   /* event records encoded */
        uint64_t unknown;   /* records of an event id without a loaded format, skipped */
        uint64_t bad_pages; /* pages whose header or records did not parse */
        uint64_t overrun;   /* events lost before pages, as reported by the page headers */
} DecoderStats;

int decoder_new(struct tep_handle *tep, const DecoderCallbacks *callbacks, Decoder **ret);
Decoder *decoder_free(Decoder *d);

/* Decodes one sub-buffer page of size bytes read from the given cpu, appending one record per
 * event (and a lost record first when the page says events were dropped before it). Records of an
 * event id without a format become lost records with cause "unknown", one per run of the same id
 * and pid, carrying that id and pid. Returns the number of records appended, or a negative errno:
 * -EBADMSG for a page that is not one (the records before the fault stay appended). */
int decoder_decode_page(Decoder *d, const void *page, size_t size, unsigned cpu, Batch *batch);

/* Consecutive records of one event id without a format, and one pid: one lost record. */
typedef struct DecoderUnknownRun {
        uint16_t id;
        int32_t pid;
        uint64_t ts; /* of the last one */
        uint64_t count;
} DecoderUnknownRun;

/* Decodes one event record (its payload, as a ring-buffer entry holds it) written at ts on cpu:
 * what decoder_decode_page() does for each record of a page. A record of an event id without a
 * format joins the run *unknown (zeroed at first) instead, which becomes one lost record with cause
 * "unknown" when a different record comes or decoder_flush_unknown() is called. Returns 1 when a
 * record was appended, 0 when it joined the run, -EBADMSG for a record shorter than its format (none
 * appended), or another negative errno. */
int decoder_decode_record(Decoder *d, uint64_t ts, unsigned cpu, const void *data, size_t size,
                          DecoderUnknownRun *unknown, Batch *batch);
/* The loss a page flags before its first record, written at ts on cpu: stored is the count the
 * page holds, NULL when it had none. Appends a lost record with cause "overrun" of the count the
 * missed callback gives (without it, the stored one) unless that is 0. Returns 1 when appended. */
int decoder_decode_missed(Decoder *d, uint64_t ts, unsigned cpu, const uint64_t *stored, Batch *batch);
/* Appends the lost record of a pending run of unknown records, if any, and empties the run. */
int decoder_flush_unknown(DecoderUnknownRun *unknown, Batch *batch, unsigned cpu);

/* The same walk, calling fn with the event id and common_pid of each data record of 8 bytes or more:
 * what a page holds, for counting without decoding. */
typedef void (*DecoderRecordFn)(void *userdata, uint16_t id, int32_t pid);
uint64_t decoder_page_walk(const void *page, size_t size, DecoderRecordFn fn, void *userdata);

/* Makes the variant of record index with the kernel's formatted text added as "print". The
 * record's raw data must still be valid. */
int decoder_encode_print(Decoder *d, Batch *batch, size_t index);

/* What a variant of a record's line adds to the plain one, after "fields": */
enum {
        DECODER_VARIANT_SYM = 1 << 0,    /* "sym": readable forms of integer fields (docs/design.md §3) */
        DECODER_VARIANT_PRINT = 1 << 1,  /* "print": the kernel's formatted text */
        DECODER_VARIANT_CGROUP = 1 << 2, /* "cgroup": the task's cgroup then (the cgroup callback) */
        DECODER_VARIANT_STACK = 1 << 3,  /* "stack": the frames of Record.stack (the ksym callback) */
};

/* A record of ftrace:kernel_stack is no record of its own: the decoder joins it to the event record
 * before it on its CPU (Record.stack), or when none is in the batch, notes it as the batch's
 * lead_stack. Frames whose address no symbol holds are "[unknown]": no address is ever written. */
#define DECODER_STACK_UNKNOWN "[unknown]"

/* Makes the variant of record index that adds what the DECODER_VARIANT_* bits say, at
 * print_offset/print_length with variant set (a record keeps the variant made last; another one
 * is made anew). The record's raw data must still be valid. Nothing is made when the batch's plain
 * lines carry all of variant already (Batch.variant: DECODER_VARIANT_SYM and _CGROUP are written into
 * the plain lines while decoding when set there). */
int decoder_encode_variant(Decoder *d, Batch *batch, size_t index, unsigned variant);

/* The record's raw data copied into a buffer with enough zeros after it that libtraceevent, which
 * follows __data_loc offsets and reads strings up to a NUL without bounds, stays inside it even for
 * a corrupt record, of a format that passed decoder_check_event(). Valid until the next call. At
 * most DECODER_PADDED_MAX bytes are copied: give libtraceevent no larger size. */
void *decoder_padded_raw(Decoder *d, const Record *r);
#define DECODER_PADDED_MAX 65536U

/* The command name of pid for a record written at ts, through the comm callback; NULL when unknown. */
const char *decoder_comm(Decoder *d, int pid, uint64_t ts);

/* The id of ftrace:kernel_stack, or -2 when the formats have none. */
int decoder_stack_id(Decoder *d);

/* The "system:event" name of an event id, or NULL. */
const char *decoder_event_name(Decoder *d, unsigned id);

/*
 * A record's fields read without JSON, by the decoder's plan of its event: for writers of other
 * formats (tpctl's Perfetto trace). The fields are those of the record's line's "fields", in its
 * order, with the same values (a string up to its first NUL, cut to the record; a __data_loc
 * range clamped to the record).
 */
typedef struct EventPlan EventPlan;

typedef enum DecoderValueKind {
        DECODER_VALUE_SIGNED,   /* .i */
        DECODER_VALUE_UNSIGNED, /* .u */
        DECODER_VALUE_POINTER,  /* .u, which the line writes as "0x…" */
        DECODER_VALUE_STRING,   /* .p, .len bytes (no NUL among them, none after them) */
        DECODER_VALUE_ARRAY,    /* .p, .len bytes of integers of .elem_size bytes, .is_signed */
} DecoderValueKind;

typedef struct DecoderValue {
        DecoderValueKind kind;
        int64_t i;
        uint64_t u;
        const uint8_t *p;
        size_t len;
        unsigned elem_size;
        bool is_signed;
} DecoderValue;

/* The plan of event id, compiled on first use; NULL for an event without a usable format. */
EventPlan *decoder_plan(Decoder *d, unsigned id);
/* Its "system:event" name, its number of fields, and field i's name (*ret_len bytes, not
 * NUL-terminated). */
const char *decoder_plan_name(const EventPlan *p);
unsigned decoder_plan_n_fields(const EventPlan *p);
const char *decoder_plan_field_name(const EventPlan *p, unsigned i, size_t *ret_len);
/* The common_pid of a record of the plan's event (its payload, size bytes): 0, or -EBADMSG when the
 * record is too short to hold it. */
int decoder_plan_pid(const EventPlan *p, const void *data, size_t size, int32_t *ret);
/* Field i of a record of the plan's event: 0, or -EBADMSG when the record is shorter than its
 * format says (as decoder_decode_record() finds it). */
int decoder_plan_read(const EventPlan *p, unsigned i, const void *data, size_t size, DecoderValue *ret);
/* Appends v as the record's line writes it: a number, "0x…", a string, or an array of numbers. */
int decoder_value_json(const DecoderValue *v, JsonBuf *b);

/* Forgets compiled plans, after formats were added to or removed from the tep handle. */
void decoder_reset_plans(Decoder *d);

const DecoderStats *decoder_stats(const Decoder *d);
