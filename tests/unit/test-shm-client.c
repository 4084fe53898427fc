/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * tpctl's reader of a shared-memory stream (client/shm.c) against a stand-in for tpd: a memfd ring
 * and reader page written with core's writer, handed over read-only, and a thread on the other end
 * of a socketpair() that publishes a batch for each WAIT and answers it with a WAKE. The lines
 * written are the ones published and selected, in order (notices always, clock records only with
 * realtime); a reader a ring behind writes lost lines that make delivered + lost == selected per
 * CPU; tpd's end drains the ring; a frame that is no WAKE and a damaged ring end with an error;
 * memory truncated under a read ends the stream without SIGBUS; after a signal, nothing published
 * later is read.
 */

#include <pthread.h>
#include <sys/mman.h>
#include <sys/socket.h>

#include "core/ring.h"
#include "linereader.h"
#include "shm.h"
#include "tpd-protocol.h"
#include "tpd-test.h"

#define N_CPUS 2
#define BATCHES 40
#define PER_BATCH 12
#define BASE 1000000 /* the kernel's overrun counter at the stream's start */
#define NOTICE "{\"ts\":1,\"notice\":\"n\"}\n"
#define CLOCK "{\"ts\":2,\"clock\":\"boot\",\"realtime_offset_ns\":7}\n"

typedef enum Mode {
        MODE_WAKE,    /* a batch for each WAIT, then the end */
        MODE_CLOSE,   /* the end at once */
        MODE_GARBAGE, /* a frame that is no WAKE */
} Mode;

typedef struct Tpd {
        uint64_t data_size;
        int ring_fd, page_fd;
        void *ring, *page;
        size_t ring_size, page_size;
        RingWriter w;
        RingPageWriter pw;
        const Batch *b; /* being published; NULL: notices and clock records */
        StreamCount c;  /* what the stream takes of it */
        uint32_t index[PER_BATCH + 1];
        uint64_t count[PER_BATCH + 1];
        unsigned next;         /* batches published */
        JsonBuf want, want_rt; /* without and with clock records */
        uint64_t selected[N_CPUS], lost_share[N_CPUS];
        int sock; /* tpd's end */
        Mode mode;
        pthread_t thread;
} Tpd;

static void on_publish(void *userdata, const RingPublish *p) {
        Tpd *t = userdata;

        ring_page_publish(&t->pw, p, t->b, t->b ? &t->c : NULL);
}

static void put(JsonBuf *out, const char *p, size_t n) {
        ASSERT_INT_EQ(jsonbuf_reserve(out, n), 0);
        jsonbuf_put(out, p, n);
}

static int memfd_sized(size_t size, void **ret) {
        int fd = memfd_create("test-shm-client", MFD_CLOEXEC);

        ASSERT(fd >= 0);
        ASSERT_INT_EQ(ftruncate(fd, (off_t) size), 0);
        *ret = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        ASSERT(*ret != MAP_FAILED);
        return fd;
}

static void tpd_init(Tpd *t, uint64_t data_size, Mode mode) {
        *t = (Tpd){ .data_size = data_size, .mode = mode };
        t->ring_size = ring_mapping_size(data_size);
        t->page_size = ring_page_size(N_CPUS, data_size, false);
        t->ring_fd = memfd_sized(t->ring_size, &t->ring);
        t->page_fd = memfd_sized(t->page_size, &t->page);
        ASSERT_INT_EQ(ring_writer_init(&t->w, t->ring, t->ring_size, 0, N_CPUS, 0), 0);
        ASSERT_INT_EQ(ring_page_writer_init(&t->pw, t->page, t->page_size, N_CPUS, data_size, false), 0);
        for (unsigned cpu = 0; cpu < N_CPUS; cpu++)
                ring_page_set_base(&t->pw, cpu, BASE, 0);
        t->w.on_publish = on_publish;
        t->w.userdata = t;
}

/* Batch k: events of CPU k % 2, every third left out, and a loss of which the stream gets 2 of 5
 * (its own line) or all 5 (the ring's); then a notice and a clock record. */
static void tpd_publish(Tpd *t) {
        static const RingItem extra[] = {
                { .type = RING_NOTICE, .line = NOTICE, .line_len = sizeof(NOTICE) - 1 },
                { .type = RING_CLOCK, .line = CLOCK, .line_len = sizeof(CLOCK) - 1 },
        };
        unsigned k = t->next++, cpu = k % N_CPUS;
        Batch *b = batch_new();
        uint64_t share = k % 2 ? 2 : 5;
        char line[128];

        ASSERT(b);
        t->c = (StreamCount){ .index = t->index, .count = t->count };
        for (unsigned i = 0; i < PER_BATCH; i++) {
                int n = snprintf(line, sizeof(line), "{\"ts\":%u,\"cpu\":%u,\"event\":\"t:e\",\"n\":%u}\n",
                                 1000 * k + i, cpu, i);
                Record *r;

                ASSERT_INT_EQ(jsonbuf_reserve(&b->buf, (size_t) n), 0);
                r = batch_add_record(b);
                ASSERT(r);
                *r = (Record){ .ts = 1000 * k + i,
                               .offset = (uint32_t) b->buf.len,
                               .length = (uint32_t) n,
                               .cpu = cpu,
                               .event_id = 1,
                               .kind = RECORD_EVENT };
                jsonbuf_put(&b->buf, line, (size_t) n);
                if (i % 3 == 0)
                        continue;
                t->index[t->c.n] = i;
                t->count[t->c.n++] = 1;
                put(&t->want, line, (size_t) n);
                put(&t->want_rt, line, (size_t) n);
                t->selected[cpu]++;
        }
        /* The stream's base cuts an odd batch's loss to its last 2. */
        ASSERT_INT_EQ(batch_add_lost(b, 1000 * k + 999, cpu, 5, TPD_LOST_OVERRUN), 0);
        b->records[PER_BATCH].lost_base = k % 2 ? BASE - 3 : BASE + 5 * k;
        t->index[t->c.n] = PER_BATCH;
        t->count[t->c.n++] = share;
        t->lost_share[cpu] += share;
        {
                Batch *own = batch_new();

                ASSERT(own);
                ASSERT_INT_EQ(batch_add_lost(own, 1000 * k + 999, cpu, share, TPD_LOST_OVERRUN), 0);
                put(&t->want, own->buf.data, own->buf.len);
                put(&t->want_rt, own->buf.data, own->buf.len);
                batch_unref(own);
        }
        b->plain_end = b->buf.len;
        t->b = b;
        ASSERT_INT_EQ(ring_append_batch(&t->w, b, NULL), PER_BATCH + 1);
        t->b = NULL;
        ASSERT_INT_EQ(ring_append(&t->w, extra, 2, NULL), 2);
        put(&t->want, extra[0].line, extra[0].line_len);
        put(&t->want_rt, extra[0].line, extra[0].line_len);
        put(&t->want_rt, extra[1].line, extra[1].line_len);
        batch_unref(b);
}

/* The other end of the socket: WAITs answered as the mode says; each comes after a STATS frame,
 * whose counts never go back. */
static void *tpd_run(void *userdata) {
        Tpd *t = userdata;
        TpdStatsFrame st;
        TpdSeqFrame f;
        uint64_t delivered = 0;

        while (t->mode != MODE_CLOSE && recv(t->sock, &st, sizeof(st), MSG_WAITALL) == sizeof(st) &&
               recv(t->sock, &f, sizeof(f), MSG_WAITALL) == sizeof(f)) {
                ASSERT_INT_EQ(st.header.type, TPD_FRAME_STATS);
                ASSERT_INT_EQ(st.header.length, 16);
                ASSERT(st.delivered >= delivered);
                delivered = st.delivered;
                ASSERT_INT_EQ(f.header.type, TPD_FRAME_WAIT);
                ASSERT_INT_EQ(f.header.length, 8);
                ASSERT_U64_EQ(f.seq, t->w.head_seq);
                if (t->mode == MODE_WAKE && t->next == BATCHES)
                        break;
                if (t->mode == MODE_WAKE)
                        tpd_publish(t);
                f.header.type = t->mode == MODE_GARBAGE ? 99 : TPD_FRAME_WAKE;
                f.seq = t->w.head_seq;
                ASSERT_INT_EQ(send(t->sock, &f, sizeof(f), MSG_NOSIGNAL), sizeof(f));
        }
        close(t->sock);
        return NULL;
}

/* The reader's side: the fds read-only, as tpd hands them over, and the reply naming them. */
static void client_open(Tpd *t, Shm *s, Connection *c, bool realtime, uint64_t start, uint64_t start_seq) {
        int pair[2];
        char path[64], reply[256];
        json_object *o;

        ASSERT_INT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair), 0);
        *c = CONNECTION_NULL;
        c->fd = pair[0];
        t->sock = pair[1];
        snprintf(path, sizeof(path), "/proc/self/fd/%d", t->ring_fd);
        c->fds[0] = open(path, O_RDONLY | O_CLOEXEC);
        snprintf(path, sizeof(path), "/proc/self/fd/%d", t->page_fd);
        c->fds[1] = open(path, O_RDONLY | O_CLOEXEC);
        ASSERT(c->fds[0] >= 0 && c->fds[1] >= 0);
        c->n_fds = 2;
        snprintf(reply, sizeof(reply),
                 "{\"transport\":\"shm\",\"ring\":{\"fd\":0,\"size\":%zu,\"start\":%" PRIu64
                 ",\"start_seq\":%" PRIu64 "},\"page\":{\"fd\":1,\"size\":%zu}}",
                 t->ring_size, start, start_seq, t->page_size);
        o = json_tokener_parse(reply);
        ASSERT(o);
        ASSERT_INT_EQ(shm_setup(s, c, o, realtime), 0);
        json_object_put(o);
        ASSERT_INT_EQ(pthread_create(&t->thread, NULL, tpd_run, t), 0);
}

static void tpd_done(Tpd *t) {
        ASSERT_INT_EQ(pthread_join(t->thread, NULL), 0);
        munmap(t->ring, t->ring_size);
        munmap(t->page, t->page_size);
        close(t->ring_fd);
        close(t->page_fd);
        jsonbuf_done(&t->want);
        jsonbuf_done(&t->want_rt);
}

/* What was written to out, a memfd. */
static char *out_read(int out, size_t *ret_len) {
        off_t n = lseek(out, 0, SEEK_END);
        char *p = malloc((size_t) n + 1);

        ASSERT(p && n >= 0);
        ASSERT_INT_EQ(pread(out, p, (size_t) n, 0), n);
        *ret_len = (size_t) n;
        return p;
}

/* Read as tpd publishes: the very lines a socket stream gets, then tpd's end. */
static void test_in_order(bool realtime, bool lines) {
        Tpd t;
        Shm s;
        Connection c;
        int out = memfd_create("out", MFD_CLOEXEC);
        LinesOptions o = { .count = 3 * PER_BATCH, .order_delay_ns = 1000000 };
        size_t len;
        char *got;

        ASSERT(out >= 0);
        tpd_init(&t, 64 * 1024, MODE_WAKE);
        client_open(&t, &s, &c, realtime, 0, 0);
        if (lines)
                ASSERT_INT_EQ(shm_lines(&s, out, &o), 1);
        else
                ASSERT_INT_EQ(shm_copy(&s, out), 0);
        got = out_read(out, &len);
        if (lines) {
                /* Up to the count-th event line. */
                const char *p = t.want.data;

                put(&t.want, "", 1);
                for (uint64_t i = 0; i < o.count; p++)
                        i += strncmp(p, "\"event\"", 7) == 0;
                ASSERT_MEM_EQ(got, len, t.want.data, (size_t) (strchr(p, '\n') + 1 - t.want.data));
        } else if (realtime)
                ASSERT_MEM_EQ(got, len, t.want_rt.data, t.want_rt.len);
        else
                ASSERT_MEM_EQ(got, len, t.want.data, t.want.len);
        free(got);
        shm_done(&s);
        connection_done(&c);
        tpd_done(&t);
        close(out);
}

/* Runs shm_copy() on a ring published before, from its first entry. */
static int copy_published(Tpd *t, Mode mode, char **ret, size_t *ret_len) {
        Shm s;
        Connection c;
        int out = memfd_create("out", MFD_CLOEXEC), r;

        ASSERT(out >= 0);
        t->mode = mode;
        client_open(t, &s, &c, false, 0, 0);
        r = shm_copy(&s, out);
        *ret = out_read(out, ret_len);
        shm_done(&s);
        connection_done(&c);
        close(out);
        return r;
}

/* Read once tpd ended the stream: everything it published. */
static void test_drain(void) {
        Tpd t;
        size_t len;
        char *got;

        tpd_init(&t, 64 * 1024, MODE_CLOSE);
        for (unsigned k = 0; k < 5; k++)
                tpd_publish(&t);
        ASSERT_INT_EQ(copy_published(&t, MODE_CLOSE, &got, &len), 0);
        ASSERT_MEM_EQ(got, len, t.want.data, t.want.len);
        free(got);
        tpd_done(&t);
}

/* A reader rings behind: what it did not get comes as lost lines, exact by CPU and cause. */
static void test_behind(void) {
        uint64_t events[N_CPUS] = {}, client[N_CPUS] = {}, overrun[N_CPUS] = {};
        Tpd t;
        size_t len;
        char *got;

        tpd_init(&t, 8 * 1024, MODE_CLOSE);
        for (unsigned k = 0; k < BATCHES; k++)
                tpd_publish(&t);
        ASSERT_INT_EQ(copy_published(&t, MODE_CLOSE, &got, &len), 0);
        for (char *p = got, *end; p < got + len; p = end + 1) {
                LineHead li;

                end = memchr(p, '\n', (size_t) (got + len - p));
                ASSERT(end);
                line_head_parse(p, (size_t) (end + 1 - p), &li);
                if (!li.has_cpu)
                        continue;
                ASSERT(li.cpu < N_CPUS);
                if (li.event)
                        events[li.cpu]++;
                else if (li.lost && li.cause_len == 6 && memcmp(li.cause, "client", 6) == 0)
                        client[li.cpu] += li.n_lost;
                else if (li.lost && li.cause_len == 7 && memcmp(li.cause, "overrun", 7) == 0)
                        overrun[li.cpu] += li.n_lost;
                else
                        TEST_FAIL("unexpected line %.*s", (int) (end - p), p);
        }
        for (unsigned cpu = 0; cpu < N_CPUS; cpu++) {
                ASSERT(client[cpu] > 0);
                ASSERT_U64_EQ(events[cpu] + client[cpu], t.selected[cpu]);
                ASSERT_U64_EQ(overrun[cpu], t.lost_share[cpu]);
        }
        free(got);
        tpd_done(&t);
}

/* A frame that is no WAKE, and a ring whose entry cannot be: an error, never a crash. */
static void test_hostile(void) {
        Tpd t;
        size_t len;
        char *got;

        tpd_init(&t, 64 * 1024, MODE_GARBAGE);
        tpd_publish(&t);
        ASSERT_INT_EQ(copy_published(&t, MODE_GARBAGE, &got, &len), -EBADMSG);
        ASSERT_MEM_EQ(got, len, t.want.data, t.want.len);
        free(got);
        tpd_done(&t);

        tpd_init(&t, 64 * 1024, MODE_CLOSE);
        tpd_publish(&t);
        ((RingEntry *) ((uint8_t *) t.ring + RING_HEADER_SIZE))->size = 12;
        ASSERT_INT_EQ(copy_published(&t, MODE_CLOSE, &got, &len), -EBADMSG);
        ASSERT_INT_EQ(len, 0);
        free(got);
        tpd_done(&t);
}

/* tpd truncates the ring or the page under a read (the stream ended, tpd went away): the stream
 * ends with what was read before, and no SIGBUS. */
static void test_cut(bool page) {
        Tpd t;
        Shm s;
        Connection c;
        int out = memfd_create("out", MFD_CLOEXEC);
        size_t len;
        char *got;

        ASSERT(out >= 0);
        tpd_init(&t, 64 * 1024, MODE_CLOSE);
        tpd_publish(&t);
        client_open(&t, &s, &c, false, 0, 0);
        ASSERT_INT_EQ(ftruncate(page ? t.page_fd : t.ring_fd, 0), 0);
        ASSERT_INT_EQ(shm_copy(&s, out), 0);
        ASSERT(s.cut);
        ASSERT_INT_EQ(shm_step(&s, NULL, NULL, false), LINES_SOURCE_END);
        got = out_read(out, &len);
        ASSERT_INT_EQ(len, 0);
        free(got);
        shm_done(&s);
        connection_done(&c);
        tpd_done(&t);
        close(out);
}

static int collect(void *userdata, const char *line, size_t n) {
        put(userdata, line, n);
        return 0;
}

/* A signal ends the stream (last): the steps read what was published before the first of them,
 * and nothing that tpd publishes after. */
static void test_stop(void) {
        Tpd t;
        Shm s;
        Connection c;
        JsonBuf got = {};
        size_t want_len;
        int k;

        tpd_init(&t, 64 * 1024, MODE_CLOSE);
        for (unsigned i = 0; i < 3; i++)
                tpd_publish(&t);
        want_len = t.want.len;
        client_open(&t, &s, &c, false, 0, 0);
        ASSERT_INT_EQ(shm_step(&s, collect, &got, true), LINES_SOURCE_MORE);
        for (unsigned i = 0; i < 3; i++)
                tpd_publish(&t);
        while ((k = shm_step(&s, collect, &got, true)) == LINES_SOURCE_MORE)
                ;
        ASSERT_INT_EQ(k, LINES_SOURCE_END);
        ASSERT_MEM_EQ(got.data, got.len, t.want.data, want_len);
        jsonbuf_done(&got);
        shm_done(&s);
        connection_done(&c);
        tpd_done(&t);
}

/* A reply whose sizes the fds do not hold is refused before anything is mapped past them. */
static void test_bad_reply(void) {
        Tpd t;
        Shm s;
        Connection c = CONNECTION_NULL;
        char path[64];
        json_object *o;

        tpd_init(&t, 64 * 1024, MODE_CLOSE);
        snprintf(path, sizeof(path), "/proc/self/fd/%d", t.ring_fd);
        c.fds[0] = open(path, O_RDONLY | O_CLOEXEC);
        c.fds[1] = open(path, O_RDONLY | O_CLOEXEC);
        c.n_fds = 2;
        o = json_tokener_parse("{\"ring\":{\"fd\":0,\"size\":999999999,\"start\":0,\"start_seq\":0},"
                               "\"page\":{\"fd\":1,\"size\":4096}}");
        ASSERT_INT_EQ(shm_setup(&s, &c, o, false), -EBADMSG);
        shm_done(&s);
        json_object_put(o);
        connection_done(&c);
        munmap(t.ring, t.ring_size);
        munmap(t.page, t.page_size);
        close(t.ring_fd);
        close(t.page_fd);
}

int main(void) {
        test_in_order(false, false);
        test_in_order(true, false);
        test_in_order(false, true);
        test_drain();
        test_behind();
        test_hostile();
        test_cut(false);
        test_cut(true);
        test_stop();
        test_bad_reply();
        return EXIT_SUCCESS;
}
