/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "loss.h"
#include <nats/nats.h>

/*
 * The inside of `tpctl export`, shared by its two halves: export.c reads tpd's stream into batches
 * by subject, jetstream.c publishes them (its publisher thread and libnats' callbacks).
 */

/* What export is asked to do: its options. */
typedef struct ExportOptions {
        const char *servers;        /* nats://HOST:PORT[,…] */
        const char *servers_file;   /* or a file of them (servers.h) */
        const char *subject_prefix; /* first subject token, default "tpd" */
        const char *stream;         /* JetStream stream name, default: the prefix in capitals */
        const char *creds;          /* NATS credentials file (JWT and NKey seed) */
        const char *tls_ca;         /* CA certificates to verify the servers with; enables TLS */
        size_t buffer_size;         /* bytes allocated for records while not acknowledged */
        size_t batch_size;          /* bytes per message; 0: one record per message */
        int replicas;               /* with create_stream */
        bool create_stream;
} ExportOptions;

typedef struct Subject Subject;

/* A sealed batch: its records are in msg, ours except while libnats sends it (then NULL). */
typedef struct ExportBatch {
        struct ExportBatch *next;
        Subject *subject;
        uint64_t seq; /* message number of this run */
        size_t records;
        size_t cost; /* charged to Exporter.held */
        natsMsg *msg;
} ExportBatch;

struct Subject {
        char *key; /* event name; "" for lost records, "\n" for anything else */
        char *name;
        size_t overhead; /* the cost of one of its batches besides the records */
        /* The open batch: records appended since the last seal, in a buffer kept for the next. */
        char *buf;
        size_t len, cap, records;
        uint64_t opened;
};

typedef struct Exporter {
        const ExportOptions *o;
        char msg_id_prefix[128];
        natsOptions *nopts;
        natsConnection *nc;
        jsCtx *js;

        pthread_mutex_t lock;
        pthread_cond_t cond;
        /* Everything below is under lock. */
        ExportBatch *ready;      /* sealed, in seq order */
        ExportBatch *ready_last; /* its tail: sealing is O(1) however long the backlog */
        ExportBatch *inflight;
        size_t n_inflight;
        size_t held; /* bytes allocated for open buffers, open, ready and in-flight batches */
        uint64_t next_seq;
        bool connected;
        bool stopping;
        uint64_t retry_at;
        unsigned backoff_ms;
        bool failing;
        uint64_t unreported[_TPD_LOST_MAX]; /* by cause: lost records not yet queued as a lost record */
        bool dropping;
        uint64_t last_ts;

        char *base; /* PREFIX.HOST, the head of every subject */
        Subject **subjects;
        size_t n_subjects;
        Subject *last_subject;

        /* Totals for the summary. */
        uint64_t records_read, records_acked, messages_acked, duplicates, lost_export;
} Exporter;

/* The queue (callers hold e->lock), export.c's. */
void export_batch_free(ExportBatch *b);
/* Puts b into the ready list at its place by seq: new batches at the tail, failed ones near the head. */
void export_batch_requeue(Exporter *e, ExportBatch *b);

/* The JetStream side, jetstream.c's. */

/* Prints what libnats says went wrong, its servers' passwords left out. Returns -EIO. */
int jetstream_log(natsStatus s, const char *what);

/* Connects to the servers (their URLs joined by commas, taken over) with JetStream. */
int jetstream_connect(Exporter *e, char *servers);

/* Checks the stream of that name, or creates it with --create-stream. */
int jetstream_stream_check(Exporter *e, const char *stream);

/* The publisher thread: publishes ready batches in order, a window of them unacknowledged. */
void *jetstream_publisher(void *userdata);
