/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ratelimit.h"

/* available_events is reread for an unknown name at most this often. */
#define TRACING_RELOAD_USEC (1000 * 1000ULL)

/*
 * Between the files of tracing control (tracing.c, tracing-events.c, tracing-check.c): the state
 * of a Tracing and the helpers they share. Nothing outside them includes this; everyone else goes
 * through tracing.h. It names the types tracing.h defines without including it, so that tracing.h
 * stays the module's only way in.
 */

struct tep_handle;
struct tracefs_instance;
typedef struct Tracing Tracing;
typedef struct TracingEvent TracingEvent;

/* Instance files whose content tpd decides, watched by tracing_check(): the value read back
 * after tpd's last write (or at creation) is the expected one, and is written back on a change. */
#define TRACING_N_WATCHED 4
extern const char *const tracing_watched_files[TRACING_N_WATCHED];
/* The one that stops recording: put back last, once everything else is as tpd wants it. */
#define WATCHED_TRACING_ON (TRACING_N_WATCHED - 1)

struct Tracing {
        struct tracefs_instance *instance;
        struct tep_handle *tep;
        char *name;
        /* set_event, held open for tpd's whole life: the kernel refuses to rmdir an instance with
         * open files, so no other tpd (in any PID namespace) can reclaim it from under us, and it
         * is ours to write to as long as this is open. tracing_check() reads it. */
        int hold_fd;
        char *clock;                                      /* the trace clock tpd wants */
        int clock_fd;                                     /* trace_clock, for tracing_check() */
        char *watched[TRACING_N_WATCHED];                 /* expected content of watched_files */
        int watched_fd[TRACING_N_WATCHED];                /* kept open: a check costs one pread each */
        size_t check_cursor;                              /* next event whose filter tracing_check() reads */
        void (*clear_handler)(void *userdata, bool done); /* a TracingClearHandler */
        void *clear_userdata;
        char *saved_cmdlines;
        unsigned n_cpus;
        int *stats_fd; /* per CPU: per_cpu/cpuN/stats once read, kept open: the flush timer reads them */
        size_t page_size;

        char **available; /* sorted "system:event" names the kernel has */
        size_t n_available;
        TracingEvent **by_index; /* per entry of available: its loaded event, or NULL */
        RateLimit reload_limit;  /* rereads of available_events, counted from the last one */
        unsigned n_enabled;      /* events tpd enabled (always-on ones not counted) */

        TracingEvent **events; /* events whose format was loaded, in order of first use */
        size_t n_events;
        char *header_page; /* events/header_page, for tracing_tep_copy() */
        size_t header_page_size;
        void (*format_handler)(void *userdata, const char *system, const char *text, size_t size);
        void *format_userdata;
};

/* tracing.c */
int tracing_cmp_names(const void *a, const void *b); /* for qsort() and bsearch() of char * */
int tracing_file_write(Tracing *t, const char *file, const char *value);
int tracing_event_write(Tracing *t, const TracingEvent *e, const char *file, const char *value);
/* Writes trace_clock, which clears the buffers: the handler hears of it before and after. */
int tracing_clock_write(Tracing *t, const char *clock);
char *tracing_strip_newline(char *s);
/* The selected clock of trace_clock's "local [boot] mono …". */
char *tracing_clock_from_text(const char *text);

/* tracing-check.c */
/* The whole text of an instance file kept open, read from its start with pread(2), where a read by
 * path also costs an open and a close. Falls back to the path when the file is not open. */
char *tracing_read_instance_file(Tracing *t, int fd, const char *file);

/* tracing-events.c */
/* Reads the kernel's list of events; events already loaded keep their state. */
int tracing_load_available(Tracing *t);
TracingEvent *tracing_event_free(TracingEvent *e);
