/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "copy.h"
#include "util.h"

/* Larger pipes mean fewer splice() calls per MiB; 1 MiB is the default pipe-max-size for non-root. */
#define COPY_PIPE_SIZE (1024 * 1024)
#define COPY_BUFFER_SIZE (64U * 1024U)

static inline void close_pairp(int (*p)[2]) {
        safe_close((*p)[0]);
        safe_close((*p)[1]);
}

/* Moves n bytes that are already in a pipe to out with read() and write(). */
static int pipe_drain(int in, int out, size_t n, char *buf, size_t size) {
        while (n > 0) {
                ssize_t k = read(in, buf, n < size ? n : size);
                int r;

                if (k < 0 && errno == EINTR)
                        continue;
                if (k <= 0)
                        return k < 0 ? -errno : -EIO;
                r = write_all(out, buf, (size_t) k);
                if (r < 0)
                        return r;
                n -= (size_t) k;
        }
        return 0;
}

/*
 * Copies sock to out inside the kernel: directly when out is a pipe, else through a pipe of our own.
 * Returns 0 at end of stream, -EINVAL when splice() cannot serve these files (nothing is in flight
 * then, so the caller may go on with read/write), other negative errno on failure.
 */
static int copy_splice(int sock, int out, char *buf, size_t size) {
        _cleanup_(close_pairp) int pipefd[2] = { -1, -1 };
        struct stat st;
        int to = out;

        if (fstat(out, &st) < 0)
                return -errno;
        if (!S_ISFIFO(st.st_mode)) {
                if (pipe2(pipefd, O_CLOEXEC) < 0)
                        return -errno;
                (void) fcntl(pipefd[1], F_SETPIPE_SZ, COPY_PIPE_SIZE);
                to = pipefd[1];
        }

        for (;;) {
                struct pollfd in = { .fd = sock, .events = POLLIN };
                ssize_t n;

                /* Wait outside splice(): a splice() blocked on the socket holds the pipe's lock,
                 * and a reader of our stdout could not take what is already in the pipe. */
                if (poll(&in, 1, -1) < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                n = splice(sock, NULL, to, NULL, COPY_PIPE_SIZE, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0 && errno == EAGAIN) {
                        /* The socket had data, so the pipe is full: wait until the reader makes room. */
                        struct pollfd o = { .fd = to, .events = POLLOUT };
                        if (poll(&o, 1, -1) < 0 && errno != EINTR)
                                return -errno;
                        continue;
                }
                if (n < 0)
                        return -errno;
                if (n == 0)
                        return 0;

                while (to != out && n > 0) {
                        ssize_t k = splice(pipefd[0], NULL, out, NULL, (size_t) n, SPLICE_F_MOVE);

                        if (k < 0 && errno == EINTR)
                                continue;
                        if (k < 0 && errno == EINVAL) {
                                /* out takes no splice (a tty, an O_APPEND file): what is already in
                                 * our pipe must still get out, in order, before falling back. */
                                int r = pipe_drain(pipefd[0], out, (size_t) n, buf, size);

                                return r < 0 ? r : -EINVAL;
                        }
                        if (k < 0)
                                return -errno;
                        n -= k;
                }
        }
}

static int copy_read_write(int sock, int out, char *buf, size_t size) {
        for (;;) {
                ssize_t n = read(sock, buf, size);
                int r;

                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0)
                        return n < 0 ? -errno : 0;
                r = write_all(out, buf, (size_t) n);
                if (r < 0)
                        return r;
        }
}

int copy_stream(int sock, int out, const char *head, size_t head_len) {
        _cleanup_free_ char *buf = malloc(COPY_BUFFER_SIZE);
        int r;

        if (!buf)
                return -ENOMEM;
        r = write_all(out, head, head_len);
        if (r >= 0)
                r = copy_splice(sock, out, buf, COPY_BUFFER_SIZE);
        if (r == -EINVAL)
                r = copy_read_write(sock, out, buf, COPY_BUFFER_SIZE);
        return r;
}
