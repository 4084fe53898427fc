/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/encode.h"
#include "core/queue.h"

struct tep_handle;
struct tep_event_filter;
typedef struct Decoder Decoder;

/*
 * A stream: what one client selected (events, pids, cpus, a filter, the print text) and the bounded
 * queue of records waiting for it. When the queue is full, records are dropped and counted per CPU,
 * and a "lost" record with cause "client" goes out as soon as there is room again: a client never
 * sees a silent gap, and a slow client never holds up the readers or the other streams.
 */

/* A recording's last command name sent for a pid. */
typedef struct StreamComm {
        uint32_t key;  /* pid + 1; 0: a free slot */
        char comm[16]; /* empty: not known yet (see stream_resolve_comms()) */
        uint64_t ts;   /* of the pid's first record */
        uint8_t tries; /* flush ticks it was looked at again */
} StreamComm;

typedef enum StreamMode {
        STREAM_RAW,   /* after an upgrade: NDJSON lines */
        STREAM_MORE,  /* Varlink replies with "continues" */
        STREAM_PAGES, /* a recording: frames of raw pages (include/tpd-protocol.h) */
} StreamMode;

typedef struct Stream {
        StreamMode mode;
        uint8_t *events; /* bitmap by event id; NULL means every event */
        size_t events_bits;
        int32_t *pids;
        size_t n_pids;
        uint8_t *cpus; /* bitmap; NULL means every CPU */
        size_t cpus_bits;
        struct tep_event_filter *filter;
        bool print;
        bool symbolic; /* add "sym", the readable forms of integer fields */
        bool realtime; /* gets clock records when the wall clock is stepped */

        Queue queue;
        size_t max_bytes;

        unsigned n_cpus;
        uint64_t *dropped;    /* per CPU, not yet reported */
        uint64_t *dropped_ts; /* ts of the last record dropped, per CPU */
        /* Losses of the other causes (per CPU and TPD_LOST_* kind) whose lost record found no
         * room: reported later with their own cause, never as the client's. */
        uint64_t *carried;
        uint64_t *carried_ts;
        bool drops_pending;

        /* The kernel's overrun and dropped counters per CPU when the stream started: losses the
         * kernel counted before are not this stream's. */
        uint64_t *base;
        bool has_base; /* set by the caller once base is filled in */

        /* Lines copied out of batches of which the stream selects little, so that a slow stream
         * keeps alive only what it selected (see stream_offer_batch()). */
        Batch *own;
        uint32_t *sel; /* scratch: the selected records of the batch being offered */
        size_t sel_cap;

        uint64_t delivered; /* event records queued; lost records are not counted */
        uint64_t lost_client;
        struct Counters *counters; /* the manager's, while a client asks: losses by event too */

        /* A recording's (STREAM_PAGES): */
        uint64_t *missed;       /* per CPU: records lost since its last page went out; UINT64_MAX: unknown */
        uint64_t *overrun_seen; /* per CPU: the kernel's counters as far as reported: overrun, dropped */
        struct StreamComm *comm_pids; /* the command names sent, by pid (see stream_send_comm()) */
        size_t comm_pids_cap;
        size_t n_comm_pids;
        uint64_t comm_key;      /* of the hash of comm_pids: pids a user picks do not crowd one slot */
        size_t n_comm_checking; /* pids still looked at again (see stream_resolve_comms()) */
        bool finished;          /* the client asked for the last names: no more pages (stream_finish()) */
        uint8_t *scratch;       /* a frame: header and page */
        size_t scratch_size;
        uint64_t pages; /* queued */
        char *notice;   /* a notice frame's payload that found the queue full: the latest one */
} Stream;

/* What a recording needs to know of the pages it is offered. */
typedef struct PageSource {
        unsigned cpu;
        size_t page_size;
        /* The kernel's overrun counter of the CPU now, or UINT64_MAX when it cannot be read. */
        uint64_t (*overrun)(void *userdata, unsigned cpu);
        void *userdata;
} PageSource;

int stream_new(StreamMode mode, unsigned n_cpus, size_t max_bytes, Stream **ret);
Stream *stream_free(Stream *s);

int stream_select_event(Stream *s, unsigned id);
int stream_select_cpu(Stream *s, unsigned cpu);
int stream_select_pid(Stream *s, int32_t pid);
/* Applies the filter to the given event ids. On -EINVAL *ret_message says why. */
int stream_set_filter(Stream *s, struct tep_handle *tep, const char *filter, const char *const *events,
                      size_t n_events, char **ret_message);

/* Whether the stream selected the record. With a filter, only records of the events it was set
 * for can pass. d supplies a safe copy of the record for libtraceevent's filter engine; NULL when
 * the record's data is known to be well-formed. */
bool stream_matches(const Stream *s, Decoder *d, const Record *r);

/* Queues (a copy of) record index of the batch if the stream selected it, or counts it as lost
 * when the queue is full or out of memory. Returns 1 when queued, 0 when not selected or dropped,
 * or a negative errno. */
int stream_offer(Stream *s, Decoder *d, Batch *b, size_t index);

/* Offers every record of a batch, all of one CPU, whose plain lines are complete (plain_end set).
 * A stream that selects them all, and has room, takes the batch as one slice. One that selects a
 * large part of it shares the batch too (charged for all of it); one that selects little copies
 * its lines into a buffer of its own. Returns the number of records queued, or a negative errno. */
int stream_offer_batch(Stream *s, Decoder *d, Batch *b);

/* Queues a notice record ({"ts":…,"notice":"instance-changed","message":"…"}), even when the
 * queue is full: notices are rare (at most one a second) and small. A recording gets it as a NOTICE
 * frame, charged like every frame: when its queue is full the notice waits (the latest one replaces
 * an earlier one still waiting) and goes out before the recording's next page. */
int stream_queue_notice(Stream *s, uint64_t ts, const char *notice, const char *message);
/* Queues a clock record ({"ts":…,"clock":"boot","realtime_offset_ns":…}: from ts on, the wall
 * clock is ts + offset), even when the queue is full: they are rare and small. */
int stream_queue_clock(Stream *s, uint64_t ts, const char *clock, int64_t offset_ns);
/* Notes the kernel's loss counters on cpu at the stream's start. */
int stream_set_base(Stream *s, unsigned cpu, uint64_t overrun, uint64_t dropped);

/* Offers a recording the pages read from one CPU: each becomes a page frame holding the records
 * the stream selects (the page as it is when it selects them all), its loss flags telling what
 * was lost before it, preceded by frames naming the command of each new pid and counting losses.
 * A page that finds the queue full is lost to the stream, and counted. Returns the number of
 * records queued, or a negative errno. */
int stream_offer_pages(Stream *s, Decoder *d, const PageSource *src, const void *pages, size_t n_pages);
/* Looks again, for a few seconds after its first record, at the name of each new pid of a
 * recording and sends it when it changed: a task gone before tpd read its records is named from
 * the kernel's table, which names a task only once it switched after writing, and may until then
 * hold an earlier task of the same pid (or none). From the flush timer. */
int stream_resolve_comms(Stream *s, Decoder *d);
/* For stream_offer_pages(): queues a COMM frame for the pid of a record written at ts if its name is
 * new to the recording (core/stream-comm.c). */
int stream_send_comm(Stream *s, Decoder *d, unsigned cpu, int32_t pid, uint64_t ts);
/* The client of a recording shut its sending side: it takes no more pages and, before it closes,
 * the names of the pids the kernel can name now. Sends a COMM frame for each pid whose name is not
 * known or still looked at again (a name from a table read before the task's last switch may be an
 * earlier task's) and differs from the one sent; call with the comm cache just reread. */
int stream_finish(Stream *s, Decoder *d);
/* Queues one frame of a recording, charged against the stream's bound like its pages: -ENOBUFS
 * when it does not fit (nothing is queued then). */
int stream_queue_frame(Stream *s, uint32_t type, uint32_t cpu, uint32_t arg, const void *a, size_t na,
                       const void *b, size_t nb);
/* Notes the kernel's loss counters of a recording's CPU: what they grew by since the last note or
 * page is lost before the recording's next page of that CPU. */
void stream_note_kernel_losses(Stream *s, unsigned cpu, uint64_t overrun, uint64_t dropped, uint64_t ts);

/* Queues the pending client-loss records, if the queue has room for them. */
int stream_report_drops(Stream *s);
