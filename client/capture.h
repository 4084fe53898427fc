/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#include "datfile.h"
#include "perfetto.h"
#include "tpd-protocol.h"

/*
 * The files `tpctl record` writes: one capture, its files named, checked, opened, rotated, kept
 * (--keep) and finished, with what tpd sends written in (Record's frames into a trace-cmd data file
 * or a Perfetto trace, Stream's NDJSON lines). record.c talks with tpd; this is what it writes
 * with.
 */

typedef enum RecordFormat {
        RECORD_FORMAT_DAT,
        RECORD_FORMAT_NDJSON,
        RECORD_FORMAT_PERFETTO, /* Record's pages as a Perfetto trace (perfetto.h), one file */
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
        bool force;      /* replace files that exist at the capture's names (by rename, never through) */
        bool until_sync; /* a command's capture (command.h): it ends at tpd's "sync" notice */
} RecordOptions;

typedef struct CaptureFile {
        char *name;
        struct stat st; /* to remove it with --keep only while it is the file written */
} CaptureFile;

typedef struct Capture {
        const RecordOptions *o;
        int dir_fd; /* the output's directory: every name below is in it */
        char *name; /* the output's name in it */
        /* Files: the current one and those finished, oldest first. */
        CaptureFile *done;
        size_t n_done;
        unsigned serial;
        char *current;
        double file_start;
        uint64_t finished_bytes; /* of the files finished and kept or not */
        /* A data file's, or an NDJSON file's descriptor. */
        DatMeta *meta;
        DatFile *dat;
        int fd;
        uint64_t fd_bytes;
        /* A Perfetto trace's writer, its file's private name until it is whole, and tpd's reply to
         * Stream that starts it. */
        PerfettoWriter *pf;
        char *tmp;
        json_object *reply;
        /* Counters for the status line and the summary. */
        uint64_t records;
        uint64_t lost;
        uint64_t lost_unknown; /* losses flagged without a count */
        uint64_t bytes;
        bool size_reached;
        bool names_only; /* a data file at --size: of what follows, only names go in */
        bool tty;        /* stderr shows a status line */
        bool synced;     /* tpd's "sync" notice came (with until_sync): every record is in */
} Capture;

/* CLOCK_MONOTONIC in seconds: of file_start, and of record's deadlines. */
double capture_now(void);

/* Before anything is recorded: a name the capture would write must not exist, unless --force. 0 or
 * a negative errno (printed). */
int capture_check_names(const Capture *c);

/* Opens the capture's first (or next) file. */
int capture_open(Capture *c);

/* Finishes the current file and drops the oldest beyond --keep. */
int capture_close(Capture *c);

/* Before n more bytes go to the current file: rotates when due. Returns 1 to write, 0 to stop. */
int capture_room(Capture *c, size_t n);

/* One frame of Record's into the data file: a page of a CPU's, names or a notice. */
int capture_frame(Capture *c, const TpdFrame *f, const uint8_t *payload, size_t page_size);

/* The complete lines of data (len bytes) into the NDJSON file; *ret_used: the bytes taken. */
int capture_lines(Capture *c, const uint8_t *data, size_t len, size_t *ret_used);

/* The status line on stderr (a terminal's): records, rate and losses since start; final ends it. */
void capture_status_line(const Capture *c, double start, bool final);

void capture_done(Capture *c);
