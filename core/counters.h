/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * Per-event record counts for `tpctl top` (GetCounters): for each event id, the records tpd read
 * from the kernel and the records streams lost (their queues were full), and the same per process
 * for a bounded table of processes. Pure code; the manager keeps one only while a client asks for
 * counters, and feeds it records it walks anyway.
 *
 * Memory is bounded whatever the load: at most COUNTERS_EVENTS_MAX events are counted one by one
 * (the rest under "other events"), each with at most COUNTERS_PIDS processes (the rest under "other
 * processes"). A process that wrote nothing during a whole aging period (counters_age(), once a
 * second) gives its slot to the next new process, its counts going to "other"; so the busy
 * processes of now are in the table within two periods, and for every event the processes' counts
 * plus "other" always sum to the event's count.
 */

#define COUNTERS_EVENTS_MAX 1024U
#define COUNTERS_PIDS 16U

typedef struct CounterPid {
        int32_t pid;
        uint32_t idle; /* no record during the last whole aging period: its slot may be taken */
        uint64_t records;
        uint64_t lost;
        uint64_t aged; /* records at the last aging */
} CounterPid;

typedef struct CounterEvent {
        uint16_t id;
        uint16_t n_pids;
        uint16_t last; /* the slot that took the last record: runs of one pid skip the search */
        uint64_t records;
        uint64_t lost;
        uint64_t other_records; /* of processes not in the table */
        uint64_t other_lost;
        CounterPid pids[COUNTERS_PIDS];
} CounterEvent;

typedef struct Counters {
        uint16_t *index; /* by event id: 1 + the position in events, 0 for none */
        size_t n_index;
        CounterEvent *events;
        size_t n_events;
        size_t cap;
        uint64_t other_records; /* of events beyond COUNTERS_EVENTS_MAX */
        uint64_t other_lost;
} Counters;

int counters_new(Counters **ret);
Counters *counters_free(Counters *c);

/* Counts n records of event id written by pid (read from the kernel), or n that a stream lost. */
void counters_add(Counters *c, uint16_t id, int32_t pid, uint64_t n);
void counters_add_lost(Counters *c, uint16_t id, int32_t pid, uint64_t n);

/* Ends an aging period: processes without records since the last call may give up their slots. */
void counters_age(Counters *c);

/* Records come in runs of one event and pid (a busy process on one CPU): a run is counted once, so
 * that a record of a run costs two comparisons and an addition. */
typedef struct CounterRun {
        Counters *counters;
        uint16_t id;
        int32_t pid;
        uint64_t n;
} CounterRun;

static inline void counter_run_flush(CounterRun *r) {
        if (r->n > 0)
                counters_add(r->counters, r->id, r->pid, r->n);
        r->n = 0;
}

static inline void counter_run_add(CounterRun *r, uint16_t id, int32_t pid, uint64_t n) {
        if (r->n > 0 && (r->id != id || r->pid != pid))
                counter_run_flush(r);
        r->id = id;
        r->pid = pid;
        r->n += n;
}
