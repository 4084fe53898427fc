/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "encode.h"

struct tep_handle;

/*
 * The decoder turns ring-buffer sub-buffer pages into NDJSON records (DESIGN §3). Pure code: it
 * reads formats from a tep handle that the caller filled, and asks the caller, through callbacks,
 * for the two facts a page does not hold (a pid's command name, and how many events were lost
 * when the page only says "some"). For each event id it compiles a plan once: the JSON key text,
 * offsets, sizes and kinds of the fields, so a record costs no lookups by name.
 */

typedef struct Decoder Decoder;

typedef struct DecoderCallbacks {
        /* The command name of pid for its record written at ts (NUL-terminated), or NULL when
         * unknown. */
        const char *(*comm)(void *userdata, int pid, uint64_t ts);
        /* Events lost on cpu before this page, when the page flags a loss; stored is the count the
         * page holds, NULL when it had no room for one. Without the callback the stored count is
         * taken (and none when there is none). */
        uint64_t (*missed)(void *userdata, unsigned cpu, const uint64_t *stored);
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

/* The number of data records on a page, by a walk of its entry headers only: what a page that
 * failed to decode held. Stops at the first entry that does not fit. */
uint64_t decoder_page_records(const void *page, size_t size);

/* Makes the variant of record index with the kernel's formatted text added as "print". The
 * record's raw data must still be valid. */
int decoder_encode_print(Decoder *d, Batch *batch, size_t index);

/* What a variant of a record's line adds to the plain one, after "fields": */
enum {
        DECODER_VARIANT_SYM = 1 << 0,   /* "sym": readable forms of integer fields (DESIGN §3) */
        DECODER_VARIANT_PRINT = 1 << 1, /* "print": the kernel's formatted text */
};

/* Makes the variant of record index that adds what the DECODER_VARIANT_* bits say, at
 * print_offset/print_length with variant set (a record keeps the variant made last; another one
 * is made anew). The record's raw data must still be valid. Nothing is made when the batch's plain
 * lines carry all of variant already (Batch.variant: DECODER_VARIANT_SYM is written into the plain
 * lines while decoding when set there). */
int decoder_encode_variant(Decoder *d, Batch *batch, size_t index, unsigned variant);

/* The record's raw data copied into a buffer with enough zeros after it that libtraceevent, which
 * follows __data_loc offsets and reads strings up to a NUL without bounds, stays inside it even for
 * a corrupt record. Valid until the next call. */
void *decoder_padded_raw(Decoder *d, const Record *r);

/* The "system:event" name of an event id, or NULL. */
const char *decoder_event_name(Decoder *d, unsigned id);

/* Forgets compiled plans, after formats were added to or removed from the tep handle. */
void decoder_reset_plans(Decoder *d);

const DecoderStats *decoder_stats(const Decoder *d);
