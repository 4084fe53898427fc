/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Fds that travel with a queued reply (queue_push_text_fds()): over a real socketpair() with a
 * small send buffer, so that writes stop inside entries, each fd arrives exactly once, in the read
 * that carries its reply's first byte, refers to the file that was queued, and the queue's copy is
 * closed once sent. Also closed: fds of an entry never sent (queue freed, peer gone) and of a push
 * that fails. Entries without fds around them go out as before, more than one writev takes.
 */

#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/encode.h"
#include "core/queue.h"
#include "tpd-test.h"

typedef struct Sent {
        size_t offset; /* of the reply's first byte in the stream */
        ino_t ino[QUEUE_FDS_MAX];
        int fds[QUEUE_FDS_MAX];
        size_t n_fds;
        size_t n_arrived; /* sets of fds received for this reply */
        size_t pos;       /* of its entry in the queue */
        bool cut;         /* a write stopped inside it */
} Sent;

static ino_t inode_of(int fd) {
        struct stat st;

        ASSERT(fstat(fd, &st) == 0);
        return st.st_ino;
}

static bool is_closed(int fd) {
        return fcntl(fd, F_GETFD) < 0 && errno == EBADF;
}

static int new_memfd(void) {
        int fd = memfd_create("queue-fds", MFD_CLOEXEC);

        ASSERT(fd >= 0);
        return fd;
}

static char *text_of(char c, size_t length) {
        char *t = malloc(length);

        ASSERT(t);
        memset(t, c, length);
        return t;
}

/* Reads what waits on fd with recvmsg(); fds that came along must be those of a reply whose first
 * byte is in that read. */
static void receive(int fd, JsonBuf *got, Sent *sent, size_t n_sent) {
        for (;;) {
                union {
                        struct cmsghdr cmsg;
                        char buf[CMSG_SPACE(sizeof(int) * QUEUE_FDS_MAX)];
                } control = {};
                struct iovec iov;
                struct msghdr mh = { .msg_iov = &iov,
                                     .msg_iovlen = 1,
                                     .msg_control = &control,
                                     .msg_controllen = sizeof(control) };
                struct cmsghdr *cmsg;
                size_t start = got->len;
                ssize_t n;

                ASSERT_INT_EQ(jsonbuf_reserve(got, 65536), 0);
                iov = (struct iovec){ got->data + got->len, 65536 };
                n = recvmsg(fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
                if (n < 0 && errno == EAGAIN)
                        return;
                ASSERT(n > 0);
                ASSERT(!(mh.msg_flags & MSG_CTRUNC));
                got->len += (size_t) n;

                cmsg = CMSG_FIRSTHDR(&mh);
                if (!cmsg)
                        continue;
                ASSERT(cmsg->cmsg_level == SOL_SOCKET && cmsg->cmsg_type == SCM_RIGHTS);
                ASSERT(!CMSG_NXTHDR(&mh, cmsg));

                size_t n_fds = (cmsg->cmsg_len - CMSG_LEN(0)) / sizeof(int);
                int fds[QUEUE_FDS_MAX];
                bool matched = false;

                memcpy(fds, CMSG_DATA(cmsg), n_fds * sizeof(int));
                for (size_t i = 0; i < n_sent; i++) {
                        Sent *s = &sent[i];

                        if (s->offset < start || s->offset >= got->len)
                                continue;
                        ASSERT(!matched);
                        matched = true;
                        ASSERT_INT_EQ(n_fds, s->n_fds);
                        for (size_t j = 0; j < n_fds; j++)
                                ASSERT(inode_of(fds[j]) == s->ino[j]);
                        s->n_arrived++;
                }
                ASSERT(matched);
                for (size_t j = 0; j < n_fds; j++)
                        close(fds[j]);
        }
}

/* Replies with and without fds among static entries, written in many partial writes. */
static void test_partial_writes(void) {
        static char statics[600][17];
        int sndbuf = 4096, pair[2];
        JsonBuf want = {}, got = {};
        Sent sent[3] = {};
        Queue q = {};
        int r, blocked = 0;

        ASSERT(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, pair) == 0);
        ASSERT(setsockopt(pair[0], SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf)) == 0);
        ASSERT_INT_EQ(jsonbuf_reserve(&want, 1 << 20), 0);

        for (size_t i = 0; i < 3; i++) {
                int p[2];

                /* More entries than one writev takes before the first reply with fds; replies
                 * larger than the send buffer; two replies with fds one after the other. */
                for (size_t k = 0; k < (i == 0 ? 300 : i == 1 ? 20 : 0); k++) {
                        char *t = statics[i * 300 + k];
                        snprintf(t, 17, "entry %09zu\n", i * 300 + k);
                        ASSERT_INT_EQ(queue_push_static(&q, t, 16), 0);
                        jsonbuf_put(&want, t, 16);
                }
                ASSERT(pipe2(p, O_CLOEXEC) == 0);
                sent[i].fds[0] = new_memfd();
                sent[i].fds[1] = p[0];
                sent[i].n_fds = i == 2 ? 1 : 2;
                if (i == 2)
                        close(p[0]);
                close(p[1]);
                for (size_t j = 0; j < sent[i].n_fds; j++)
                        sent[i].ino[j] = inode_of(sent[i].fds[j]);
                sent[i].offset = want.len;

                size_t length = 30000 + i * 3000;
                char *text = text_of((char) ('a' + i), length);
                jsonbuf_put(&want, text, length);
                ASSERT_INT_EQ(queue_push_text_fds(&q, text, length, sent[i].fds, sent[i].n_fds), 0);
                sent[i].pos = q.popped + q.n - 1;
        }
        ASSERT_INT_EQ(q.n_fd_sets, 3);
        ASSERT_INT_EQ(queue_push_copy(&q, "tail", 4), 0);
        jsonbuf_put(&want, "tail", 4);

        while ((r = queue_write(&q, pair[0])) == 1) {
                blocked++;
                for (size_t i = 0; i < 3; i++)
                        sent[i].cut |= q.popped == sent[i].pos && q.head_written > 0;
                /* Checked before the receiver installs fds that may reuse the numbers. */
                for (size_t i = 0; i < 3 - q.n_fd_sets; i++)
                        for (size_t j = 0; j < sent[i].n_fds; j++)
                                ASSERT(is_closed(sent[i].fds[j]));
                for (size_t i = 3 - q.n_fd_sets; i < 3; i++)
                        for (size_t j = 0; j < sent[i].n_fds; j++)
                                ASSERT(!is_closed(sent[i].fds[j]));
                receive(pair[1], &got, sent, 3);
        }
        ASSERT_INT_EQ(r, 0);
        ASSERT(blocked > 5);
        ASSERT_INT_EQ(q.n_fd_sets, 0);
        ASSERT_INT_EQ(q.held, 0);
        for (size_t i = 0; i < 3; i++)
                for (size_t j = 0; j < sent[i].n_fds; j++)
                        ASSERT(is_closed(sent[i].fds[j]));
        receive(pair[1], &got, sent, 3);
        ASSERT_MEM_EQ(got.data, got.len, want.data, want.len);
        for (size_t i = 0; i < 3; i++) {
                ASSERT_INT_EQ(sent[i].n_arrived, 1);
                ASSERT(sent[i].cut);
        }

        queue_done(&q);
        jsonbuf_done(&want);
        jsonbuf_done(&got);
        close(pair[0]);
        close(pair[1]);
}

/* The charge of a reply with fds: its batch and the fds' record, released once written. */
static void test_charge(void) {
        int pair[2], fd = new_memfd();
        Queue q = {};
        char buf[64];

        ASSERT(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, pair) == 0);
        ASSERT_INT_EQ(queue_push_text_fds(&q, text_of('x', 10), 10, &fd, 1), 0);
        ASSERT(q.held > sizeof(QueueFds));
        ASSERT_INT_EQ(q.bytes, 10);
        ASSERT_INT_EQ(queue_write(&q, pair[0]), 0);
        ASSERT_INT_EQ(q.held, 0);
        ASSERT(is_closed(fd));
        /* Read without room for fds: the kernel drops them. */
        ASSERT_INT_EQ(read(pair[1], buf, sizeof(buf)), 10);
        queue_done(&q);
        close(pair[0]);
        close(pair[1]);
}

/* Fds never sent are closed: the queue freed with the entry waiting behind a full socket, or at
 * its head; a peer that went away; a push that fails. */
static void test_unsent(void) {
        struct sigaction sa = { .sa_handler = SIG_IGN }, old;
        int sndbuf = 4096, pair[2], fds[3];
        Queue q = {};

        ASSERT(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, pair) == 0);
        ASSERT(setsockopt(pair[0], SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf)) == 0);

        fds[0] = new_memfd();
        ASSERT_INT_EQ(queue_push_text(&q, text_of('a', 1 << 20), 1 << 20), 0);
        ASSERT_INT_EQ(queue_push_text_fds(&q, text_of('b', 10), 10, fds, 1), 0);
        ASSERT_INT_EQ(queue_write(&q, pair[0]), 1);
        ASSERT(!is_closed(fds[0]));
        queue_done(&q);
        ASSERT(is_closed(fds[0]));
        ASSERT(q.fd_sets == NULL && q.n_fd_sets == 0);

        /* At the head, the socket full. */
        fds[0] = new_memfd();
        fds[1] = new_memfd();
        ASSERT_INT_EQ(queue_push_text_fds(&q, text_of('c', 10), 10, fds, 2), 0);
        ASSERT_INT_EQ(queue_write(&q, pair[0]), 1);
        ASSERT(!is_closed(fds[0]) && !is_closed(fds[1]));
        queue_done(&q);
        ASSERT(is_closed(fds[0]) && is_closed(fds[1]));

        /* The peer went away: an error, the fds still the queue's until it is freed. */
        ASSERT(sigaction(SIGPIPE, &sa, &old) == 0);
        close(pair[1]);
        fds[0] = new_memfd();
        ASSERT_INT_EQ(queue_push_text_fds(&q, text_of('d', 10), 10, fds, 1), 0);
        ASSERT_INT_EQ(queue_write(&q, pair[0]), -EPIPE);
        ASSERT(!is_closed(fds[0]));
        queue_done(&q);
        ASSERT(is_closed(fds[0]));
        ASSERT(sigaction(SIGPIPE, &old, NULL) == 0);
        close(pair[0]);

        /* Refused pushes take the text and the fds too. */
        for (size_t i = 0; i < 3; i++)
                fds[i] = new_memfd();
        ASSERT_INT_EQ(queue_push_text_fds(&q, text_of('e', 10), 10, fds, 3), -EINVAL);
        ASSERT(is_closed(fds[0]) && is_closed(fds[1]) && is_closed(fds[2]));
        fds[0] = new_memfd();
        ASSERT_INT_EQ(queue_push_text_fds(&q, NULL, 0, fds, 1), -EINVAL);
        ASSERT(is_closed(fds[0]));
        ASSERT(queue_is_empty(&q));
        queue_done(&q);
}

int main(void) {
        test_partial_writes();
        test_charge();
        test_unsent();
        return 0;
}
