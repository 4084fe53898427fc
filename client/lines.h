/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

/*
 * The stream's lines when tpctl has to look at them (--count, --duration, --time, --ordered);
 * without those options copy.c moves them untouched. The lines come from tpd's socket or, for a
 * stream over shared memory, from the ring (shm.c), through one consumer. Only the fixed start of
 * each line is read (linereader.h), so a line costs a few comparisons, not a JSON parse.
 */

/* The longest line of a stream tpctl reads: tpd's lines are bounded by its records (16-bit lengths
 * inside a record), far below this. */
#define LINES_LINE_MAX (16U * 1024U * 1024U)
/* CPUs tpctl keeps apart: the kernel's NR_CPUS is at most this. */
#define LINES_CPUS_MAX 8192U

typedef enum LinesTime {
        LINES_TIME_BOOT,     /* "ts" only, as tpd sends it */
        LINES_TIME_ISO,      /* "time":"2026-12-01T02:30:00.123456789Z" after "ts" */
        LINES_TIME_RELATIVE, /* "time":1.234567890, seconds since the stream began */
} LinesTime;

typedef struct LinesOptions {
        uint64_t count;         /* stop after this many event records; 0: no bound */
        uint64_t duration_usec; /* stop this long after the stream began; 0: no bound */
        LinesTime time;
        bool have_offset;
        int64_t realtime_offset_ns; /* wall clock = ts + this, until a clock record says otherwise */
        bool have_clock;            /* the trace clock is clock_id's (boot, mono, …) */
        clockid_t clock_id;
        uint64_t start_ts; /* of the stream's start, on the trace clock; 0: the first record's */
        bool ordered;
        uint64_t order_delay_ns; /* a record waits at most this long after its ts for older ones */
        unsigned n_cpus;         /* CPUs whose records are merged; 0: unknown */
        /* A command's stream (command.h): it ends at tpd's "sync" notice, which is not written, and
         * SIGINT and SIGTERM are left to the caller. */
        bool until_sync;
        /* Where the lines go instead of out, as tpd sent them (time is LINES_TIME_BOOT): a Perfetto
         * trace's writer (perfetto.h). 0, or a negative errno that ends the stream. */
        int (*sink)(void *userdata, const char *line, size_t n);
        void *sink_userdata;
} LinesOptions;

/* The line consumer: what lines_run() fills from a source. */
typedef struct Lines Lines;

/* Hands one line of the stream (its newline included) to l: 0, or -ENOMEM. Once a bound of the
 * options is reached, lines are ignored. */
int lines_feed(Lines *l, const char *line, size_t n);

/* What a source's pull() returns, besides a negative errno. */
enum {
        LINES_SOURCE_WAIT, /* nothing more now: pull again once fd is readable */
        LINES_SOURCE_MORE, /* more may be had at once */
        LINES_SOURCE_END,  /* tpd ended the stream, and everything it sent was taken */
};

/* Where lines_run() takes the stream's lines from: tpd's socket (lines_stream()) or the shared ring
 * (shm.h). */
typedef struct LinesSource {
        int fd; /* readable when pull() may find more */
        /* Feeds what it has now to lines_feed(), without blocking. last: the stream is being
         * ended by a signal: take only what tpd already sent, and ask tpd for nothing. */
        int (*pull)(void *userdata, Lines *l, bool last);
        void *userdata;
} LinesSource;

/* Takes lines from src until tpd ends the stream (returns 0), a bound of the options is reached or
 * SIGINT/SIGTERM arrives (returns 1; what is held back for ordering goes out first), stdout's
 * reader goes away (-EPIPE), or another failure (negative errno). */
int lines_run(const LinesSource *src, int out, const LinesOptions *o);

/* lines_run() on the socket: head is what arrived with the reply. */
int lines_stream(int sock, int out, const char *head, size_t head_len, const LinesOptions *o);
