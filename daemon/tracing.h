/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "cpustats.h"
#include "util.h"

struct tep_handle;
struct tep_event;

/*
 * Tracing control: everything tpd writes to tracefs. It owns the private instance, its clock and
 * buffer settings, the parsed event formats (only of events in use), and the reference counts that
 * decide whether an event is enabled: a pin set by Enable, plus one reference per live stream that
 * asked for it. Event names from peers are checked here, against the kernel's list, before any
 * of them reaches a path. tracing.c holds the instance, its settings and per-CPU files;
 * tracing-events.c the events; tracing-check.c tracing_check(). They share tracing-internal.h.
 */

typedef struct Tracing Tracing;

typedef struct TracingEvent {
        char *name; /* "system:event" */
        char *system;
        char *event;
        struct tep_event *format;
        /* The format file as read when it was loaded: a recording carries the formats of its
         * events, and reading hundreds of them again would hold the loop. */
        char *format_text;
        size_t format_size;
        char *filter;     /* kernel-side filter, NULL when none */
        uid_t filter_uid; /* who set it */
        unsigned streams;
        /* Held by tpd itself (tracing_event_hold()): its records are read for tpd's own use and,
         * unless a pin or a stream wants them too, shown to nobody (tracing_event_hidden()). */
        unsigned internal;
        uid_t *pin_uids; /* the uids that pinned the event, ascending, each once */
        size_t n_pin_uids;
        bool pinned; /* n_pin_uids > 0 */
        bool enabled;
        bool always_on; /* ftrace:* events have no enable switch: they are always recorded */
        /* Streams that want its records' kernel stacks, and whether its stacktrace trigger is set. */
        unsigned stacks;
        bool stacked;
} TracingEvent;

/* The kernel's counters as per_cpu/cpuN/stats reads now (cpustats.h sums them over resets). */
typedef CpuStats TracingCpuStats;

/* Called around each write of trace_clock, which clears the instance's buffers on the online CPUs
 * and sets their counters back to zero: first with done false, so that the caller reads out what
 * the buffers still hold and notes the counters; then, once the write succeeded, with done true. */
typedef void (*TracingClearHandler)(void *userdata, bool done);

/* Sets libtracefs' and libtraceevent's log levels from ours (log_get_max_level()). */
void tracing_setup_logging(void);

/* Mounts tracefs if needed and creates the instance, reclaiming one a crashed tpd left behind.
 * An instance that another process holds open (another tpd, in any PID namespace) is left
 * untouched: -EBUSY. */
int tracing_new(const char *instance, Tracing **ret);
/* Disables everything tpd enabled and removes the instance. */
Tracing *tracing_free(Tracing *t);
DEFINE_TRIVIAL_CLEANUP_FUNC(Tracing *, tracing_free);

const char *tracing_instance_name(Tracing *t);
struct tep_handle *tracing_tep(Tracing *t);
/* A new tep handle holding the header page and every format loaded so far, for a decoder on
 * another thread (daemon/workers.h); the handler hears of each format loaded after it. */
int tracing_tep_copy(Tracing *t, struct tep_handle **ret);
/* Called on the loop after an event's format was parsed, with the text parsed. */
typedef void (*TracingFormatHandler)(void *userdata, const char *system, const char *text, size_t size);
void tracing_set_format_handler(Tracing *t, TracingFormatHandler handler, void *userdata);
/* Parses an event's format into tep: libtraceevent's parser is not thread-safe, even across tep
 * handles, so every parse of tpd goes through here. 0 or -EBADMSG. */
int tracing_parse_format(struct tep_handle *tep, const char *system, const char *text, size_t size);
/* The kernel's pid → comm table, global to tracefs. */
const char *tracing_saved_cmdlines_path(Tracing *t);
unsigned tracing_n_cpus(Tracing *t);
size_t tracing_page_size(Tracing *t);

/* -EINVAL for a name the instance's trace_clock does not list. */
int tracing_set_clock(Tracing *t, const char *clock);
/* Sets the handler told of the buffer clears of tpd's own trace_clock writes (tracing_set_clock()
 * and tracing_check() putting the clock back). */
void tracing_set_clear_handler(Tracing *t, TracingClearHandler handler, void *userdata);
/* The trace clock: the one tpd set, which tracing_check() puts back within a second of a change. */
int tracing_get_clock(Tracing *t, char **ret);
int tracing_set_buffer_size_kb(Tracing *t, unsigned kb);
int tracing_get_buffer_size_kb(Tracing *t, unsigned *ret);
int tracing_set_buffer_percent(Tracing *t, unsigned percent);
/* options/overwrite: a full buffer overwrites its oldest records (the kernel's default), or drops
 * new ones. */
int tracing_set_overwrite(Tracing *t, bool overwrite);

/* Opens the cpu's trace_pipe_raw, non-blocking. */
int tracing_open_cpu(Tracing *t, unsigned cpu);
int tracing_cpu_stats(Tracing *t, unsigned cpu, TracingCpuStats *ret);

/* Sorted "system:event" names of the kernel's events matching a glob (all for NULL). */
int tracing_list_events(Tracing *t, const char *pattern, char ***ret);

/* Expands names and globs into known event names (deduplicated, sorted). On -ENOENT (no such
 * event, or a glob matching nothing) and -EINVAL (malformed) *ret_bad is the offending input. */
int tracing_resolve(Tracing *t, char *const *patterns, size_t n, char ***ret_names, const char **ret_bad);
/* The same with bounds (0: none): more than max_patterns distinct patterns fails with -E2BIG and
 * *ret_count the number of them; a glob matching more than max_glob_events events fails with
 * -EPERM, *ret_bad the glob and *ret_count its matches. Each distinct pattern costs one match over
 * the list, and an unknown name rereads the kernel's list at most once a second. */
int tracing_resolve_limited(Tracing *t, char *const *patterns, size_t n, size_t max_patterns,
                            size_t max_glob_events, char ***ret_names, const char **ret_bad,
                            size_t *ret_count);

/* The state of a known event, loading its format on first use. */
int tracing_event_get(Tracing *t, const char *name, TracingEvent **ret);
/* The state of an event whose format was loaded, or NULL; no I/O. */
TracingEvent *tracing_event_find(Tracing *t, const char *name);
/* How many events tpd has enabled in the kernel (the always recorded ftrace:* not counted). */
unsigned tracing_n_enabled(Tracing *t);
/* Events tpd holds (pinned or referenced by a stream), for status. */
TracingEvent *const *tracing_events(Tracing *t, size_t *ret_n);

/* Checks a filter against an event's format without touching tracefs; on -EINVAL *ret_message
 * says why. */
int tracing_filter_verify(Tracing *t, TracingEvent *e, const char *filter, char **ret_message);
/* Sets (or with NULL clears) an event's kernel filter. When the kernel rejects it the previous
 * filter is written back, since a failed write leaves the event unfiltered. */
int tracing_event_set_filter(Tracing *t, TracingEvent *e, const char *filter, char **ret_message);

/* Adds or removes a pin or a stream reference; enables or disables the event in the kernel when
 * the first reference comes or the last one goes. tracing_event_pin() pins as root (uid 0), or
 * removes every uid's pin. */
int tracing_event_pin(Tracing *t, TracingEvent *e, bool pin);
/* Adds or removes the pin of one uid; an event stays enabled while any uid pins it. */
int tracing_event_pin_uid(Tracing *t, TracingEvent *e, uid_t uid, bool pin);
bool tracing_event_pinned_by(const TracingEvent *e, uid_t uid);
int tracing_event_ref(Tracing *t, TracingEvent *e);
int tracing_event_unref(Tracing *t, TracingEvent *e);
/* tpd's own hold of an event (TracingEvent.internal), counted like a stream's. */
int tracing_event_hold(Tracing *t, TracingEvent *e, bool hold);
/* A stream's hold of the event's stacktrace trigger in the instance (the kernel then writes an
 * ftrace:kernel_stack record after each of its records), counted: set with the first, removed
 * with the last. */
int tracing_event_stack(Tracing *t, TracingEvent *e, bool stack);

/* Whether a pin, a stream or the config wants the event's records (tpd's own hold aside). */
static inline bool tracing_event_wanted(const TracingEvent *e) {
        return e->pinned || e->streams > 0 || e->always_on;
}

/* Whether only tpd's own hold keeps the event enabled: its records are nobody's to see. */
static inline bool tracing_event_hidden(const TracingEvent *e) {
        return e->internal > 0 && !tracing_event_wanted(e);
}

/* The "print fmt" line of an event's format, as the kernel wrote it. */
int tracing_event_print_fmt(Tracing *t, TracingEvent *e, char **ret);

/* The files, relative to the tracing directory, that describe the pages of the instance: what a
 * trace-cmd data file carries besides them. NULL-terminated; trace_clock is the instance's. */
extern const char *const tracing_meta_files[];
/* Reads tracing_meta_files[index]. */
int tracing_read_meta(Tracing *t, size_t index, char **ret, size_t *ret_size);
/* The event's format file, from what was read when it was loaded (read again only when the format
 * came from elsewhere); *ret_path gets its path relative to the tracing directory. */
int tracing_event_format(Tracing *t, TracingEvent *e, char **ret_path, char **ret, size_t *ret_size);

/* Compares the instance with what tpd set (enabled events, their kernel filters, tracing_on, the
 * clock, buffer_percent, the cpumask, overwrite) and puts back whatever another process changed.
 * Returns 0 when nothing changed, or the number of changes with *ret_report saying what changed
 * and what was done, in one line (text from tracefs escaped). Cheap enough for once a second:
 * a few small reads, at most 32 filter files. */
int tracing_check(Tracing *t, char **ret_report);
