/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/encode.h"

/*
 * A client's output queue: slices of shared batches (and of static text), written with writev(2)
 * without copying. Slices that continue the previous one in the same batch are merged, so a stream
 * that takes every record costs one entry per batch.
 *
 * The queue is charged for the memory it keeps alive, not for the bytes it will write: a slice of a
 * shared batch keeps the whole batch allocated, so the first slice of a batch charges the batch's
 * memory, and the charge is released when the last slice of that run has been written. Slices of a
 * buffer the stream owns (queue_push_own) charge their length.
 *
 * An entry can carry file descriptors (a reply that hands memory over): they go out by sendmsg(2)
 * as one SCM_RIGHTS message with the entry's first byte, in a write of that entry alone, so the
 * reader knows which message they came with; then the queue closes its copies.
 */

#define QUEUE_FDS_MAX 2

typedef struct QueueEntry {
        Batch *batch;    /* referenced; NULL for static text */
        const char *ptr; /* static text, when batch is NULL */
        uint32_t offset;
        uint32_t length;
        size_t charge; /* memory released when this entry has been written */
} QueueEntry;

/* The fds of one entry. Rare, so kept beside the ring rather than in every entry. */
typedef struct QueueFds {
        size_t pos; /* the entry's position counted from the first entry ever queued */
        int fds[QUEUE_FDS_MAX];
        size_t n_fds;
} QueueFds;

typedef struct Queue {
        QueueEntry *entries; /* ring */
        size_t head;
        size_t n;
        size_t cap;
        size_t bytes;        /* queued and not yet written */
        size_t head_written; /* bytes of the head entry already written */
        size_t held;         /* memory charged (see above) */
        /* The batch of the last shared slice, and that entry's position counted from the first
         * entry ever queued: its charge moves along as the run of that batch grows. */
        Batch *run_batch;
        size_t run_tail;
        size_t popped;     /* entries written and released so far */
        QueueFds *fd_sets; /* fds not yet sent, in entry order */
        size_t n_fd_sets;
} Queue;

void queue_done(Queue *q);
int queue_push_batch(Queue *q, Batch *b, uint32_t offset, uint32_t length);
/* Queues a slice of a batch that only the caller's stream fills: charged its length. */
int queue_push_own(Queue *q, Batch *b, uint32_t offset, uint32_t length);
int queue_push_static(Queue *q, const char *text, size_t length);
/* Makes room for n more entries, so that the next n pushes cannot fail. */
int queue_reserve(Queue *q, size_t n);
/* The memory a slice of b would add to the queue's charge. */
size_t queue_charge_for(const Queue *q, const Batch *b);
/* Adds n bytes to the charge of the last entry if it is a slice of b (memory of b that lives as
 * long as that slice); else does nothing. */
void queue_charge_tail(Queue *q, const Batch *b, size_t n);
/* Queues malloc()ed text, taking it over (also on failure) as the buffer of a batch of its own. */
int queue_push_text(Queue *q, char *text, size_t length);
/* As queue_push_text(), with n_fds (at most QUEUE_FDS_MAX) fds that go with the text's first byte;
 * takes the fds over too (also on failure). */
int queue_push_text_fds(Queue *q, char *text, size_t length, const int *fds, size_t n_fds);
/* Copies data into a batch of its own and queues it. */
int queue_push_copy(Queue *q, const void *data, size_t length);
/* Writes as much as fd takes (a socket, once fds are queued). Returns 0 when the queue is empty, 1 when fd
 * would block with data left, or a negative errno. */
int queue_write(Queue *q, int fd);

static inline bool queue_is_empty(const Queue *q) {
        return q->n == 0;
}
