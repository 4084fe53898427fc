/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include <json-c/json.h>

#include "options.h"

/*
 * tpctl export: one Stream of tpd published into a NATS JetStream stream, records batched by
 * subject (PREFIX.HOST.SYSTEM.EVENT, PREFIX.HOST.lost, PREFIX.HOST.notice).
 */

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

#define EXPORT_SUBJECT_PREFIX_DEFAULT "tpd"
#define EXPORT_BUFFER_SIZE_DEFAULT (64U * 1024U * 1024U)
#define EXPORT_BATCH_SIZE_DEFAULT (64U * 1024U)
#define EXPORT_BATCH_SIZE_MAX (512U * 1024U)

/* Whether p is usable as the head of NATS subjects: tokens of [A-Za-z0-9_-] joined by '.'. */
bool export_prefix_valid(const char *p);

/* Runs until SIGINT/SIGTERM (exit 0) or until tpd closes the stream; returns an exit status.
 * Takes params (the Stream call's parameters) over. */
int export_run(const char *socket_path, json_object *params, const ExportOptions *o);

/* --subject-prefix, --buffer-size, --batch-size, --creds, --tls-ca, --create-stream, --replicas,
 * --stream, --servers-file. */
extern const OptionTable export_option_table;

/* The shared options export takes. */
#define EXPORT_OPTIONS OPTION_SELECTION

/* `tpctl export [SERVERS]`. Returns the exit status. */
int export_verb(const CommonOptions *c, char **args, size_t n);
