/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#include "queue.h"
#include "util.h"

#define QUEUE_IOV_MAX 256U

void queue_done(Queue *q) {
        for (size_t i = 0; i < q->n; i++)
                batch_unref(q->entries[(q->head + i) % q->cap].batch);
        free(q->entries);
        *q = (Queue) {};
}

static QueueEntry *queue_tail(Queue *q) {
        return q->n > 0 ? &q->entries[(q->head + q->n - 1) % q->cap] : NULL;
}

static int queue_grow(Queue *q) {
        size_t cap = MAX(q->cap * 2, (size_t) 64);
        QueueEntry *e = malloc(cap * sizeof(QueueEntry));

        if (!e)
                return -ENOMEM;
        /* Unwrap the ring into the new array. */
        for (size_t i = 0; i < q->n; i++)
                e[i] = q->entries[(q->head + i) % q->cap];
        free(q->entries);
        q->entries = e;
        q->cap = cap;
        q->head = 0;
        return 0;
}

static int queue_append(Queue *q, QueueEntry entry) {
        int r;

        if (q->n == q->cap) {
                r = queue_grow(q);
                if (r < 0)
                        return r;
        }
        q->entries[(q->head + q->n) % q->cap] = entry;
        q->n++;
        q->bytes += entry.length;
        return 0;
}

int queue_push_batch(Queue *q, Batch *b, uint32_t offset, uint32_t length) {
        QueueEntry *tail = queue_tail(q);
        int r;

        if (tail && tail->batch == b && tail->offset + tail->length == offset) {
                tail->length += length;
                q->bytes += length;
                return 0;
        }
        r = queue_append(q, (QueueEntry) { .batch = b, .offset = offset, .length = length });
        if (r < 0)
                return r;
        batch_ref(b);
        return 0;
}

int queue_push_static(Queue *q, const char *text, size_t length) {
        return queue_append(q, (QueueEntry) { .ptr = text, .length = (uint32_t) length });
}

int queue_push_copy(Queue *q, const void *data, size_t length) {
        Batch *b = batch_new();
        int r;

        if (!b)
                return -ENOMEM;
        r = jsonbuf_reserve(&b->buf, length);
        if (r >= 0) {
                jsonbuf_put(&b->buf, data, length);
                r = queue_push_batch(q, b, 0, (uint32_t) length);
        }
        batch_unref(b);
        return r;
}

static const char *entry_data(const QueueEntry *e) {
        return e->batch ? e->batch->buf.data + e->offset : e->ptr;
}

int queue_write(Queue *q, int fd) {
        struct iovec iov[QUEUE_IOV_MAX];

        while (q->n > 0) {
                size_t n_iov = MIN(q->n, (size_t) QUEUE_IOV_MAX);
                ssize_t n;

                for (size_t i = 0; i < n_iov; i++) {
                        const QueueEntry *e = &q->entries[(q->head + i) % q->cap];
                        size_t skip = i == 0 ? q->head_written : 0;
                        iov[i] = (struct iovec) { (void *) (entry_data(e) + skip), e->length - skip };
                }

                n = writev(fd, iov, (int) n_iov);
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        if (errno == EAGAIN)
                                return 1;
                        return negative_errno();
                }

                q->bytes -= (size_t) n;
                while (n > 0) {
                        QueueEntry *e = &q->entries[q->head];
                        size_t left = e->length - q->head_written;

                        if ((size_t) n < left) {
                                q->head_written += (size_t) n;
                                break;
                        }
                        n -= (ssize_t) left;
                        batch_unref(e->batch);
                        q->head_written = 0;
                        q->head = (q->head + 1) % q->cap;
                        q->n--;
                }
        }
        return 0;
}
