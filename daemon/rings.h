/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/ring.h"
#include "core/stream.h"
#include "shm.h"

/*
 * The shared-memory transport of streams (the Stream method's "transport":"shm"): tpd writes each
 * line once into a ring (core/ring.h) that every such stream of the same line form maps read-only,
 * instead of copying it into each stream's socket. One ring per form of line in use (plain,
 * "sym", "print", both), made by its first stream and dropped after its last; each stream also
 * gets a page of its own that says which entries it selects and how many it selected, so that its
 * reader tells its own losses exactly (core/ring-page.c). Selections are made here, by the same
 * function a socket stream's queue uses (stream_count_batch()); the reader copies the lines out.
 *
 * A reader that has read everything asks to be woken (WAIT); tpd wakes it once at the next publish
 * (ShmWakeFn, a WAKE frame on the stream's socket). Readers that keep reading cost tpd nothing but
 * their page's counts.
 */

typedef struct ShmRing ShmRing;
typedef struct ShmReader ShmReader;

/* Wakes a reader's client: head_seq is the ring's. */
typedef void (*ShmWakeFn)(void *owner, uint64_t head_seq);

#define SHM_RING_FORMS 4 /* by DECODER_VARIANT_* bits */

typedef struct ShmRings {
        ShmRing *rings[SHM_RING_FORMS];
        uint64_t data_size; /* of each ring: a power of two */
        unsigned n_cpus;
        uint32_t clock;
        ShmWakeFn wake;
        uint64_t refused; /* records too large for an entry (never with real pages) */
        unsigned n_readers;
} ShmRings;

struct ShmReader {
        ShmRings *rings;
        ShmRing *ring;
        ShmReader *next; /* the ring's readers */
        Stream *stream;
        void *owner;
        ShmRegion page_region;
        RingPageWriter page;
        StreamCount count; /* what the stream takes of the batch being published */
        bool counted;      /* count is valid */
        bool armed;        /* asked to be woken once entry wait_seq is published */
        uint64_t wait_seq;
        /* What the client says it delivered and lost (STATS frames), for GetStatus only. */
        uint64_t reported_delivered, reported_lost;
};

/* What a Stream reply says of the transport. */
typedef struct ShmReply {
        int fds[2]; /* the ring's and the page's, read-only: the caller owns them */
        uint64_t ring_size, start, start_seq;
        uint64_t page_size;
} ShmReply;

void shm_rings_init(ShmRings *rs, uint64_t data_size, unsigned n_cpus, uint32_t clock, ShmWakeFn wake);
/* Marks every ring closed (tpd stops) and frees them; readers left are detached. */
void shm_rings_done(ShmRings *rs);

/* A reader for stream s (its selection, symbolic and print set), on the ring of its line form,
 * made if needed; positioned at the ring's head. */
int shm_reader_new(ShmRings *rs, Stream *s, void *owner, ShmReader **ret);
ShmReader *shm_reader_free(ShmReader *r);
/* The fds and positions of the reply. */
int shm_reader_reply(ShmReader *r, ShmReply *ret);
/* The stream's base (stream_set_base()), before the reply goes out. */
void shm_reader_set_base(ShmReader *r, unsigned cpu, uint64_t overrun, uint64_t dropped);
/* The client read up to seq: wake it now if that entry is published, else at the next publish. */
void shm_reader_wait(ShmReader *r, uint64_t seq);

/* Publishes a batch of one CPU (plain lines complete) to every ring. */
void shm_rings_publish_batch(ShmRings *rs, Decoder *d, Batch *b);
/* Publishes a notice or clock line (RING_NOTICE, RING_CLOCK; '\n' included) to every ring. */
void shm_rings_publish_line(ShmRings *rs, uint8_t type, uint64_t ts, const char *line, size_t len);
