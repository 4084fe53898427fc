/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * tpctl export's JetStream side: the connection to NATS, the check of the stream, the publisher
 * thread and libnats' callbacks. export.c's head comment tells how the two halves share the queue.
 */

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "exporter.h"
#include "message.h"
#include "servers.h"
#include "util.h"

/* Unacknowledged messages at most: 256 of 64 KiB keep a 3-node cluster on loopback busy. */
#define EXPORT_WINDOW 256
/* After this long without an acknowledgement a message is sent again (same id). */
#define EXPORT_ACK_WAIT_MS 3000
/* Back-off of publishing after a failed publish, and of reconnecting, doubling up to the maximum. */
#define EXPORT_BACKOFF_MIN_MS 100U
#define EXPORT_BACKOFF_MAX_MS 2000U
/* What libnats keeps of messages published while it reconnects (its default is 8 MiB), outside of
 * --buffer-size: it is sent again from our queue anyway. */
#define EXPORT_RECONNECT_BUF (1024U * 1024U)

int jetstream_log(natsStatus s, const char *what) {
        const char *detail = nats_GetLastError(NULL);
        char shown[1024];

        /* libnats' own words may name a server, with its password. */
        servers_redact(strempty(detail), shown, sizeof(shown));
        log_error("%s: %s%s%s", what, natsStatus_GetText(s), *shown ? ": " : "", shown);
        return -EIO;
}

/* libnats' callbacks, on libnats' threads. */

static void on_ack(jsCtx *js, natsMsg *msg, jsPubAck *pa, jsPubAckErr *pae, void *userdata) {
        Exporter *e = userdata;
        const char *id = NULL, *dash;
        uint64_t seq = 0;

        if (natsMsgHeader_Get(msg, "Nats-Msg-Id", &id) == NATS_OK && id && (dash = strrchr(id, '-')))
                seq = strtoull(dash + 1, NULL, 10);

        pthread_mutex_lock(&e->lock);
        for (ExportBatch **p = &e->inflight; *p; p = &(*p)->next) {
                ExportBatch *b = *p;

                if (b->seq != seq)
                        continue;
                *p = b->next;
                e->n_inflight--;
                if (pa) {
                        /* A full window was what kept the publisher waiting. */
                        if (e->n_inflight + 1 >= EXPORT_WINDOW && e->ready)
                                pthread_cond_signal(&e->cond);
                        e->held -= b->cost;
                        e->records_acked += b->records;
                        e->messages_acked++;
                        e->duplicates += pa->Duplicate;
                        e->backoff_ms = 0;
                        if (e->failing)
                                log_error("publishing again");
                        e->failing = false;
                        export_batch_free(b);
                } else {
                        char shown[512] = "";

                        if (pae && pae->ErrText)
                                servers_redact(pae->ErrText, shown, sizeof(shown));
                        if (!e->failing)
                                log_error("publish failed, sending again with back-off: %s%s%s",
                                          natsStatus_GetText(pae ? pae->Err : NATS_ERR),
                                          pae && pae->ErrText ? ": " : "", pae && pae->ErrText ? shown : "");
                        e->failing = true;
                        e->backoff_ms = e->backoff_ms ? MIN(e->backoff_ms * 2, EXPORT_BACKOFF_MAX_MS)
                                                      : EXPORT_BACKOFF_MIN_MS;
                        e->retry_at = now_usec(CLOCK_MONOTONIC) + e->backoff_ms * 1000U;
                        /* libnats hands the message back: it is sent again as it is. */
                        b->msg = TAKE_PTR(msg);
                        export_batch_requeue(e, b);
                }
                break;
        }
        pthread_mutex_unlock(&e->lock);
        natsMsg_Destroy(msg);
}

static void on_disconnected(natsConnection *nc, void *userdata) {
        Exporter *e = userdata;

        bool stopping;

        pthread_mutex_lock(&e->lock);
        e->connected = false;
        stopping = e->stopping;
        pthread_mutex_unlock(&e->lock);
        if (!stopping)
                log_error("disconnected from NATS, reconnecting; buffering up to %zu bytes",
                          e->o->buffer_size);
}

static void on_reconnected(natsConnection *nc, void *userdata) {
        Exporter *e = userdata;
        char url[256] = "", shown[256];

        (void) natsConnection_GetConnectedUrl(nc, url, sizeof(url));
        servers_redact_url(url, shown, sizeof(shown));
        pthread_mutex_lock(&e->lock);
        e->connected = true;
        e->retry_at = 0;
        pthread_cond_signal(&e->cond);
        pthread_mutex_unlock(&e->lock);
        log_error("reconnected to NATS at %s", shown);
}

static int64_t reconnect_delay(natsConnection *nc, int attempts, void *userdata) {
        return MIN((int64_t) EXPORT_BACKOFF_MIN_MS << MIN(attempts, 10), (int64_t) EXPORT_BACKOFF_MAX_MS);
}

void *jetstream_publisher(void *userdata) {
        Exporter *e = userdata;

        pthread_mutex_lock(&e->lock);
        while (!e->stopping) {
                jsPubOptions po;
                char id[192];
                natsMsg *msg = NULL;
                natsStatus s;
                uint64_t now = now_usec(CLOCK_MONOTONIC);
                ExportBatch *b = e->ready;

                if (!b || !e->connected || e->n_inflight >= EXPORT_WINDOW || now < e->retry_at) {
                        struct timespec ts;

                        clock_gettime(CLOCK_REALTIME, &ts);
                        ts.tv_nsec += 20 * 1000 * 1000;
                        if (ts.tv_nsec >= 1000000000) {
                                ts.tv_sec++;
                                ts.tv_nsec -= 1000000000;
                        }
                        pthread_cond_timedwait(&e->cond, &e->lock, &ts);
                        continue;
                }

                e->ready = b->next;
                if (!e->ready)
                        e->ready_last = NULL;
                b->next = e->inflight;
                e->inflight = b;
                e->n_inflight++;
                /* From here the message is libnats' (or on_ack's, which may run before the call
                 * returns); a call that fails leaves it with us. */
                msg = TAKE_PTR(b->msg);
                (void) snprintf(id, sizeof(id), "%s-%" PRIu64, e->msg_id_prefix, b->seq);
                pthread_mutex_unlock(&e->lock);

                jsPubOptions_Init(&po);
                po.MsgId = id;
                po.MaxWait = EXPORT_ACK_WAIT_MS;
                s = js_PublishMsgAsync(e->js, &msg, &po);

                pthread_mutex_lock(&e->lock);
                if (s != NATS_OK) {
                        /* Not sent: it stays ours, back to the head of the queue. */
                        b->msg = TAKE_PTR(msg);
                        for (ExportBatch **p = &e->inflight; *p; p = &(*p)->next)
                                if (*p == b) {
                                        *p = b->next;
                                        e->n_inflight--;
                                        export_batch_requeue(e, b);
                                        break;
                                }
                        e->backoff_ms = e->backoff_ms ? MIN(e->backoff_ms * 2, EXPORT_BACKOFF_MAX_MS)
                                                      : EXPORT_BACKOFF_MIN_MS;
                        e->retry_at = now_usec(CLOCK_MONOTONIC) + e->backoff_ms * 1000U;
                }
        }
        pthread_mutex_unlock(&e->lock);
        return NULL;
}

/* servers: URLs joined by commas (taken over). */
int jetstream_connect(Exporter *e, char *list) {
        _cleanup_free_ char *servers = list;
        const char *urls[64];
        int n_urls = 0;
        jsOptions jo;
        natsStatus s;

        if (!servers)
                return log_oom();
        for (char *save = NULL, *u = strtok_r(servers, ",", &save); u; u = strtok_r(NULL, ",", &save)) {
                if (n_urls == (int) ELEMENTSOF(urls))
                        return log_error_errno(-E2BIG, "more than %zu NATS servers", ELEMENTSOF(urls));
                urls[n_urls++] = u;
        }
        if (n_urls == 0)
                return log_error_errno(-EINVAL, "no NATS server given");

        s = natsOptions_Create(&e->nopts);
        if (s == NATS_OK)
                s = natsOptions_SetServers(e->nopts, urls, n_urls);
        if (s == NATS_OK)
                s = natsOptions_SetName(e->nopts, "tpctl export");
        if (s == NATS_OK)
                s = natsOptions_SetMaxReconnect(e->nopts, -1);
        if (s == NATS_OK)
                s = natsOptions_SetCustomReconnectDelay(e->nopts, reconnect_delay, e);
        if (s == NATS_OK)
                s = natsOptions_SetDisconnectedCB(e->nopts, on_disconnected, e);
        if (s == NATS_OK)
                s = natsOptions_SetReconnectedCB(e->nopts, on_reconnected, e);
        if (s == NATS_OK)
                s = natsOptions_SetReconnectBufSize(e->nopts, EXPORT_RECONNECT_BUF);
        if (s == NATS_OK)
                s = natsOptions_SetPingInterval(e->nopts, 2000);
        if (s == NATS_OK)
                s = natsOptions_SetMaxPingsOut(e->nopts, 3);
        if (s != NATS_OK)
                return jetstream_log(s, "cannot set up the NATS options");
        if (e->o->tls_ca) {
                s = natsOptions_SetSecure(e->nopts, true);
                if (s == NATS_OK)
                        s = natsOptions_LoadCATrustedCertificates(e->nopts, e->o->tls_ca);
                if (s != NATS_OK)
                        return jetstream_log(s, "cannot use the CA certificates of --tls-ca");
        }
        if (e->o->creds) {
                s = natsOptions_SetUserCredentialsFromFiles(e->nopts, e->o->creds, NULL);
                if (s != NATS_OK)
                        return jetstream_log(s, "cannot use the credentials of --creds");
        }

        s = natsConnection_Connect(&e->nc, e->nopts);
        if (s != NATS_OK) {
                jetstream_log(s, "cannot connect to NATS");
                fputs("Servers:", stderr);
                for (int i = 0; i < n_urls; i++) {
                        char shown[512];

                        servers_redact_url(urls[i], shown, sizeof(shown));
                        fprintf(stderr, " %s", shown);
                }
                fputc('\n', stderr);
                return -ECONNREFUSED;
        }
        e->connected = true;

        jsOptions_Init(&jo);
        jo.PublishAsync.MaxPending = EXPORT_WINDOW * 2; /* ours is the window; never stall in libnats */
        jo.PublishAsync.AckHandler = on_ack;
        jo.PublishAsync.AckHandlerClosure = e;
        jo.PublishAsync.StallWait = 10;
        s = natsConnection_JetStream(&e->js, e->nc, &jo);
        if (s != NATS_OK)
                return jetstream_log(s, "cannot use JetStream");
        return 0;
}

int jetstream_stream_check(Exporter *e, const char *stream) {
        _cleanup_free_ char *subjects = NULL;
        jsStreamInfo *si = NULL;
        jsErrCode jerr = 0;
        natsStatus s;

        if (asprintf(&subjects, "%s.>", e->o->subject_prefix) < 0) {
                subjects = NULL;
                return log_oom();
        }
        s = js_GetStreamInfo(&si, e->js, stream, NULL, &jerr);
        if (s == NATS_OK) {
                bool covered = false;

                for (int i = 0; i < si->Config->SubjectsLen; i++)
                        covered = covered || streq(si->Config->Subjects[i], subjects) ||
                                  streq(si->Config->Subjects[i], ">");
                if (!covered)
                        log_error(
                                "warning: stream '%s' does not list the subjects '%s'; publishing may fail",
                                stream, subjects);
                if (e->o->create_stream && si->Config->Replicas != e->o->replicas)
                        log_error("stream '%s' exists with %" PRId64 " replicas, not %d: left as it is",
                                  stream, si->Config->Replicas, e->o->replicas);
                jsStreamInfo_Destroy(si);
                return 0;
        }
        if (s == NATS_NO_RESPONDERS) {
                log_error("no JetStream on the NATS servers (nobody answers its API)");
                fprintf(stderr, "Enable it in the servers' configuration: 'jetstream { store_dir: … }'.\n");
                return -EPROTONOSUPPORT;
        }
        if (jerr != JSStreamNotFoundErr && s != NATS_NOT_FOUND)
                return jetstream_log(s, "cannot look up the JetStream stream");
        if (!e->o->create_stream) {
                log_error("JetStream stream '%s' does not exist", stream);
                fprintf(stderr,
                        "Create it with 'tpctl export … --create-stream --replicas N', or with\n"
                        "'nats stream add %s --subjects \"%s\" --replicas N', or name another with "
                        "--stream.\n",
                        stream, subjects);
                return -ENOENT;
        }

        {
                const char *subj[] = { subjects };
                jsStreamConfig cfg;

                jsStreamConfig_Init(&cfg);
                cfg.Name = stream;
                cfg.Subjects = subj;
                cfg.SubjectsLen = 1;
                cfg.Replicas = e->o->replicas;
                cfg.Storage = js_FileStorage;
                s = js_AddStream(&si, e->js, &cfg, NULL, &jerr);
                if (s != NATS_OK)
                        return jetstream_log(s, "cannot create the JetStream stream");
                jsStreamInfo_Destroy(si);
                log_error("created JetStream stream '%s' (subjects '%s', %d replicas)", stream, subjects,
                          e->o->replicas);
        }
        return 0;
}
