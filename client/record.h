/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include <json-c/json.h>

#include "options.h"

/*
 * `tpctl record`: a capture written by tpctl as the calling user, either a trace-cmd data file
 * made of the raw pages tpd's Record method sends (nothing decoded on the way), or the NDJSON of
 * a Stream. Long captures rotate by size or time, keeping the newest files. The files are the
 * user's alone (0600), made afresh: a name that exists is refused unless force replaces it.
 */

typedef enum RecordFormat {
        RECORD_FORMAT_DAT,
        RECORD_FORMAT_NDJSON,
} RecordFormat;

typedef struct RecordOptions {
        const char *output;
        RecordFormat format;
        double duration;      /* seconds; 0: until interrupted */
        uint64_t max_size;    /* bytes of the whole capture; 0: no limit */
        uint64_t rotate_size; /* bytes per file; 0: no rotation by size */
        double rotate_time;   /* seconds per file; 0: no rotation by time */
        unsigned keep;        /* files kept when rotating; 0: all */
        int file_version;     /* of a trace-cmd data file: 6 or 7 */
        bool kallsyms;
        bool force; /* replace files that exist at the capture's names (by rename, never through) */
} RecordOptions;

/* Runs a capture with the selection in params (taken over). Returns the exit status. */
int record_run(const char *socket_path, json_object *params, const RecordOptions *o);

/* The format a file name implies: NDJSON for .ndjson, .json and .jsonl, else a data file. */
RecordFormat record_format_for(const char *path);

/* -o, --size, --format, --rotate-size, --rotate-time, --keep, --file-version, --no-kallsyms,
 * --force. */
extern const OptionTable record_option_table;

/* The shared options record takes. */
#define RECORD_OPTIONS (OPTION_SELECTION | OPTION_DURATION)

/* Returns the exit status. */
int record_verb(const CommonOptions *c, char **args, size_t n);
