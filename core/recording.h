/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/stream.h"

/*
 * A recording: what one client selected of the raw pages, as frames (include/tpd-protocol.h) in
 * the bounded queue of its Stream: pages less the records it did not select, the command names of
 * their pids, the losses before each page, notices. Never decoded.
 */

/* A recording's last command name sent for a pid. */
typedef struct RecordingComm {
        uint32_t key;  /* pid + 1; 0: a free slot */
        char comm[16]; /* empty: not known yet (see recording_resolve_comms()) */
        uint64_t ts;   /* of the pid's first record */
        uint8_t tries; /* flush ticks it was looked at again */
} RecordingComm;

typedef struct Recording {
        Stream stream; /* the selection, the queue and the loss counts */

        uint64_t *missed;       /* per CPU: records lost since its last page went out; UINT64_MAX: unknown */
        uint64_t *overrun_seen; /* per CPU: the kernel's counters as far as reported: overrun, dropped */
        RecordingComm *comm_pids; /* the command names sent, by pid (see recording_send_comm()) */
        size_t comm_pids_cap;
        size_t n_comm_pids;
        uint64_t comm_key;      /* of the hash of comm_pids: pids a user picks do not crowd one slot */
        size_t n_comm_checking; /* pids still looked at again (see recording_resolve_comms()) */
        bool finished;          /* the client asked for the last names: no more pages (recording_finish()) */
        uint8_t *scratch;       /* a frame: header and page */
        size_t scratch_size;
        uint64_t pages; /* queued */
        char *notice;   /* a notice frame's payload that found the queue full: the latest one */
        /* Keep the kernel's stack record after each record kept (stream.stack): per CPU, the pid of
         * the last record kept when it was the last one walked, else -1. */
        int32_t *stack_pid;
} Recording;

/* What a recording needs to know of the pages it is offered. */
typedef struct PageSource {
        unsigned cpu;
        size_t page_size;
        /* The kernel's overrun counter of the CPU now, or UINT64_MAX when it cannot be read. */
        uint64_t (*overrun)(void *userdata, unsigned cpu);
        void *userdata;
} PageSource;

int recording_new(unsigned n_cpus, size_t max_bytes, Recording **ret);
Recording *recording_free(Recording *rec);

/* Notes the kernel's loss counters on cpu at the recording's start (stream_set_base()). */
int recording_set_base(Recording *rec, unsigned cpu, uint64_t overrun, uint64_t dropped);

/* Offers a recording the pages read from one CPU: each becomes a page frame holding the records
 * it selects (the page as it is when it selects them all), its loss flags telling what was lost
 * before it, preceded by frames naming the command of each new pid and counting losses. A page
 * that finds the queue full is lost to the recording, and counted. Returns the number of records
 * queued, or a negative errno. */
int recording_offer_pages(Recording *rec, Decoder *d, const PageSource *src, const void *pages,
                          size_t n_pages);
/* Looks again, for a few seconds after its first record, at the name of each new pid and sends it
 * when it changed: a task gone before tpd read its records is named from the kernel's table, which
 * names a task only once it switched after writing, and may until then hold an earlier task of the
 * same pid (or none). From the flush timer. */
int recording_resolve_comms(Recording *rec, Decoder *d);
/* The client shut its sending side: it takes no more pages and, before it closes, the names of the
 * pids the kernel can name now. Sends a COMM frame for each pid whose name is not known or still
 * looked at again (a name from a table read before the task's last switch may be an earlier
 * task's) and differs from the one sent; call with the comm cache just reread. */
int recording_finish(Recording *rec, Decoder *d);
/* Queues one frame, charged against the recording's bound like its pages: -ENOBUFS when it does
 * not fit (nothing is queued then). */
int recording_queue_frame(Recording *rec, uint32_t type, uint32_t cpu, uint32_t arg, const void *a,
                          size_t na, const void *b, size_t nb);
/* Queues a NOTICE frame ({"ts":…,"notice":"…","message":"…"}), charged like every frame: when the
 * queue is full the notice waits (the latest one replaces an earlier one still waiting) and goes
 * out before the recording's next page. */
int recording_queue_notice(Recording *rec, uint64_t ts, const char *notice, const char *message);
/* Notes the kernel's loss counters of a CPU: what they grew by since the last note or page is lost
 * before the recording's next page of that CPU. */
void recording_note_kernel_losses(Recording *rec, unsigned cpu, uint64_t overrun, uint64_t dropped,
                                  uint64_t ts);
/* Queues the frames that found no room before: loss counts and the latest notice. */
int recording_report_losses(Recording *rec);
