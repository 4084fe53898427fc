/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <systemd/sd-event.h>

#include "comm.h"
#include "core/decode.h"
#include "tracing.h"

/*
 * Decoding: a CPU's pages into a batch of records, on the loop or on worker threads
 * (DecodeWorkers=, docs/design.md "Decoding on more than one core").
 *
 * decode_pages() is the one decode of the reader's pages, wherever it runs: what a page held and
 * could not be delivered becomes a lost record of cause "decode", and each "overrun" lost record
 * gets the base of the kernel's counter it covers from there.
 *
 * With workers, the loop hands a CPU's pages to the worker that owns the CPU (cpu % workers),
 * which decodes them with a decoder, a tep handle and command names of its own; the loop takes the
 * batches back in the order each worker finished them, which for one CPU is the order of its
 * pages, and offers them to the streams. The loop only routes and serves.
 */

/* What a decoder asks of tpd besides the formats: shared by the loop's decoder and the workers'. */
typedef struct DecodeContext {
        CommCache *comm;
        /* Events lost on cpu before a page that flags a loss (see DecoderCallbacks.missed), and in
         * *ret_base the kernel's overrun counter before them. Called on any thread: thread-safe. */
        uint64_t (*missed)(void *userdata, unsigned cpu, const uint64_t *stored, uint64_t *ret_base);
        /* A task's cgroup at a time (DecoderCallbacks.cgroup): for the loop's decoder only, which
         * makes the lines that carry it; NULL for the workers'. */
        const char *(*cgroup)(void *userdata, int pid, uint64_t ts, size_t *ret_len);
        /* A kernel address's symbol (DecoderCallbacks.ksym): the loop's decoder only, likewise. */
        size_t (*ksym)(void *userdata, uint64_t address, char *buf, size_t size);
        void *userdata;
        /* Set by the missed callback while a page decodes. */
        bool have_base;
        uint64_t base;
} DecodeContext;

/* A decoder whose callbacks are the context's (which must outlive it). */
int decode_context_decoder(DecodeContext *c, struct tep_handle *tep, Decoder **ret);

/* Decodes n_pages whole pages of cpu into b. *pending: records a failed decode could not report
 * before (no memory for the lost record), reported first now. Returns 0, or the first error other
 * than a malformed page (-EBADMSG), whose records were counted lost: for the caller's log. */
int decode_pages(Decoder *d, DecodeContext *c, unsigned cpu, const void *pages, size_t n_pages,
                 size_t page_size, uint64_t *pending, Batch *b);

typedef struct Workers Workers;

typedef struct WorkersSetup {
        unsigned n_workers;
        unsigned active; /* of them in use at first (workers_set_active()) */
        unsigned n_cpus; /* possible CPUs */
        Tracing *tracing;
        const char *clock; /* the trace clock, for command names by time */
        uint64_t (*missed)(void *userdata, unsigned cpu, const uint64_t *stored, uint64_t *ret_base);
        /* Called on cpu's worker for workers_submit_losses(): appends the kernel's losses on cpu
         * not reported yet, at ts, to b. Thread-safe. */
        void (*losses)(void *userdata, unsigned cpu, uint64_t ts, Batch *b);
        /* Called on the loop with each decoded batch, per CPU in the order of its pages; error as
         * decode_pages() returned it. The batch is the workers': take a reference to keep it. */
        void (*done)(void *userdata, unsigned cpu, Batch *b, int error);
        void *userdata;
} WorkersSetup;

/* Starts the threads; the tep handles are copies of the tracing's, kept up to date by its format
 * handler (which this sets). */
int workers_new(sd_event *event, const WorkersSetup *setup, Workers **ret);
/* Waits for the batches submitted and drops them undelivered: call workers_sync() first. */
Workers *workers_free(Workers *w);
unsigned workers_count(const Workers *w);
/* The workers in use: CPU i goes to worker i % active; 0: none, the caller decodes. A change
 * waits for every batch submitted (workers_sync()) first, so that no CPU's batches are ever with
 * two workers at once. */
unsigned workers_active(const Workers *w);
void workers_set_active(Workers *w, unsigned active);
/* DecodeWorkers=auto: the workers to use next, from the CPU time busy_ns that decoding took over the
 * last interval_ns (the loop's or the active workers'). Each thread decodes at most
 * WORKERS_BUSY_PERCENT of the time, so that a burst finds room; while one thread's
 * WORKERS_BUSY_PERCENT is enough the loop decodes, and it takes the decoding back once it needs
 * less than WORKERS_IDLE_PERCENT of a core. More at once, fewer only after
 * WORKERS_FEWER_CHECKS calls in a row wanted fewer (*fewer counts them). Pure. */
#define WORKERS_BUSY_PERCENT 60U
#define WORKERS_IDLE_PERCENT 25U
#define WORKERS_FEWER_CHECKS 5U
unsigned workers_wanted(unsigned active, unsigned max, uint64_t busy_ns, uint64_t interval_ns,
                        unsigned *fewer);
/* Records of cpu the workers could not report (no memory for a lost record), taken out: after a
 * change of the workers in use, whoever decodes cpu next reports them. */
uint64_t workers_take_pending(Workers *w, unsigned cpu);
/* The CPU time the workers spent decoding since the last call, in ns. */
uint64_t workers_take_busy_ns(Workers *w);
/* The calling thread's CPU time, in ns (CLOCK_THREAD_CPUTIME_ID). */
uint64_t thread_cpu_ns(void);

/* Hands a copy of the pages to cpu's worker (-EINVAL while none is active), with the records lost
 * before them (reported first, cause "decode"). While that worker has
 * WORKERS_QUEUE_JOBS batches not handed over, hands over those decoded (the done callback runs in this call)
 * or waits for one: the kernel's buffer, not tpd's memory, holds what the workers cannot take. */
#define WORKERS_QUEUE_JOBS 4U
int workers_submit(Workers *w, unsigned cpu, const void *pages, size_t n_pages, size_t page_size,
                   uint8_t variant, uint64_t lost);
/* The kernel's losses on cpu, through cpu's worker (setup's losses callback): after the pages
 * handed over before, which may flag some of them in their place. Its batch comes back as theirs
 * do. */
int workers_submit_losses(Workers *w, unsigned cpu, uint64_t ts);
/* Waits until every batch submitted is decoded, and hands them all to the done callback: for
 * whoever must see every record read so far (a notice after them, a count, the end). */
void workers_sync(Workers *w);

/* For the command-name caches: comm_cache_next_generation() and comm_cache_set_clock() of each
 * worker's, before its next batch. */
void workers_next_generation(Workers *w);
int workers_set_clock(Workers *w, const char *clock);

/* The workers' decoders' counters, summed as of the last batch each finished. */
void workers_stats(Workers *w, DecoderStats *ret);
