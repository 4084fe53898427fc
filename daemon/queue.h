/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "encode.h"

/*
 * A client's output queue: slices of shared batches (and of static text), written with writev(2)
 * without copying. Slices that continue the previous one in the same batch are merged, so a stream
 * that takes every record costs one entry per batch.
 */

typedef struct QueueEntry {
        Batch *batch;    /* referenced; NULL for static text */
        const char *ptr; /* static text, when batch is NULL */
        uint32_t offset;
        uint32_t length;
} QueueEntry;

typedef struct Queue {
        QueueEntry *entries; /* ring */
        size_t head;
        size_t n;
        size_t cap;
        size_t bytes;        /* queued and not yet written */
        size_t head_written; /* bytes of the head entry already written */
} Queue;

void queue_done(Queue *q);
int queue_push_batch(Queue *q, Batch *b, uint32_t offset, uint32_t length);
int queue_push_static(Queue *q, const char *text, size_t length);
/* Copies data into a batch of its own and queues it. */
int queue_push_copy(Queue *q, const void *data, size_t length);
/* Writes as much as fd takes. Returns 0 when the queue is empty, 1 when fd would block with data
 * left, or a negative errno. */
int queue_write(Queue *q, int fd);

static inline bool queue_is_empty(const Queue *q) {
        return q->n == 0;
}
