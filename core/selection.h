/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/encode.h"
#include "core/follow.h"

struct tep_handle;
struct tep_event;
struct tep_event_filter;
typedef struct Decoder Decoder;

/*
 * What a live stream or a recording takes of the records: events, pids, CPUs, a filter, and the
 * print form of the lines. tpctl replay selects a capture's records with it too, by the same rules.
 */
typedef struct Selection {
        uint8_t *events; /* bitmap by event id; NULL means every event */
        size_t events_bits;
        int32_t *pids; /* none: every pid */
        size_t n_pids;
        /* The pids and their descendants (follow.h), in place of pids: NULL unless the stream
         * follows; its owner feeds it the kernel's forks and exits. */
        Follow *follow;
        /* With follow and no pids: the cgroup v2 subtree (cgroup.h) whose tasks follow holds; its
         * owner seeds it from the cgroup and feeds it the tasks' moves too. */
        char *cgroup;
        /* The ids of the subtree's cgroups (their directories' inode numbers, as the kernel's moves
         * name them whatever the reader's namespace), sorted; its owner fills them. */
        uint64_t *cgroup_ids;
        size_t n_cgroup_ids;
        uint8_t *cpus; /* bitmap; NULL means every CPU */
        size_t cpus_bits;
        struct tep_event_filter *filter;
        bool print;
} Selection;

/* What a selection is made of: a Stream or Record call's parameters, or tpctl replay's options. */
typedef struct SelectionSpec {
        struct tep_handle *tep;          /* the one the events belong to */
        struct tep_event *const *events; /* selected; none: every event */
        size_t n_events;
        /* Without selected events, the events a filter may apply to: it is set for each the kernel's
         * grammar takes it for, and records of the others do not pass it. */
        struct tep_event *const *others;
        size_t n_others;
        const int64_t *pids; /* checked by the caller: 0 to INT32_MAX */
        size_t n_pids;
        size_t follow_max;   /* 0: the pids alone; else their descendants too, this many at most */
        const char *cgroup;  /* with follow_max and no pids: a cgroup's tasks (checked by the caller) */
        const int64_t *cpus; /* checked by the caller: 0 to UINT_MAX */
        size_t n_cpus;
        const char *filter; /* NULL: none */
        bool print;
} SelectionSpec;

typedef enum SelectionFailure {
        SELECTION_FILTER_INVALID, /* the kernel's grammar refuses the filter for the event */
        SELECTION_FILTER_STREAM,  /* only the kernel could apply it: message names the event */
        SELECTION_FILTER_NONE,    /* it applies to none of the others */
} SelectionFailure;

/* Why a filter was refused (-EINVAL). */
typedef struct SelectionError {
        SelectionFailure failure;
        /* Index in the events (or the others) of the event the filter is invalid for; for
         * SELECTION_FILTER_STREAM the first it applies to; SIZE_MAX for SELECTION_FILTER_NONE. */
        size_t event;
        char *message; /* freed by the caller; NULL for SELECTION_FILTER_NONE */
} SelectionError;

void selection_done(Selection *sel);

int selection_select_event(Selection *sel, unsigned id);
int selection_select_cpu(Selection *sel, unsigned cpu);
int selection_select_pid(Selection *sel, int32_t pid);

/* Sets the filter on events (named: the events the caller selected, others: see SelectionSpec),
 * replacing any earlier one. Each event's text is read once (filter_canonicalize_stream()) and only
 * its canonical text reaches libtraceevent. On -EINVAL *ret_error (when not NULL) says why: the
 * kernel's grammar refusing it for a named event first, then the first event a stream cannot
 * apply it to, in order. */
int selection_set_filter(Selection *sel, struct tep_handle *tep, const char *filter,
                         struct tep_event *const *events, size_t n_events, bool named,
                         SelectionError *ret_error);

/* Selects spec's events, pids and CPUs and sets its filter (selection_set_filter()). On -EINVAL
 * *ret_error says why; on any error sel may hold part of the selection (selection_done() frees it). */
int selection_build(Selection *sel, const SelectionSpec *spec, SelectionError *ret_error);

static inline bool selection_has_cpu(const Selection *sel, unsigned cpu) {
        return !sel->cpus || (cpu < sel->cpus_bits && (sel->cpus[cpu / 8] & (1U << (cpu % 8))));
}

static inline bool selection_has_event(const Selection *sel, unsigned id) {
        return !sel->events || (id < sel->events_bits && (sel->events[id / 8] & (1U << (id % 8))));
}

/* Whether the record is selected. With a filter, only records of the events it was set for can
 * pass. d supplies a safe copy of the record for libtraceevent's filter engine; NULL when the
 * record's data is known to be well-formed. */
bool selection_matches(const Selection *sel, Decoder *d, const Record *r);
