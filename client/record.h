/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <stddef.h>

#include "options.h"

/*
 * `tpctl record`: a capture written by tpctl as the calling user, either a trace-cmd data file
 * made of the raw pages tpd's Record method sends (nothing decoded on the way), or the NDJSON of
 * a Stream. Long captures rotate by size or time, keeping the newest files. The files are the
 * user's alone (0600), made afresh: a name that exists is refused unless force replaces it.
 */

/* -o, --size, --format, --rotate-size, --rotate-time, --keep, --file-version, --no-kallsyms,
 * --force. */
extern const OptionTable record_option_table;

/* The shared options record takes. */
#define RECORD_OPTIONS \
        (OPTION_SELECTION | OPTION_DURATION | OPTION_FOLLOW | OPTION_CGROUP | OPTION_STACK | OPTION_FORMAT)

/* Returns the exit status. */
int record_verb(const CommonOptions *c, char **args, size_t n);
