/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <stddef.h>

#include "options.h"

/*
 * `tpctl stream`: one Stream call, its connection upgraded, and tpd's NDJSON copied to stdout. The
 * lines are copied untouched (copy.c) unless --count, --duration, --time or --ordered make tpctl
 * look at them (lines.c). With --transport=shm or auto, tpd may hand over its shared ring instead
 * and the lines are read from it (shm.c), into the same two paths.
 */

/* --symbolic, --count, --time, --ordered, --transport. */
extern const OptionTable stream_option_table;

/* The shared options stream takes. */
#define STREAM_OPTIONS                                                                                      \
        (OPTION_SELECTION | OPTION_PRINT | OPTION_DURATION | OPTION_FOLLOW | OPTION_CGROUP | OPTION_STACK | \
         OPTION_FORMAT)

/* Returns the exit status. */
int stream_verb(const CommonOptions *c, char **args, size_t n);
