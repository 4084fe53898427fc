/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <errno.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "core/stream.h"
#include "message.h"
#include "shm.h"
#include "tpd-protocol.h"
#include "util.h"

/* Of the plain path: lines gather here and go out in writes this large. */
#define SHM_OUT_SIZE (1024U * 1024U)
/* How often a resync is tried at once while tpd keeps the ring's header moving. */
#define SHM_RESYNC_TRIES 16

/* tpd truncates the memory it handed over when the stream ends or it drops the connection
 * (shm_region_retire()), at any moment: a read of the mappings then faults with SIGBUS, whatever
 * sizes were checked before. Every read of them runs under shm_touch(), out of which the handler
 * jumps. */
static sigjmp_buf shm_fault_jump;
static volatile sig_atomic_t shm_fault_armed;

static void shm_on_fault(int sig) {
        if (shm_fault_armed) {
                shm_fault_armed = 0;
                siglongjmp(shm_fault_jump, 1);
        }
        /* Not a read of the mappings: a bug, which ends the process as it would have. */
        (void) signal(SIGBUS, SIG_DFL);
        (void) raise(SIGBUS);
}

static void shm_catch_faults(void) {
        /* SA_NODEFER: SIGBUS stays unblocked after the jump, which then need not restore the
         * signal mask (a syscall for every read). */
        struct sigaction sa = { .sa_handler = shm_on_fault, .sa_flags = SA_NODEFER };

        (void) sigaction(SIGBUS, &sa, NULL);
}

typedef int (*ShmTouchFn)(Shm *s, void *userdata);

/* Runs fn, which reads the mappings: its result, or -EFAULT when tpd truncated them under it. The
 * jump abandons fn at the read, never inside a library call, so fn must leave nothing there that
 * shm_done() cannot clean up. */
static int shm_touch(Shm *s, ShmTouchFn fn, void *userdata) {
        int r;

        if (sigsetjmp(shm_fault_jump, 0) != 0)
                return -EFAULT;
        shm_fault_armed = 1;
        __atomic_signal_fence(__ATOMIC_SEQ_CST);
        r = fn(s, userdata);
        __atomic_signal_fence(__ATOMIC_SEQ_CST);
        shm_fault_armed = 0;
        return r;
}

/* Maps size bytes of fd read-only, after checking that the file holds them: a mapping past its end
 * reads SIGBUS. */
static int shm_map(int fd, int64_t size, void **ret) {
        struct stat st;
        void *p;

        if (size <= 0 || (uint64_t) size > SIZE_MAX)
                return -EBADMSG;
        if (fstat(fd, &st) < 0)
                return -errno;
        if (st.st_size < size)
                return -EBADMSG;
        p = mmap(NULL, (size_t) size, PROT_READ, MAP_SHARED, fd, 0);
        if (p == MAP_FAILED)
                return -errno;
        *ret = p;
        return 0;
}

/* Takes fd index key.fd of the reply from c and maps key.size bytes of it. */
static int shm_take(Connection *c, json_object *reply, const char *key, int *ret_fd, void **ret_mem,
                    size_t *ret_size) {
        json_object *o;
        int64_t index, size;
        bool has_index, has_size;
        int r;

        if (!json_object_object_get_ex(reply, key, &o) || !json_object_is_type(o, json_type_object))
                return log_error_errno(-EBADMSG, "tpd's reply to a shared-memory stream has no '%s'", key);
        index = reply_int(o, "fd", &has_index);
        size = reply_int(o, "size", &has_size);
        if (!has_index || !has_size || index < 0 || index >= CONNECTION_FDS_MAX)
                return log_error_errno(-EBADMSG, "tpd's reply names no '%s' fd and size", key);
        *ret_fd = connection_take_fd(c, (size_t) index);
        if (*ret_fd < 0)
                return log_error_errno(-EBADMSG, "tpd's reply brought no '%s' fd", key);
        r = shm_map(*ret_fd, size, ret_mem);
        if (r == -EBADMSG)
                return log_error_errno(r, "the '%s' tpd handed over is smaller than its reply says", key);
        if (r < 0)
                return log_error_errno(r, "cannot map the '%s' tpd handed over: %m", key);
        *ret_size = (size_t) size;
        return 0;
}

static int shm_touch_init_ring(Shm *s, void *userdata) {
        return ring_reader_init(&s->r, s->ring, s->ring_size);
}

static int shm_touch_init_page(Shm *s, void *userdata) {
        return ring_page_reader_init(&s->pr, s->page, s->page_size, s->r.data_size);
}

int shm_setup(Shm *s, Connection *c, json_object *reply, bool realtime) {
        json_object *ring = NULL;
        int64_t start, start_seq;
        bool has_start, has_seq;
        int r;

        *s = SHM_NULL;
        s->sock = c->fd;
        s->realtime = realtime;
        if (varlink_buffer_pending(&c->in) > 0)
                return log_error_errno(-EBADMSG, "tpd sent stream data on a shared-memory stream");
        r = shm_take(c, reply, "ring", &s->ring_fd, &s->ring, &s->ring_size);
        if (r >= 0)
                r = shm_take(c, reply, "page", &s->page_fd, &s->page, &s->page_size);
        if (r < 0)
                return r;
        shm_catch_faults();
        (void) json_object_object_get_ex(reply, "ring", &ring);
        start = reply_int(ring, "start", &has_start);
        start_seq = reply_int(ring, "start_seq", &has_seq);
        if (!has_start || !has_seq || start < 0 || start_seq < 0 || start % RING_ALIGN != 0)
                return log_error_errno(-EBADMSG, "tpd's reply gives no start in the ring");

        r = shm_touch(s, shm_touch_init_ring, NULL);
        if (r == -EFAULT)
                return log_error_errno(r, "tpd took back the stream's shared memory at once");
        if (r == -EINVAL)
                return log_error_errno(-EBADMSG, "the memory tpd handed over holds no ring of version %d",
                                       RING_VERSION);
        if (r < 0)
                return log_oom();
        ring_reader_seek(&s->r, (uint64_t) start, (uint64_t) start_seq);
        r = shm_touch(s, shm_touch_init_page, NULL);
        if (r == -EFAULT)
                return log_error_errno(r, "tpd took back the stream's shared memory at once");
        if (r == -EINVAL)
                return log_error_errno(-EBADMSG,
                                       "the memory tpd handed over holds no reader page of version %d",
                                       RING_PAGE_VERSION);
        if (r < 0)
                return log_oom();
        ring_reader_set_page(&s->r, &s->pr);
        s->own = batch_new();
        if (!s->own)
                return log_oom();
        return 0;
}

void shm_done(Shm *s) {
        ring_reader_done(&s->r);
        ring_page_reader_done(&s->pr);
        if (s->ring)
                (void) munmap(s->ring, s->ring_size);
        if (s->page)
                (void) munmap(s->page, s->page_size);
        safe_close(s->ring_fd);
        safe_close(s->page_fd);
        batch_unref(s->own);
        *s = SHM_NULL;
}

/* Where ring_read() delivers to. */
typedef struct ShmOut {
        Shm *s;
        ShmLineFn fn;
        void *userdata;
} ShmOut;

/* A lost line of the stream's own count, byte for byte the one tpd writes. */
static int shm_lost_line(ShmOut *o, uint64_t ts, uint32_t cpu, uint64_t count, int kind) {
        Batch *b = o->s->own;
        int r;

        batch_reset(b);
        r = batch_add_lost(b, ts, cpu, count, kind);
        if (r == -EINVAL)
                return -EBADMSG; /* no cause of a loss */
        if (r < 0)
                return r;
        return o->fn(o->userdata, b->buf.data + b->records[0].offset, b->records[0].length);
}

static int shm_deliver(void *userdata, const RingItem *it) {
        ShmOut *o = userdata;

        /* Past the head seen when a signal came: not consumed, and the stream ends before it. */
        if (o->s->stopping && it->seq >= o->s->stop_seq)
                return -ECANCELED;
        /* Clock records are the ring's, for the streams that asked for them. */
        if (it->type == RING_CLOCK && !o->s->realtime)
                return 0;
        if (it->type == RING_LOST && !it->line)
                return shm_lost_line(o, it->ts, it->cpu, it->lost, it->kind);
        if (it->line_len == 0 || it->line[it->line_len - 1] != '\n')
                return -EBADMSG;
        return o->fn(o->userdata, it->line, it->line_len);
}

/* After the reader fell a ring behind: on at the newest publish, and a lost line for what the
 * stream selected in the gap, by CPU and cause in the order tpd reports losses. 1, 0 when the
 * ring never held still (the next step tries again), or a negative errno. */
static int shm_touch_resync(Shm *s, void *userdata) {
        int64_t *ret = userdata;

        *ret = ring_resync(&s->r, s->ring);
        return 0;
}

static int shm_resync(Shm *s, ShmOut *o) {
        int64_t k;

        for (unsigned i = 0;; i++) {
                int r = shm_touch(s, shm_touch_resync, &k);

                if (r < 0)
                        return r;
                if (k != -EAGAIN || i == SHM_RESYNC_TRIES)
                        break;
        }
        if (k == -EAGAIN)
                return 0;
        if (k < 0)
                return (int) k;
        for (uint32_t cpu = 0; cpu < s->pr.n_cpus; cpu++)
                for (size_t i = 0; i < STREAM_LOSS_KINDS; i++) {
                        int kind = stream_loss_order[i];
                        uint64_t n = s->pr.lost[(size_t) cpu * RING_PAGE_KINDS + kind];
                        int r;

                        if (n == 0)
                                continue;
                        if (kind == TPD_LOST_CLIENT)
                                s->lost_client += n;
                        r = shm_lost_line(o, s->pr.lost_ts[cpu], cpu, n, kind);
                        if (r < 0)
                                return r;
                }
        return 1;
}

/* ring_read()'s copy and check, the part that reads the ring. */
static int shm_touch_copy(Shm *s, void *userdata) {
        ring_copy(&s->r, s->ring);
        return ring_validate(&s->r, s->ring);
}

/* Reads what was published since the last read: 1 when the reader moved, 0 when nothing was new,
 * or a negative errno (-ECANCELED: at the head seen when a signal came). */
static int shm_read(Shm *s, ShmLineFn fn, void *userdata) {
        ShmOut o = { s, fn, userdata };
        uint64_t pos = s->r.pos;
        int k;

        k = shm_touch(s, shm_touch_copy, NULL);
        if (k == RING_READ_RESYNC)
                k = shm_resync(s, &o);
        else if (k == 0) {
                /* From the private copy: the mappings are not read. */
                k = ring_deliver(&s->r, shm_deliver, &o);
                if (k >= 0)
                        k = k > 0 || s->r.pos != pos;
        }
        if (k == -EBADMSG)
                return log_error_errno(k,
                                       "the ring tpd shares, or this stream's page of it, makes no sense");
        return k;
}

static int shm_touch_head(Shm *s, void *userdata) {
        uint64_t *ret = userdata;

        *ret = __atomic_load_n(&((const RingHeader *) s->ring)->head, __ATOMIC_ACQUIRE);
        return 0;
}

static int shm_touch_head_seq(Shm *s, void *userdata) {
        uint64_t *ret = userdata;

        *ret = __atomic_load_n(&((const RingHeader *) s->ring)->head_seq, __ATOMIC_ACQUIRE);
        return 0;
}

/* After tpd ended the stream: reads the ring up to the head it had then, one read per step (the
 * plain path writes out what a read copied before the next read copies over it). What tpd
 * published stays readable (the memfd lives while mapped), unless tpd retired the ring and cut it
 * short. */
static int shm_drain(Shm *s, ShmLineFn fn, void *userdata) {
        struct stat a, b;
        int k;

        if (!s->ended) {
                k = shm_touch(s, shm_touch_head, &s->end_head);
                if (k < 0)
                        return k;
                s->ended = true;
        }
        if (s->r.pos >= s->end_head || fstat(s->ring_fd, &a) < 0 || fstat(s->page_fd, &b) < 0 ||
            (size_t) a.st_size < s->ring_size || (size_t) b.st_size < s->page_size)
                return LINES_SOURCE_END;
        k = shm_read(s, fn, userdata);
        if (k < 0)
                return k;
        return k > 0 && s->r.pos < s->end_head ? LINES_SOURCE_MORE : LINES_SOURCE_END;
}

/* STATS (what this stream delivered and lost, for tpd's GetStatus), then WAIT. */
static int shm_send_wait(Shm *s) {
        struct {
                TpdStatsFrame stats;
                TpdSeqFrame wait;
        } f = {
                .stats = { .header = { .type = TPD_FRAME_STATS, .length = 2 * sizeof(uint64_t) },
                           .lost_client = s->lost_client },
                .wait = { .header = { .type = TPD_FRAME_WAIT, .length = sizeof(uint64_t) },
                          .seq = s->r.seq },
        };
        ssize_t n;

        _Static_assert(sizeof(f) == sizeof(TpdStatsFrame) + sizeof(TpdSeqFrame), "frames back to back");
        /* A resync counts the events it lost as got (ring_page_commit()): they are not delivered. */
        for (uint32_t cpu = 0; cpu < s->pr.n_cpus; cpu++)
                f.stats.delivered += s->pr.got[(size_t) cpu * RING_PAGE_KINDS];
        f.stats.delivered -= MIN(f.stats.delivered, s->lost_client);
        do
                n = send(s->sock, &f, sizeof(f), MSG_NOSIGNAL);
        while (n < 0 && errno == EINTR);
        if (n < 0)
                return -errno;
        /* 56 bytes into an empty socket buffer (one WAIT is out at most) go whole. */
        if ((size_t) n != sizeof(f))
                return -EIO;
        s->waiting = true;
        s->wait_seq = f.wait.seq;
        return 0;
}

/* Reads the WAKE that answers the WAIT, without waiting: 1 when it came, 0 when not yet, -ESHUTDOWN
 * when tpd ended the stream, -EBADMSG when tpd sent something else. */
static int shm_recv_wake(Shm *s) {
        TpdSeqFrame f;
        ssize_t n;

        n = recv(s->sock, s->frame + s->n_frame, sizeof(s->frame) - s->n_frame, MSG_DONTWAIT);
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
                return 0;
        if (n < 0 && errno == ECONNRESET)
                return -ESHUTDOWN;
        if (n < 0)
                return -errno;
        if (n == 0)
                return -ESHUTDOWN;
        s->n_frame += (size_t) n;
        if (s->n_frame < sizeof(s->frame))
                return 0;
        memcpy(&f, s->frame, sizeof(f));
        s->n_frame = 0;
        /* tpd answers a WAIT once the entry it names is published: with a head past it. */
        if (f.header.type != TPD_FRAME_WAKE || f.header.length != sizeof(uint64_t) || f.header.cpu != 0 ||
            f.header.arg != 0 || f.seq <= s->wait_seq)
                return log_error_errno(-EBADMSG,
                                       "tpd sent a frame that is no WAKE on a shared-memory stream");
        s->waiting = false;
        return 1;
}

/* After a signal: what was published before it, and nothing newer (tpd may publish faster than
 * tpctl reads), without a word to tpd. */
static int shm_finish(Shm *s, ShmLineFn fn, void *userdata) {
        int k;

        if (!s->stopping) {
                k = shm_touch(s, shm_touch_head_seq, &s->stop_seq);
                if (k < 0)
                        return k;
                s->stopping = true;
        }
        k = shm_read(s, fn, userdata);
        if (k == -ECANCELED)
                return LINES_SOURCE_END;
        if (k < 0)
                return k;
        return k > 0 ? LINES_SOURCE_MORE : LINES_SOURCE_END;
}

static int shm_step_one(Shm *s, ShmLineFn fn, void *userdata, bool last) {
        int k;

        if (s->ended)
                return shm_drain(s, fn, userdata);
        if (last)
                return shm_finish(s, fn, userdata);

        if (s->waiting) {
                k = shm_recv_wake(s);
                if (k == -ESHUTDOWN)
                        return shm_drain(s, fn, userdata);
                if (k <= 0)
                        return k;
        }
        k = shm_read(s, fn, userdata);
        if (k != 0)
                return k < 0 ? k : LINES_SOURCE_MORE;
        k = shm_send_wait(s);
        if (k == -EPIPE || k == -ECONNRESET)
                return shm_drain(s, fn, userdata);
        return k < 0 ? k : LINES_SOURCE_WAIT;
}

int shm_step(Shm *s, ShmLineFn fn, void *userdata, bool last) {
        int k;

        if (s->cut)
                return LINES_SOURCE_END;
        k = shm_step_one(s, fn, userdata, last);
        if (k != -EFAULT)
                return k;
        /* What the ring held past the reader is gone with it. */
        s->cut = true;
        log_error("tpd took back the stream's shared memory before tpctl had read all of it");
        return LINES_SOURCE_END;
}

/* The plain path's output: the lines as iovecs into the reader's private copy, valid until its
 * next copy, so that they are copied once on their way out (not at all to /dev/null); lines of
 * the stream's own (lost lines) go to a buffer of their own first. */
#define SHM_IOV_MAX 1024

typedef struct ShmWriter {
        int out;
        const Shm *s;
        struct iovec iov[SHM_IOV_MAX];
        size_t n_iov;
        char *own; /* SHM_OUT_SIZE */
        size_t own_len;
} ShmWriter;

static int writer_flush(ShmWriter *w) {
        struct iovec *v = w->iov;
        size_t n = w->n_iov;

        while (n > 0) {
                ssize_t k = writev(w->out, v, (int) n);

                if (k < 0 && errno == EINTR)
                        continue;
                if (k < 0 && errno == EAGAIN) {
                        /* A stdout left non-blocking by whoever set it up: wait, as copy.c does. */
                        struct pollfd pfd = { .fd = w->out, .events = POLLOUT };

                        if (poll(&pfd, 1, -1) < 0 && errno != EINTR)
                                return -errno;
                        continue;
                }
                if (k < 0)
                        return -errno;
                /* A short write (a pipe's reader took part): on from where it stopped. */
                while (n > 0 && (size_t) k >= v->iov_len) {
                        k -= (ssize_t) v->iov_len;
                        v++;
                        n--;
                }
                if (n > 0) {
                        v->iov_base = (char *) v->iov_base + k;
                        v->iov_len -= (size_t) k;
                }
        }
        w->n_iov = 0;
        w->own_len = 0;
        return 0;
}

static int writer_put(void *userdata, const char *line, size_t n) {
        ShmWriter *w = userdata;
        const char *copy = (const char *) w->s->r.buf;
        int r;

        if (w->n_iov == SHM_IOV_MAX ||
            (!(line >= copy && line < copy + w->s->r.buf_size) && w->own_len + n > SHM_OUT_SIZE)) {
                r = writer_flush(w);
                if (r < 0)
                        return r;
        }
        if (!(line >= copy && line < copy + w->s->r.buf_size)) {
                if (n > SHM_OUT_SIZE)
                        return write_all(w->out, line, n);
                memcpy(w->own + w->own_len, line, n);
                line = w->own + w->own_len;
                w->own_len += n;
        }
        w->iov[w->n_iov++] = (struct iovec){ .iov_base = (void *) line, .iov_len = n };
        return 0;
}

/* Waits until tpd sends something or ends the connection. */
static int shm_poll(Shm *s) {
        struct pollfd pfd = { .fd = s->sock, .events = POLLIN };

        if (poll(&pfd, 1, -1) < 0 && errno != EINTR)
                return -errno;
        return 0;
}

int shm_copy(Shm *s, int out) {
        _cleanup_free_ char *buf = malloc(SHM_OUT_SIZE);
        _cleanup_free_ ShmWriter *w = calloc(1, sizeof(ShmWriter));
        int k, r;

        if (!buf || !w)
                return -ENOMEM;
        w->out = out;
        w->s = s;
        w->own = buf;
        for (;;) {
                k = shm_step(s, writer_put, w, false);
                if (k < 0)
                        return k;
                /* Out before the next step copies over the lines, or waits. */
                r = writer_flush(w);
                if (r < 0)
                        return r;
                if (k == LINES_SOURCE_MORE)
                        continue;
                if (k == LINES_SOURCE_END)
                        return 0;
                k = shm_poll(s);
                if (k < 0)
                        return k;
        }
}

static int shm_feed(void *userdata, const char *line, size_t n) {
        return lines_feed(userdata, line, n);
}

static int shm_pull(void *userdata, Lines *l, bool last) {
        return shm_step(userdata, shm_feed, l, last);
}

int shm_lines(Shm *s, int out, const LinesOptions *o) {
        LinesSource src = { .fd = s->sock, .pull = shm_pull, .userdata = s };

        return lines_run(&src, out, o);
}
