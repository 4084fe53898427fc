/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "core/queue.h"
#include "util.h"

#define QUEUE_IOV_MAX 256U

static void queue_fds_close(QueueFds *set) {
        for (size_t i = 0; i < set->n_fds; i++)
                safe_close(set->fds[i]);
}

void queue_done(Queue *q) {
        for (size_t i = 0; i < q->n; i++)
                batch_unref(q->entries[(q->head + i) % q->cap].batch);
        free(q->entries);
        for (size_t i = 0; i < q->n_fd_sets; i++)
                queue_fds_close(&q->fd_sets[i]);
        free(q->fd_sets);
        *q = (Queue){};
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

int queue_reserve(Queue *q, size_t n) {
        while (q->cap - q->n < n) {
                int r = queue_grow(q);
                if (r < 0)
                        return r;
        }
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
        q->held += entry.charge;
        return 0;
}

/* The entry at absolute position pos, if it is still queued. */
static QueueEntry *queue_at(Queue *q, size_t pos) {
        if (pos < q->popped || pos - q->popped >= q->n)
                return NULL;
        return &q->entries[(q->head + (pos - q->popped)) % q->cap];
}

size_t queue_charge_for(const Queue *q, const Batch *b) {
        if (q->run_batch == b && q->run_tail >= q->popped && q->run_tail - q->popped < q->n)
                return 0;
        return batch_memory(b);
}

int queue_push_batch(Queue *q, Batch *b, uint32_t offset, uint32_t length) {
        QueueEntry *tail = queue_tail(q), *run;
        size_t charge;
        int r;

        if (tail && tail->batch == b && tail->offset + tail->length == offset) {
                tail->length += length;
                q->bytes += length;
                return 0;
        }

        /* A batch already charged to this queue is not charged again: its charge moves to the
         * new last slice, so it is released only when the batch is no longer referenced here. */
        run = q->run_batch == b ? queue_at(q, q->run_tail) : NULL;
        charge = run ? run->charge : batch_memory(b);
        r = queue_append(q,
                         (QueueEntry){ .batch = b, .offset = offset, .length = length, .charge = charge });
        if (r < 0)
                return r;
        if (run) {
                /* Looked up again: the append may have moved the ring. */
                run = queue_at(q, q->run_tail);
                run->charge = 0;
                q->held -= charge;
        }
        q->run_batch = b;
        q->run_tail = q->popped + q->n - 1;
        batch_ref(b);
        return 0;
}

int queue_push_own(Queue *q, Batch *b, uint32_t offset, uint32_t length) {
        QueueEntry *tail = queue_tail(q);
        int r;

        if (tail && tail->batch == b && tail->offset + tail->length == offset) {
                tail->length += length;
                tail->charge += length;
                q->bytes += length;
                q->held += length;
                return 0;
        }
        r = queue_append(q,
                         (QueueEntry){ .batch = b, .offset = offset, .length = length, .charge = length });
        if (r < 0)
                return r;
        batch_ref(b);
        return 0;
}

void queue_charge_tail(Queue *q, const Batch *b, size_t n) {
        QueueEntry *tail = queue_tail(q);

        if (!tail || tail->batch != b)
                return;
        tail->charge += n;
        q->held += n;
}

int queue_push_static(Queue *q, const char *text, size_t length) {
        /* Static text costs nothing but its entry. */
        return queue_append(
                q, (QueueEntry){ .ptr = text, .length = (uint32_t) length, .charge = sizeof(QueueEntry) });
}

int queue_push_text(Queue *q, char *text, size_t length) {
        Batch *b = batch_new();
        int r;

        if (!b) {
                free(text);
                return -ENOMEM;
        }
        /* The text becomes the batch's buffer: a reply is copied only by the serialiser. */
        b->buf = (JsonBuf){ .data = text, .len = length, .cap = length };
        r = queue_push_batch(q, b, 0, (uint32_t) length);
        batch_unref(b);
        return r;
}

int queue_push_text_fds(Queue *q, char *text, size_t length, const int *fds, size_t n_fds) {
        QueueFds set = { .n_fds = n_fds }, *sets;
        QueueEntry *tail;
        int r;

        if (n_fds == 0)
                return queue_push_text(q, text, length);
        /* Fds need a byte to travel with. */
        if (n_fds > QUEUE_FDS_MAX || length == 0) {
                r = -EINVAL;
                goto fail;
        }
        memcpy(set.fds, fds, n_fds * sizeof(int));
        sets = reallocarray(q->fd_sets, q->n_fd_sets + 1, sizeof(QueueFds));
        if (!sets) {
                r = -ENOMEM;
                goto fail;
        }
        q->fd_sets = sets;
        r = queue_push_text(q, TAKE_PTR(text), length);
        if (r < 0)
                goto fail;

        /* A batch of its own: never merged into an earlier entry, so the text starts the new tail. */
        tail = queue_tail(q);
        set.pos = q->popped + q->n - 1;
        q->fd_sets[q->n_fd_sets++] = set;
        tail->charge += sizeof(QueueFds);
        q->held += sizeof(QueueFds);
        return 0;

fail:
        free(text);
        for (size_t i = 0; i < n_fds; i++)
                safe_close(fds[i]);
        return r;
}

int queue_push_copy(Queue *q, const void *data, size_t length) {
        char *text = malloc(MAX(length, (size_t) 1));

        if (!text)
                return -ENOMEM;
        memcpy(text, data, length);
        return queue_push_text(q, text, length);
}

static const char *entry_data(const QueueEntry *e) {
        return e->batch ? e->batch->buf.data + e->offset : e->ptr;
}

/* Writes the head entry, not yet started, with its fds; closes them once they went out. */
static ssize_t queue_send_fds(Queue *q, int fd, struct iovec *iov) {
        QueueFds *set = &q->fd_sets[0];
        union {
                struct cmsghdr cmsg;
                char buf[CMSG_SPACE(sizeof(int) * QUEUE_FDS_MAX)];
        } control = {};
        struct msghdr mh = {
                .msg_iov = iov,
                .msg_iovlen = 1,
                .msg_control = &control,
                .msg_controllen = CMSG_SPACE(sizeof(int) * set->n_fds),
        };
        struct cmsghdr *cmsg = CMSG_FIRSTHDR(&mh);
        ssize_t n;

        cmsg->cmsg_level = SOL_SOCKET;
        cmsg->cmsg_type = SCM_RIGHTS;
        cmsg->cmsg_len = CMSG_LEN(sizeof(int) * set->n_fds);
        memcpy(CMSG_DATA(cmsg), set->fds, sizeof(int) * set->n_fds);

        n = sendmsg(fd, &mh, MSG_NOSIGNAL);
        if (n <= 0)
                return n;
        /* The fds went with the first bytes, even when the rest of the entry did not. */
        queue_fds_close(set);
        q->n_fd_sets--;
        memmove(q->fd_sets, q->fd_sets + 1, q->n_fd_sets * sizeof(QueueFds));
        return n;
}

int queue_write(Queue *q, int fd) {
        struct iovec iov[QUEUE_IOV_MAX];

        while (q->n > 0) {
                size_t n_iov = MIN(q->n, (size_t) QUEUE_IOV_MAX);
                bool with_fds = false;
                ssize_t n;

                /* An entry with fds starts a write of its own, and ends it: the fds belong to it. */
                if (q->n_fd_sets > 0) {
                        size_t k = q->fd_sets[0].pos - q->popped;

                        with_fds = k == 0;
                        n_iov = with_fds ? 1 : MIN(n_iov, k);
                }

                for (size_t i = 0; i < n_iov; i++) {
                        const QueueEntry *e = &q->entries[(q->head + i) % q->cap];
                        size_t skip = i == 0 ? q->head_written : 0;
                        iov[i] = (struct iovec){ (void *) (entry_data(e) + skip), e->length - skip };
                }

                n = with_fds ? queue_send_fds(q, fd, iov) : writev(fd, iov, (int) n_iov);
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
                        q->held -= e->charge;
                        q->head_written = 0;
                        q->head = (q->head + 1) % q->cap;
                        q->n--;
                        q->popped++;
                }
        }
        return 0;
}
