/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "options.h"

/*
 * `tpctl replay`: a capture printed again as `tpctl stream` prints records, with stream's selection.
 * A trace-cmd data file (version 6 or 7, from `trace-cmd record` or from tpd's recording) is read
 * with libtracecmd and decoded by tpd's own decoder (core/decode.c), selected by tpd's own stream
 * matching and filters (core/stream.c, core/filter.c); an NDJSON capture is selected line by
 * line and printed byte for byte.
 */

typedef struct ReplayOptions {
        char *const *events; /* names or globs, like stream's EVENT arguments; none: everything */
        size_t n_events;
        const int *pids;
        size_t n_pids;
        const int *cpus;
        size_t n_cpus;
        const char *filter; /* a stream filter; trace-cmd data files only */
        bool print;         /* add "print"; trace-cmd data files only */
        /* Read a data file in this process, not in a child that turns a crash of libtracecmd into
         * an error: for a fuzzer, which must see it. */
        bool in_process;
        int out_fd; /* where the records go (tpctl convert); 0: standard output */
} ReplayOptions;

/* Prints the records of the capture at path that the options select. Returns an exit status:
 * 0, 1 (no such file, not a capture, a damaged one, an event or filter that does not apply) or 2
 * (an option the capture's format cannot honour). */
int replay_file(const char *path, const ReplayOptions *o);

/* The shared options replay takes; it has none of its own. */
#define REPLAY_OPTIONS (OPTION_SELECTION | OPTION_PRINT)

/* `tpctl replay FILE [EVENT...]`: args[0] is the file. Returns the exit status. */
int replay_verb(const CommonOptions *c, char **args, size_t n);
