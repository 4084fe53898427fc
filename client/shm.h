/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <json-c/json.h>

#include "connection.h"
#include "core/encode.h"
#include "core/ring.h"
#include "lines.h"
#include "tpd-protocol.h"

/*
 * A stream over shared memory: tpd's reply to Stream with "transport":"shm" hands over its ring
 * and the stream's reader page (core/ring.h), read-only; this reads the stream's lines from them,
 * exactly the ones tpd would have written to the socket, and waits on the socket with WAIT and WAKE
 * frames (tpd-protocol.h) once it has read everything. Lines the stream lost, by falling a ring
 * behind or by its share of a loss, are written as tpd writes its own (batch_add_lost()).
 */

typedef struct Shm {
        int sock; /* tpd's connection: WAIT and WAKE frames only; not owned */
        int ring_fd, page_fd;
        void *ring, *page;
        size_t ring_size, page_size;
        RingReader r;
        RingPageReader pr;
        bool realtime; /* the stream asked for clock records */
        bool waiting;  /* a WAIT is out: the next frame from tpd is its WAKE */
        bool ended;    /* tpd ended the stream: the ring is read up to end_head, then no more */
        uint64_t end_head;
        bool stopping; /* a signal ends the stream: entries from stop_seq on are not read */
        uint64_t stop_seq;
        bool cut; /* tpd truncated the memory under a read: nothing more can be read */
        uint64_t wait_seq;
        uint8_t frame[sizeof(TpdSeqFrame)]; /* the WAKE read so far */
        size_t n_frame;
        Batch *own;           /* the stream's own lost lines */
        uint64_t lost_client; /* events lost by falling behind, in total (STATS) */
} Shm;

#define SHM_NULL ((Shm){ .sock = -1, .ring_fd = -1, .page_fd = -1 })

/* Takes the reply's two fds from c (which must hold nothing after the reply: the socket carries
 * only frames now), checks and maps them, and places the reader at the reply's start. realtime:
 * the stream asked for "realtime" and gets the ring's clock records. Failures are printed; 0 or a
 * negative errno. From here on, a SIGBUS while the mappings are read ends the stream (tpd
 * truncates them when the stream ends or it drops the connection): the process takes SIGBUS
 * itself (shm.c's handler). */
int shm_setup(Shm *s, Connection *c, json_object *reply, bool realtime);
void shm_done(Shm *s);

/* Where a line of the stream goes: 0, or a negative errno that ends the reading. */
typedef int (*ShmLineFn)(void *userdata, const char *line, size_t n);

/* One step of reading: the lines published since the last step to fn, lost lines after a gap
 * included; once everything is read, a WAIT to tpd, and while one is out, its WAKE. last: a signal
 * ends the stream: the steps read up to the head the first of them saw, and ask tpd for nothing.
 * Returns LINES_SOURCE_MORE (read again), LINES_SOURCE_WAIT (poll s->sock, then step),
 * LINES_SOURCE_END (tpd ended the stream and the ring was read to its head, tpd truncated the
 * memory under a read (printed), or with last, the head was reached), or a negative errno: -EBADMSG
 * for a damaged ring or a frame that is no WAKE. */
int shm_step(Shm *s, ShmLineFn fn, void *userdata, bool last);

/* The stream to out as it comes, in large writes (copy_stream()'s results: 0 when tpd ended the
 * stream, -EPIPE when out's reader went away, another negative errno). */
int shm_copy(Shm *s, int out);

/* The stream through lines.c (lines_run()'s results). */
int shm_lines(Shm *s, int out, const LinesOptions *o);
