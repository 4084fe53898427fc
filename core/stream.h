/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/encode.h"
#include "core/queue.h"
#include "core/selection.h"

typedef struct Decoder Decoder;

/*
 * A live stream: what one client selected (a Selection) and the bounded queue of its records, as
 * NDJSON lines or Varlink replies. When the queue is full, records are dropped and counted per CPU,
 * and a "lost" record with cause "client" goes out as soon as there is room again: a client never
 * sees a silent gap, and a slow client never holds up the readers or the other streams.
 *
 * A recording (core/recording.c) starts with a Stream too: the selection, the queue, its own
 * buffer and the loss counts are the same; what it queues are frames of raw pages.
 */

/* The stream's own buffer grows in chunks of this size: a chunk is freed once all of it has been
 * written, so a stream keeps at most one chunk beyond what it has queued. */
#define STREAM_CHUNK_SIZE (64U * 1024U)

typedef enum StreamMode {
        STREAM_RAW,  /* after an upgrade: NDJSON lines (a recording: frames) */
        STREAM_MORE, /* Varlink replies with "continues" */
} StreamMode;

typedef struct Stream {
        StreamMode mode;
        Selection selection;
        bool symbolic; /* add "sym", the readable forms of integer fields */
        bool realtime; /* gets clock records when the wall clock is stepped */
        bool cgroup;   /* add "cgroup", each record's task's cgroup then */
        bool stack;    /* add "stack", each record's kernel stack (Record.stack) */

        Queue queue;
        size_t max_bytes;

        unsigned n_cpus;
        uint64_t *dropped;    /* per CPU, not yet reported */
        uint64_t *dropped_ts; /* ts of the last record dropped, per CPU */
        /* Losses of the other causes (per CPU and TPD_LOST_* kind) whose lost record found no
         * room: reported later with their own cause, never as the client's (stream_carried()). */
        uint64_t *carried;
        uint64_t *carried_ts;
        bool drops_pending;

        /* The kernel's overrun and dropped counters per CPU when the stream started: losses the
         * kernel counted before are not this stream's. */
        uint64_t *base;
        bool has_base; /* set by the caller once base is filled in */

        /* Lines copied out of batches of which the stream selects little, so that a slow stream
         * keeps alive only what it selected (see stream_offer_batch()); a recording's frames. */
        Batch *own;
        uint32_t *sel; /* scratch: the selected records of the batch being offered or counted */
        uint64_t *sel_count;
        size_t sel_cap;

        uint64_t delivered; /* event records queued; lost records are not counted */
        uint64_t lost_client;
        struct Counters *counters; /* the manager's, while a client asks: losses by event too */
} Stream;

/* The order in which a CPU's losses are reported. */
#define STREAM_LOSS_KINDS 5
extern const int stream_loss_order[STREAM_LOSS_KINDS];

/* The count of cpu's losses of kind not reported yet, and the ts of the last one. */
static inline uint64_t *stream_carried(Stream *s, unsigned cpu, int kind) {
        return kind == TPD_LOST_CLIENT ? &s->dropped[cpu]
                                       : &s->carried[(size_t) cpu * _RECORD_KIND_MAX + kind];
}
static inline uint64_t *stream_carried_ts(Stream *s, unsigned cpu, int kind) {
        return kind == TPD_LOST_CLIENT ? &s->dropped_ts[cpu]
                                       : &s->carried_ts[(size_t) cpu * _RECORD_KIND_MAX + kind];
}

int stream_new(StreamMode mode, unsigned n_cpus, size_t max_bytes, Stream **ret);
Stream *stream_free(Stream *s);
/* For a Stream inside another object (a Recording): sets it up, and frees what it holds. */
int stream_init(Stream *s, StreamMode mode, unsigned n_cpus, size_t max_bytes);
void stream_done(Stream *s);

/* Makes room for length bytes at the end of the stream's own buffer and returns where they go
 * (NULL: out of memory), their offset in s->own in *ret_offset. */
char *stream_own_append(Stream *s, size_t length, uint32_t *ret_offset);

/* The start of a notice's object, {"ts":…,"notice":"…","message":"…", not closed: a stream
 * ends it as a line, a recording as a frame. */
int stream_notice_object(uint64_t ts, const char *notice, const char *message, Batch **ret);

/* What the stream's lines add to the plain ones (DECODER_VARIANT_* bits, decode.h). */
unsigned stream_variant(const Stream *s);

/* Queues (a copy of) record index of the batch if the stream selected it, or counts it as lost
 * when the queue is full or out of memory. Returns 1 when queued, 0 when not selected or dropped,
 * or a negative errno. */
int stream_offer(Stream *s, Decoder *d, Batch *b, size_t index);

/* Offers every record of a batch, all of one CPU, whose plain lines are complete (plain_end set).
 * A stream that selects them all, and has room, takes the batch as one slice. One that selects a
 * large part of it shares the batch too (charged for all of it); one that selects little copies
 * its lines into a buffer of its own. Returns the number of records queued, or a negative errno. */
int stream_offer_batch(Stream *s, Decoder *d, Batch *b);

/* What stream_offer_batch() delivers of a batch when its queue has room: every record (all), each
 * loss at its whole count, or the records index[0..n), each counting for count[k] records (1 for
 * an event, the stream's share of a loss). Both point into the stream's scratch, valid until its
 * next offer or count. */
typedef struct StreamCount {
        bool all;
        size_t n;
        const uint32_t *index;
        const uint64_t *count;
} StreamCount;

/* Decides what the stream takes of a batch, as stream_offer_batch() does, without queueing or
 * counting anything: the marks and counts of a shared-memory reader (ring.h). 0 or -ENOMEM. */
int stream_count_batch(Stream *s, Decoder *d, const Batch *b, StreamCount *ret);

/* The part of a kernel's loss record (overrun, dropped) that falls after the stream's start (its
 * base); all of any other loss. */
uint64_t stream_loss_share(const Stream *s, const Record *rec);

/* A notice's line, and a clock record's (as the two below queue them), '\n' included: the whole
 * of b's buffer. */
int stream_notice_line(uint64_t ts, const char *notice, const char *message, Batch **ret);
int stream_clock_line(uint64_t ts, const char *clock, int64_t offset_ns, Batch **ret);

/* Queues a notice record ({"ts":…,"notice":"instance-changed","message":"…"}), even when the
 * queue is full: notices are rare (at most one a second) and small (a recording's: see
 * recording_queue_notice()). */
int stream_queue_notice(Stream *s, uint64_t ts, const char *notice, const char *message);
/* Queues a clock record ({"ts":…,"clock":"boot","realtime_offset_ns":…}: from ts on, the wall
 * clock is ts + offset), even when the queue is full: they are rare and small. */
int stream_queue_clock(Stream *s, uint64_t ts, const char *clock, int64_t offset_ns);
/* Notes the kernel's loss counters on cpu at the stream's start. */
int stream_set_base(Stream *s, unsigned cpu, uint64_t overrun, uint64_t dropped);

/* Queues the pending client-loss records, if the queue has room for them, or with always even
 * when it is full: before a line that must come after them (the answer to a sync). */
int stream_report_drops(Stream *s, bool always);
