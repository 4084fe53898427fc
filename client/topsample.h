/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <json-c/json.h>

#include "linereader.h"

/*
 * The counts `tpctl top` shows: a sample per refresh, each event with its processes (the last row
 * of each, "other"), as tpd's GetCounters reply gives them or as tpctl counts a command's stream;
 * rates between two samples, the orders, and the rows summed by cgroup or unit. Text from tpd is
 * escaped for a terminal here (top_escape()), once.
 */

typedef enum TopSort {
        TOP_SORT_RATE,
        TOP_SORT_TOTAL,
        TOP_SORT_LOST,
        TOP_SORT_NAME,
} TopSort;

/* What an event's rows are: processes, or the cgroups or systemd units they are in now. */
typedef enum TopBy {
        TOP_BY_PID,
        TOP_BY_CGROUP,
        TOP_BY_UNIT,
} TopBy;

typedef struct TopProc {
        int pid; /* -1: the "other" row; of a group (--by), 0 */
        char *comm;
        uint64_t total;
        uint64_t lost;
        double rate; /* NAN until there are two samples */
} TopProc;

typedef struct TopEvent {
        char *name;
        int64_t id;
        uint64_t total;
        uint64_t lost;
        double rate;
        TopProc *procs; /* the last one is "other" */
        size_t n_procs, procs_cap;
} TopEvent;

typedef struct TopSample {
        uint64_t usec;
        double interval; /* seconds since the previous sample, 0 for the first */
        TopEvent *events;
        size_t n_events, events_cap;
        uint64_t other_records; /* of events beyond tpd's bound */
        uint64_t other_lost;
        uint64_t overrun;
        uint64_t dropped;
        double rate; /* of all records */
        TopBy by;    /* what the rows of events are: comm holds a group's name */
} TopSample;

void top_sample_free(TopSample *s);

/* A GetCounters reply as a sample. 0 or -ENOMEM. */
int top_parse(json_object *params, TopSample **ret);
/* Rates of s against the sample before it (none for the first). */
void top_rates(TopSample *s, const TopSample *prev);
void top_sort(TopSample *s, TopSort sort);
const char *top_sort_name(TopSort sort);
/* Parses "rate", "total", "lost" or "name". */
int top_sort_from_string(const char *s, TopSort *ret);
/* Parses "pid", "cgroup" or "unit". */
int top_by_from_string(const char *s, TopBy *ret);

/* The processes of each event summed by their group: a sample of its own, for showing. NULL: no
 * memory. */
TopSample *top_group(const TopSample *s, TopBy by);
/* A deep copy of s; NULL: no memory. */
TopSample *top_sample_copy(const TopSample *s);

/* A record of a command's stream (top -- CMD) counted into s, by event and process. 0 or
 * -ENOMEM. */
int top_count(TopSample *s, const LineHead *h);
/* A lost record of that stream. */
void top_count_lost(TopSample *s, const LineHead *h);
