/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * tpctl export: tpd's NDJSON stream into NATS JetStream.
 *
 * Two threads share one queue under one mutex. The main thread only reads tpd's stream and appends
 * each line to the open batch of its subject; it never waits for NATS, so tpd never sees a slow
 * client because the cluster is slow or gone. When what export holds would exceed --buffer-size, a
 * record is counted instead, and the count is published as a lost record of cause "export" once
 * there is room again. What is held is charged as allocated, not as payload: the subjects' open
 * buffers by their capacity, and each sealed batch by its message (a natsMsg of exactly its
 * records, made when the batch is sealed, which libnats sends and, after a failure, hands back)
 * plus EXPORT_MSG_OVERHEAD, so that a buffer of small batches is no larger than one of full ones.
 * The publisher thread (jetstream.c) publishes sealed batches in sequence order with
 * js_PublishMsgAsync, at most EXPORT_WINDOW unacknowledged; libnats' callbacks (its own threads)
 * free an acknowledged batch or put a failed one back at the head of the queue. Each message carries a
 * Nats-Msg-Id unique to this run and batch, so a batch sent again after a lost acknowledgement is dropped by
 * JetStream's de-duplication window instead of stored twice.
 */

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <malloc.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <time.h>
#include <unistd.h>

#include <nats/nats.h>

#include "connection.h"
#include "export.h"
#include "exporter.h"
#include "linereader.h"
#include "message.h"
#include "servers.h"
#include "tpd-protocol.h"

/* After a read of less than this, the reader naps EXPORT_NAP_USEC so that the next read finds more:
 * every wake-up costs a context switch, dearer than the copy of a record. */
#define EXPORT_NAP_BELOW (64U * 1024U)
#define EXPORT_NAP_USEC (10U * 1000U)
/* A batch is published at the latest this long after its first record. */
#define EXPORT_FLUSH_USEC (50U * 1000U)
/* How long SIGTERM or the end of tpd's stream waits for the last acknowledgements. */
#define EXPORT_DRAIN_USEC (5U * 1000U * 1000U)
#define EXPORT_LINE_MAX (1024U * 1024U)
/* What a sealed batch costs besides its records and subject: our ExportBatch, libnats' message and, while
 * it is in flight, its Nats-Msg-Id header and libnats' pending-acknowledgement entry, with their
 * allocators' headers. Measured with --batch-size 0 and the cluster away, RSS grew by about 400
 * bytes a message besides its record; in flight a message costs a few hundred more. */
#define EXPORT_MSG_OVERHEAD 1024U
/* An open buffer starts this small and doubles up to the batch size: a quiet subject's stays small. */
#define EXPORT_OPEN_MIN 4096U

/* Causes a lost record of tpd can carry, and ours, in the order their lost records go out; counted
 * when the buffer had no room for it. */
static const int flush_order[] = { TPD_LOST_EXPORT, TPD_LOST_OVERRUN, TPD_LOST_DROPPED,
                                   TPD_LOST_CLIENT, TPD_LOST_UNKNOWN, TPD_LOST_DECODE };

/* ---- queue (callers hold e->lock) ---- */

void export_batch_free(ExportBatch *b) {
        if (b) {
                natsMsg_Destroy(b->msg);
                free(b);
        }
}

void export_batch_requeue(Exporter *e, ExportBatch *b) {
        ExportBatch **p = &e->ready;

        while (*p && (*p)->seq < b->seq)
                p = &(*p)->next;
        b->next = *p;
        *p = b;
        if (!b->next)
                e->ready_last = b;
        pthread_cond_signal(&e->cond);
}

/* The open batch of s becomes a message at the tail of the ready list. Without memory for it, it
 * stays open and the next seal tries again. */
static void batch_seal(Exporter *e, Subject *s) {
        ExportBatch *b = calloc(1, sizeof(*b));

        if (!b)
                return;
        if (natsMsg_Create(&b->msg, s->name, NULL, s->buf, (int) s->len) != NATS_OK) {
                free(b);
                return;
        }
        /* The charge of the open batch (appended records, overhead) moves over to b. */
        b->subject = s;
        b->records = s->records;
        b->cost = s->overhead + s->len;
        b->seq = ++e->next_seq;
        s->len = 0;
        s->records = 0;
        if (e->ready_last)
                e->ready_last->next = b;
        else
                e->ready = b;
        e->ready_last = b;
        pthread_cond_signal(&e->cond);
}

static bool batch_append(Exporter *e, Subject *s, const char *line, size_t len) {
        size_t need = len + (s->len == 0 ? s->overhead : 0), cap = s->cap;

        if (s->len + len > cap) {
                cap = MAX(cap, (size_t) EXPORT_OPEN_MIN);
                while (cap < s->len + len)
                        cap *= 2;
                cap = MAX(MIN(cap, e->o->batch_size + EXPORT_OPEN_MIN), s->len + len);
        }
        if (e->held + need + (cap - s->cap) > e->o->buffer_size)
                return false;
        if (cap != s->cap) {
                char *d = realloc(s->buf, cap);

                if (!d)
                        return false;
                e->held += cap - s->cap;
                s->buf = d;
                s->cap = cap;
        }
        if (s->len == 0)
                s->opened = now_usec(CLOCK_MONOTONIC);
        memcpy(s->buf + s->len, line, len);
        s->len += len;
        s->records++;
        e->held += need;
        if (s->len >= e->o->batch_size)
                batch_seal(e, s);
        return true;
}

static Subject *subject_get(Exporter *e, const char *key, size_t keylen) {
        _cleanup_free_ char *k = NULL, *name = NULL;
        Subject *s, **a;
        int r;

        if (e->last_subject && strlen(e->last_subject->key) == keylen &&
            memcmp(e->last_subject->key, key, keylen) == 0)
                return e->last_subject;
        for (size_t i = 0; i < e->n_subjects; i++)
                if (strlen(e->subjects[i]->key) == keylen && memcmp(e->subjects[i]->key, key, keylen) == 0)
                        return (e->last_subject = e->subjects[i]);

        k = strndup(key, keylen);
        if (!k)
                return NULL;
        if (keylen == 0)
                r = asprintf(&name, "%s.lost", e->base);
        else if (streq(k, "\n"))
                r = asprintf(&name, "%s.notice", e->base);
        else {
                /* Event names are [A-Za-z0-9_]+:[A-Za-z0-9_]+, so "system:event" makes two tokens. */
                char *colon;

                r = asprintf(&name, "%s.%s", e->base, k);
                if (r >= 0 && (colon = strrchr(name, ':')))
                        *colon = '.';
        }
        if (r < 0) {
                name = NULL;
                return NULL;
        }
        a = reallocarray(e->subjects, e->n_subjects + 1, sizeof(*a));
        if (!a)
                return NULL;
        e->subjects = a;
        s = calloc(1, sizeof(*s));
        if (!s)
                return NULL;
        *s = (Subject){ .key = TAKE_PTR(k),
                        .overhead = sizeof(ExportBatch) + EXPORT_MSG_OVERHEAD + (size_t) r };
        s->name = TAKE_PTR(name);
        e->subjects[e->n_subjects++] = s;
        return (e->last_subject = s);
}

/* Queues the counted losses as lost records, if there is room; returns whether none is left. */
static bool losses_flush(Exporter *e) {
        bool all = true;

        for (size_t i = 0; i < ELEMENTSOF(flush_order); i++) {
                int cause = flush_order[i];
                char line[128];
                Subject *s;
                int n;

                if (e->unreported[cause] == 0)
                        continue;
                n = snprintf(line, sizeof(line),
                             "{\"ts\":%" PRIu64 ",\"lost\":%" PRIu64 ",\"cause\":\"%s\"}\n", e->last_ts,
                             e->unreported[cause], tpd_lost_cause_name(cause));
                s = subject_get(e, "", 0);
                if (s && batch_append(e, s, line, (size_t) n)) {
                        if (cause == TPD_LOST_EXPORT)
                                e->lost_export += e->unreported[cause];
                        e->unreported[cause] = 0;
                } else
                        all = false;
        }
        return all;
}

/* A cause tpctl does not know is counted as its own. */
static int cause_of(const char *p, size_t n) {
        for (int c = 1; c < _TPD_LOST_MAX; c++)
                if (strlen(tpd_lost_cause_name(c)) == n && memcmp(tpd_lost_cause_name(c), p, n) == 0)
                        return c;
        return TPD_LOST_EXPORT;
}

/*
 * One NDJSON line of tpd (with its '\n'). Only the head is looked at (linereader.h): an event
 * record goes to its event's subject, a lost record to the lost subject; anything else goes to the
 * notice subject as it is.
 */
static void take_line(Exporter *e, const char *line, size_t len) {
        const char *key = "\n";
        size_t keylen = 1;
        int cause = 0; /* of a lost record; 0 for any other line */
        LineHead h;
        Subject *s;

        e->records_read++;
        line_head_parse(line, len, &h);
        if (h.has_ts)
                e->last_ts = h.ts;
        if (h.event && h.name) {
                key = h.name;
                keylen = h.name_len;
        } else if (h.lost) {
                cause = h.cause ? cause_of(h.cause, h.cause_len) : TPD_LOST_EXPORT;
                key = "";
                keylen = 0;
        }

        /* Until every loss is queued, later records are lost too: a consumer never sees records
         * after a gap before the gap's lost record (per subject). */
        if (!losses_flush(e) || !(s = subject_get(e, key, keylen)) || !batch_append(e, s, line, len)) {
                if (!e->dropping)
                        log_error("buffer of %zu bytes full: counting records as lost (cause \"export\")",
                                  e->o->buffer_size);
                e->dropping = true;
                if (cause != 0)
                        e->unreported[cause] += h.n_lost;
                else
                        e->unreported[TPD_LOST_EXPORT]++;
        } else if (e->dropping && e->unreported[TPD_LOST_EXPORT] == 0) {
                e->dropping = false;
                log_error("buffer has room again, exporting");
        }
}

static void seal_old(Exporter *e, uint64_t now, bool all) {
        for (size_t i = 0; i < e->n_subjects; i++) {
                Subject *s = e->subjects[i];
                size_t len = s->len;

                if (len == 0 || (!all && now - s->opened < EXPORT_FLUSH_USEC))
                        continue;
                batch_seal(e, s);
                /* A buffer sealed by the clock at a quarter full is too large for its subject's rate:
                 * given back, it starts small again. */
                if (s->len == 0 && s->cap > EXPORT_OPEN_MIN && len < s->cap / 4) {
                        e->held -= s->cap;
                        s->buf = mfree(s->buf);
                        s->cap = 0;
                }
        }
}

/* ---- setup ---- */

static void sanitize_token(char *s) {
        for (; *s; s++)
                if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
                      *s == '_' || *s == '-'))
                        *s = '_';
}

/* Whether p is usable as the head of NATS subjects: tokens of [A-Za-z0-9_-] joined by '.'. */
static bool export_prefix_valid(const char *p) {
        bool token = false;

        for (; *p; p++) {
                if (*p == '.') {
                        if (!token)
                                return false;
                        token = false;
                } else if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
                           (*p >= '0' && *p <= '9') || *p == '_' || *p == '-')
                        token = true;
                else
                        return false;
        }
        return token;
}

static int make_ids(Exporter *e) {
        char host[256] = "", boot[64] = "";
        FILE *f;

        if (gethostname(host, sizeof(host) - 1) < 0 || !*host)
                strcpy(host, "localhost");
        sanitize_token(host);
        f = fopen("/proc/sys/kernel/random/boot_id", "re");
        if (f) {
                if (!fgets(boot, sizeof(boot), f))
                        boot[0] = 0;
                fclose(f);
        }
        boot[strcspn(boot, "-\n")] = 0;
        sanitize_token(boot);
        /* HOST-BOOTID-START: a restarted export must not reuse the ids of the previous run, which
         * JetStream would drop as duplicates for its window. */
        (void) snprintf(e->msg_id_prefix, sizeof(e->msg_id_prefix), "%s-%s-%" PRIx64, host,
                        *boot ? boot : "0", now_nsec(CLOCK_BOOTTIME));
        if (asprintf(&e->base, "%s.%s", e->o->subject_prefix, host) < 0) {
                e->base = NULL;
                return log_oom();
        }
        return 0;
}

/* After libnats is closed: its threads call jetstream.c's on_ack until then, and on_ack walks the lists. */
static void exporter_done(Exporter *e) {
        for (size_t i = 0; i < e->n_subjects; i++) {
                free(e->subjects[i]->buf);
                free(e->subjects[i]->key);
                free(e->subjects[i]->name);
                free(e->subjects[i]);
        }
        free(e->subjects);
        for (ExportBatch *b = e->ready, *n; b; b = n) {
                n = b->next;
                export_batch_free(b);
        }
        for (ExportBatch *b = e->inflight, *n; b; b = n) {
                n = b->next;
                export_batch_free(b);
        }
        free(e->base);
}

/* Takes the lines read and seals the batches that are due. */
static void take_lines(Exporter *e, LineReader *reader) {
        const char *line;
        size_t n;
        int r;

        pthread_mutex_lock(&e->lock);
        while ((r = line_reader_next(reader, &line, &n)) != 0)
                if (r == -E2BIG) {
                        /* A line longer than any record tpd writes: not ours to judge, count it lost. */
                        e->unreported[TPD_LOST_EXPORT]++;
                        line_reader_drop(reader);
                } else
                        take_line(e, line, n);
        seal_old(e, now_usec(CLOCK_MONOTONIC), false);
        (void) losses_flush(e);
        pthread_mutex_unlock(&e->lock);
}

static void wait_drained(Exporter *e) {
        uint64_t deadline = now_usec(CLOCK_MONOTONIC) + EXPORT_DRAIN_USEC;

        pthread_mutex_lock(&e->lock);
        seal_old(e, 0, true);
        for (;;) {
                bool flushed = losses_flush(e);

                seal_old(e, 0, true);
                if ((flushed && !e->ready && e->n_inflight == 0) || now_usec(CLOCK_MONOTONIC) >= deadline)
                        break;
                pthread_mutex_unlock(&e->lock);
                usleep(10 * 1000);
                pthread_mutex_lock(&e->lock);
        }
        pthread_mutex_unlock(&e->lock);
}

static void summary_print(Exporter *e) {
        size_t held_records = 0;

        for (ExportBatch *b = e->ready; b; b = b->next)
                held_records += b->records;
        for (ExportBatch *b = e->inflight; b; b = b->next)
                held_records += b->records;
        log_error("exported %" PRIu64 " of %" PRIu64 " records in %" PRIu64 " messages (%" PRIu64
                  " duplicates dropped by JetStream), %" PRIu64 " lost (cause \"export\"), %zu not "
                  "acknowledged at exit",
                  e->records_acked, e->records_read, e->messages_acked, e->duplicates, e->lost_export,
                  held_records);
}

/* SIGINT and SIGTERM come through a signalfd; blocked before libnats starts its threads, so none
 * of them gets the signal. */
static int signals_take(void) {
        sigset_t mask;
        int fd;

        sigemptyset(&mask);
        sigaddset(&mask, SIGINT);
        sigaddset(&mask, SIGTERM);
        sigaddset(&mask, SIGPIPE);
        pthread_sigmask(SIG_BLOCK, &mask, NULL);
        sigdelset(&mask, SIGPIPE);
        fd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
        if (fd < 0)
                return log_error_errno(-errno, "cannot create a signalfd: %m");
        return fd;
}

/* The servers' URLs, joined by commas, and the JetStream stream's name. */
static int names_get(const ExportOptions *o, char **ret_servers, char **ret_stream) {
        int r;

        if (o->servers_file)
                r = servers_read_file(o->servers_file, ret_servers);
        else {
                if (strchr(o->servers, '@'))
                        log_error("warning: a server's user information is on the command line, where "
                                  "every user can read it; give it with --servers-file");
                r = (*ret_servers = strdup(o->servers)) ? 0 : log_oom();
        }
        if (r < 0)
                return r;
        if (o->stream)
                *ret_stream = strdup(o->stream);
        else if ((*ret_stream = strdup(o->subject_prefix))) {
                for (char *p = *ret_stream; *p; p++)
                        *p = *p == '.' || *p == '-' ? '_'
                                                    : (char) (*p >= 'a' && *p <= 'z' ? *p - 'a' + 'A' : *p);
        }
        return *ret_stream ? 0 : log_oom();
}

/* Reads tpd's stream into batches until a signal (returns 0) or its end (an exit status). */
static int copy_lines(Exporter *e, LineReader *reader, int sfd) {
        for (;;) {
                struct pollfd pfd[2] = { { .fd = reader->fd, .events = POLLIN },
                                         { .fd = sfd, .events = POLLIN } };
                ssize_t n;

                take_lines(e, reader);
                if (poll(pfd, 2, EXPORT_FLUSH_USEC / 2000) < 0 && errno != EINTR)
                        return log_error_errno(-errno, "poll failed: %m"), EXIT_FAILURE;
                if (pfd[1].revents)
                        return EXIT_SUCCESS;
                if (!pfd[0].revents)
                        continue;
                n = line_reader_fill(reader);
                if (n == -EAGAIN)
                        continue;
                if (n == -E2BIG) {
                        pthread_mutex_lock(&e->lock);
                        e->unreported[TPD_LOST_EXPORT]++;
                        line_reader_drop(reader);
                        pthread_mutex_unlock(&e->lock);
                        continue;
                }
                if (n == 0 || n == -ECONNRESET) {
                        log_error("tpd closed the stream");
                        return TPD_EXIT_DAEMON_GONE;
                }
                if (n < 0) {
                        log_error_errno((int) n, "cannot read tpd's stream: %m");
                        return TPD_EXIT_DAEMON_GONE;
                }
                if ((size_t) n < EXPORT_NAP_BELOW)
                        (void) usleep(EXPORT_NAP_USEC);
        }
}

/* Asks tpd for the stream and exports it until a signal or its end: an exit status. */
static int export_stream(Exporter *e, const char *socket_path, json_object *params, const char *stream,
                         int sfd) {
        _cleanup_(connection_done) Connection c = CONNECTION_NULL;
        _cleanup_(varlink_reply_done) VarlinkReply reply = {};
        _cleanup_(line_reader_done) LineReader reader = {};
        char url[256] = "", shown[256];
        pthread_t thread;
        int r, status;

        r = connection_call(&c, socket_path, TPD_METHOD("Stream"), params, true, &reply);
        if (r != 0)
                return r < 0 && r != -ENOMEM ? TPD_EXIT_DAEMON_GONE : EXIT_FAILURE;
        varlink_reply_done(&reply);
        (void) natsConnection_GetConnectedUrl(e->nc, url, sizeof(url));
        servers_redact_url(url, shown, sizeof(shown));
        log_error("exporting to JetStream stream '%s' at %s as '%s.…'", stream, shown, e->base);

        if (line_reader_init(&reader, c.fd, EXPORT_LINE_MAX, c.in.data + c.in.consumed,
                             varlink_buffer_pending(&c.in)) < 0)
                return log_oom(), EXIT_FAILURE;
        (void) fcntl(c.fd, F_SETFL, fcntl(c.fd, F_GETFL) | O_NONBLOCK);

        if (pthread_create(&thread, NULL, jetstream_publisher, e) != 0)
                return log_error("cannot start the publisher thread"), EXIT_FAILURE;
        status = copy_lines(e, &reader, sfd);

        /* Whatever was read goes out, if the cluster takes it within the drain time. */
        connection_done(&c);
        wait_drained(e);
        pthread_mutex_lock(&e->lock);
        e->stopping = true;
        pthread_cond_signal(&e->cond);
        pthread_mutex_unlock(&e->lock);
        pthread_join(thread, NULL);
        summary_print(e);
        return status;
}

/* Runs until SIGINT/SIGTERM (exit 0) or until tpd closes the stream; returns an exit status.
 * Takes params (the Stream call's parameters) over. */
static int export_run(const char *socket_path, json_object *params, const ExportOptions *o) {
        _cleanup_free_ char *stream = NULL, *servers = NULL;
        _cleanup_close_ int sfd = -1;
        Exporter e = { .o = o };
        int r, status = EXIT_FAILURE;

        pthread_mutex_init(&e.lock, NULL);
        pthread_cond_init(&e.cond, NULL);

        /* Batches and libnats' copies of them come and go at hundreds a second: keep their memory
         * in the heap instead of returning it and faulting it in again (that was a third of the
         * CPU time of export). */
        (void) mallopt(M_MMAP_THRESHOLD, 4 * 1024 * 1024);
        (void) mallopt(M_TRIM_THRESHOLD, 256 * 1024 * 1024);

        sfd = signals_take();
        r = sfd < 0 ? sfd : names_get(o, &servers, &stream);
        if (r >= 0)
                r = make_ids(&e);
        if (r >= 0 && nats_Open(-1) != NATS_OK)
                r = jetstream_log(NATS_ERR, "cannot initialise libnats");
        if (r < 0) {
                json_object_put(params);
                free(e.base);
                return EXIT_FAILURE;
        }
        r = jetstream_connect(&e, TAKE_PTR(servers));
        if (r >= 0)
                r = jetstream_stream_check(&e, stream);
        if (r >= 0)
                status = export_stream(&e, socket_path, TAKE_PTR(params), stream, sfd);
        json_object_put(params);

        /* libnats' threads may still call back into e until the connection is gone. */
        pthread_mutex_lock(&e.lock);
        e.stopping = true;
        pthread_mutex_unlock(&e.lock);
        if (e.nc)
                natsConnection_Close(e.nc);
        jsCtx_Destroy(e.js);
        natsConnection_Destroy(e.nc);
        natsOptions_Destroy(e.nopts);
        nats_CloseAndWait(2000);
        exporter_done(&e);
        pthread_cond_destroy(&e.cond);
        pthread_mutex_destroy(&e.lock);
        return status;
}

/* ---- the command ---- */

static ExportOptions opt = {
        .subject_prefix = EXPORT_SUBJECT_PREFIX_DEFAULT,
        .buffer_size = EXPORT_BUFFER_SIZE_DEFAULT,
        .batch_size = EXPORT_BATCH_SIZE_DEFAULT,
};

enum {
        ARG_SUBJECT_PREFIX,
        ARG_BUFFER_SIZE,
        ARG_BATCH_SIZE,
        ARG_CREDS,
        ARG_TLS_CA,
        ARG_CREATE_STREAM,
        ARG_REPLICAS,
        ARG_STREAM,
        ARG_SERVERS_FILE,
};

static const OptionSpec export_specs[] = {
        { "subject-prefix", 0, required_argument, ARG_SUBJECT_PREFIX },
        { "buffer-size", 0, required_argument, ARG_BUFFER_SIZE },
        { "batch-size", 0, required_argument, ARG_BATCH_SIZE },
        { "creds", 0, required_argument, ARG_CREDS },
        { "tls-ca", 0, required_argument, ARG_TLS_CA },
        { "create-stream", 0, no_argument, ARG_CREATE_STREAM },
        { "replicas", 0, required_argument, ARG_REPLICAS },
        { "stream", 0, required_argument, ARG_STREAM },
        { "servers-file", 0, required_argument, ARG_SERVERS_FILE },
};

static int export_parse_option(const OptionSpec *spec, const char *arg) {
        int v;

        switch (spec->id) {
        case ARG_SUBJECT_PREFIX:
                if (!export_prefix_valid(arg))
                        return log_usage("invalid subject prefix '%s': NATS subject tokens of "
                                         "letters, digits, '_' and '-', separated by '.'",
                                         arg);
                opt.subject_prefix = arg;
                return 0;
        case ARG_BUFFER_SIZE:
                if (parse_int(arg, &v) < 0 || v < 1 || v > 65536)
                        return log_usage("invalid --buffer-size '%s': megabytes, 1 to 65536", arg);
                opt.buffer_size = (size_t) v << 20;
                return 0;
        case ARG_BATCH_SIZE:
                if (parse_int(arg, &v) < 0 || v > (int) (EXPORT_BATCH_SIZE_MAX >> 10))
                        return log_usage("invalid --batch-size '%s': kilobytes, 0 to %u", arg,
                                         EXPORT_BATCH_SIZE_MAX >> 10);
                opt.batch_size = (size_t) v << 10;
                return 0;
        case ARG_CREDS:
                opt.creds = arg;
                return 0;
        case ARG_TLS_CA:
                opt.tls_ca = arg;
                return 0;
        case ARG_CREATE_STREAM:
                opt.create_stream = true;
                return 0;
        case ARG_REPLICAS:
                if (parse_int(arg, &v) < 0 || v < 1 || v > 5)
                        return log_usage("invalid --replicas '%s': 1 to 5", arg);
                opt.replicas = v;
                return 0;
        case ARG_STREAM:
                if (!*arg || strpbrk(arg, ". *>/\\\t"))
                        return log_usage("invalid stream name '%s'", arg);
                opt.stream = arg;
                return 0;
        case ARG_SERVERS_FILE:
                opt.servers_file = arg;
                return 0;
        }
        return -EINVAL;
}

const OptionTable export_option_table = OPTION_TABLE(export_specs, export_parse_option);

int export_verb(const CommonOptions *c, char **args, size_t n) {
        ExportOptions o = opt;
        json_object *params;

        if (n == 1)
                o.servers = args[0];
        if (o.create_stream != (o.replicas > 0))
                return usage_error("--create-stream and --replicas N go together");
        if (!o.servers == !o.servers_file)
                return usage_error("export takes its servers as nats://HOST:PORT[,…] or from "
                                   "--servers-file=FILE, one of the two");
        params = selection_params(c, NULL, 0);
        if (!params)
                return connection_exit_status(log_oom());
        return export_run(c->socket_path, params, &o);
}
