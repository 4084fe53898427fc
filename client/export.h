/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <stddef.h>

#include "options.h"

/*
 * tpctl export: one Stream of tpd published into a NATS JetStream stream, records batched by
 * subject (PREFIX.HOST.SYSTEM.EVENT, PREFIX.HOST.lost, PREFIX.HOST.notice).
 */

#define EXPORT_SUBJECT_PREFIX_DEFAULT "tpd"
#define EXPORT_BUFFER_SIZE_DEFAULT (64U * 1024U * 1024U)
#define EXPORT_BATCH_SIZE_DEFAULT (64U * 1024U)
#define EXPORT_BATCH_SIZE_MAX (512U * 1024U)

/* --subject-prefix, --buffer-size, --batch-size, --creds, --tls-ca, --create-stream, --replicas,
 * --stream, --servers-file. */
extern const OptionTable export_option_table;

/* The shared options export takes. */
#define EXPORT_OPTIONS OPTION_SELECTION

/* `tpctl export [SERVERS]`. Returns the exit status. */
int export_verb(const CommonOptions *c, char **args, size_t n);
