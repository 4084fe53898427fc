/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include <systemd/sd-event.h>

#include "access.h"
#include "comm.h"
#include "config.h"
#include "core/cgroup-history.h"
#include "core/counters.h"
#include "core/decode.h"
#include "core/ksyms.h"
#include "lineage.h"
#include "loop.h"
#include "reader.h"
#include "rings.h"
#include "tracing.h"
#include "varlink.h"
#include "workers.h"

/*
 * The manager owns the daemon's parts and the data flow between them: readers hand it pages, the
 * decoder turns them into a batch, and the manager offers each record of the batch to every
 * stream, then lets the peers write. It also carries the settings and the daemon-wide counters.
 * Its work is split by concern over manager.c, decoding.c, counting.c, timekeeping.c,
 * transport.c, instance.c and persist.c; this header declares them all, grouped by file, as the API's
 * methods and each other use them.
 */

typedef struct Peer Peer;
typedef struct Manager Manager;

/* Answers a call (api_dispatch()): handed in by main, so that the manager does not depend on the
 * API that depends on it. */
typedef int (*ManagerDispatch)(Manager *m, Peer *p, const VarlinkCall *call);
typedef struct Server Server;

/* What the manager knows of one possible CPU (per_cpu/cpuN of the instance). */
typedef struct ManagerCpu {
        bool online;           /* at the last check of the online CPUs */
        bool open_failed;      /* online, but its reader could not be started: logged, retried */
        unsigned empty_drains; /* offline: checks in a row that found its buffer empty */
} ManagerCpu;

typedef struct Manager {
        Config config;

        sd_event *event;
        LoopStats loop; /* the cost of each dispatch of the loop: GetStatus "loop" */
        sd_event_source *flush_timer;
        /* No record for a few flushes: the flush timer sleeps and buffer_percent is 0, so that the
         * first record wakes tpd (manager_quiet_enter()). */
        bool quiet;
        bool quiet_unsupported; /* the kernel keeps 1 for a buffer_percent of 0 */
        bool quiet_leave_failed;
        unsigned empty_flushes; /* flushes in a row that found no page */
        uint64_t pages_seen;    /* pages handed over by the readers, ever */
        uint64_t pages_flushed; /* pages_seen at the last flush */
        sd_event_source *status_timer;
        uint64_t status_usec;         /* when the last STATUS= was sent */
        uint64_t status_records;      /* records decoded until then */
        sd_event_source *check_timer; /* once a second: CPUs online, and the instance as tpd set it */
        sd_event_source *sync_defer;  /* answers SYNC frames on the loop's next turn (transport.c) */
        unsigned instance_repairs;    /* repairs in a row, until a check finds nothing changed */

        Tracing *tracing;
        Decoder *decoder; /* the loop's: records without workers, and every record's variants */
        DecodeContext decode_context;
        Workers *workers;   /* DecodeWorkers=: NULL when the loop decodes */
        bool decode_auto;   /* DecodeWorkers=auto: workers in use as the load needs */
        uint64_t decode_ns; /* the loop's CPU time decoding since the last manager_scale_decoding() */
        uint64_t decode_checked_usec;
        unsigned decode_fewer;   /* checks in a row that wanted fewer workers */
        uint64_t decode_changes; /* of the workers in use, ever */
        CommCache *comm;
        Reader **readers; /* per possible CPU: NULL while it is offline and drained */
        ManagerCpu *cpus; /* per possible CPU */
        unsigned n_cpus;  /* possible CPUs: CPU numbers index the per-CPU arrays */
        bool cpus_read_failed;
        /* Guards accounts, overrun_reported and dropped_reported, and the reads of the kernel's
         * counters (tracing_cpu_stats()): decode workers report the losses pages flag. */
        pthread_mutex_t stats_lock;
        CpuAccount *accounts;       /* per CPU: the kernel's counters summed over buffer clears */
        uint64_t *overrun_reported; /* per CPU: overrun already reported in lost records */
        uint64_t *dropped_reported; /* per CPU: the kernel's "dropped events" likewise */
        uint64_t *decode_pending;   /* per CPU: records lost to a failed decode, not yet reported */

        char *state_path;
        sd_event_source *save_timer; /* debounces saving the state, see manager_save_state() */
        uint64_t save_due_usec;      /* latest time the pending save may be put off to; 0: none */
        uint64_t state_saves;        /* times the state file was written */
        int state_error;             /* negative errno of the last failed save, 0 after a success */

        Server *server;
        ManagerDispatch dispatch;
        Peer *peers;
        unsigned n_peers;
        unsigned n_refused;    /* of n_peers, connections only waiting for their refusal */
        unsigned n_streams;    /* decoded streams and recordings */
        unsigned n_recordings; /* of n_streams, recordings: they take pages, never decoded */
        Access access;         /* who may connect, and the limits of each */

        /* Streams that follow pids (following.c): the pages of all CPUs in time order. */
        Lineage lineage;
        struct {
                unsigned n;                /* streams that follow */
                TracingEvent *fork, *exit; /* once set up; held by tpd while n > 0 */
                TracingEvent *attach;      /* the same; NULL on a kernel without it */
                char *cgroup_mount;        /* the cgroup v2 hierarchy's, once a stream named a cgroup */
                bool held;
                bool draining; /* the last follower ended: the kernel's last records of
                                * fork and exit are yet to be read, and stripped */
                clockid_t clock;
                bool have_clock;        /* the trace clock is one the system reads */
                uint64_t *read_upto;    /* per CPU: everything written before this ts was read */
                bool reading;           /* the readers' pages go to the queues, nothing more */
                bool busy;              /* routing: the queues stay */
                sd_event_source *defer; /* reads and routes once the reader that handed pages over returns */
                uint64_t reads;
        } follow;

        /* Streams whose records carry their task's cgroup (attributing.c). */
        struct {
                unsigned n;
                CgroupHistory *history; /* while n > 0 */
                bool proc_ok;           /* tpd sees the records' pids in /proc */
                bool paths_ok;          /* and the kernel's cgroup paths as its own */
                uint64_t expired_usec;  /* CLOCK_MONOTONIC of the last look for exited tasks */
                unsigned fork_reads;    /* children read from /proc since the last flush */
        } attribution;

        /* Streams whose records carry their kernel stacks (stacking.c). */
        struct {
                unsigned n;
                Ksyms ksyms;           /* /proc/kallsyms, while n > 0 */
                uint64_t modules_hash; /* of /proc/modules when it was read */
                uint64_t checked_usec; /* CLOCK_MONOTONIC of the last look at /proc/modules */
                uint64_t reloads;
                /* Per CPU: the last record of its last batch, whose stack the next read brings. */
                struct StackHold *hold;
                uint64_t held, joined_late, unjoined;
        } stacks;

        Batch *batch;   /* reused while no peer holds a part of it */
        ShmRings rings; /* the shared-memory rings of streams that read them (rings.h) */

        /* A CLOCK_REALTIME timerfd that fires when the wall clock is set (TFD_TIMER_CANCEL_ON_SET):
         * streams that asked get the new offset of the trace clock to the wall clock. */
        int clock_fd;
        sd_event_source *clock_source;
        int64_t realtime_offset_ns; /* last sent */

        /* Events that Enable calls still being answered may enable: counted as enabled by the
         * check of MaxEnabledEvents=, so that calls answered meanwhile cannot take their room. */
        unsigned n_enabling;

        uint64_t delivered;   /* records queued to streams that have ended */
        uint64_t lost_client; /* likewise */

        /* Per-event counts (GetCounters), kept only while a connection that asked for them lives. */
        Counters *counters;
        unsigned n_counting;            /* connections that asked */
        uint64_t counting_usec;         /* CLOCK_MONOTONIC when counting started */
        uint64_t counting_overrun;      /* the kernel's overrun then, summed over CPUs */
        uint64_t counting_dropped;      /* its dropped events likewise */
        uint64_t counting_flushed_usec; /* when a GetCounters call last read the partial pages */
        char *counters_reply;           /* the last GetCounters reply, serialized; shared for a while */
        size_t counters_reply_len;
        uint64_t counters_reply_usec; /* CLOCK_MONOTONIC when it was built */
} Manager;

/* tpd's counters, for GetStatus and STATUS=: one place sums them. */
typedef struct ManagerCounters {
        uint64_t records;      /* event records decoded */
        uint64_t delivered;    /* event records queued to streams, ended ones included */
        uint64_t lost_client;  /* records streams lost to their full queues */
        uint64_t lost_overrun; /* records the kernel overwrote, as the page headers said */
        uint64_t lost_unknown; /* records of event ids tpd has no format for */
        uint64_t bad_pages;    /* pages that could not be walked */
} ManagerCounters;

/* manager.c: the Manager itself and the record path, from the readers' pages to the streams. */

int manager_new(const Config *config, Manager **ret);
Manager *manager_free(Manager *m);
DEFINE_TRIVIAL_CLEANUP_FUNC(Manager *, manager_free);

/* Creates the instance and readers, applies the settings, starts listening (on fd if >= 0). */
int manager_start(Manager *m, int listen_fd, ManagerDispatch dispatch);
int manager_run(Manager *m);

/* Counts a new stream, and wakes the flush timer that sleeps while there is none. */
void manager_stream_started(Manager *m);

/* Publishes a notice ({"ts":…,"notice":…,"message":…}) to the streams that read rings; the others
 * get it queued by the caller. */
void manager_publish_notice(Manager *m, uint64_t ts, const char *notice, const char *message);

/* A CPU's batch of records, decoded on the loop or by a worker: to the streams. */
void manager_on_decoded(Manager *m, unsigned cpu, Batch *b, int error);
/* Writes what every stream has queued; used after records were offered. */
void manager_flush_peers(Manager *m);

/* A reader's pages (its ReaderHandler): streams get them, as pages or records. */
void manager_on_pages(void *userdata, unsigned cpu, const void *pages, size_t n_pages, size_t page_size);
/* Reads what every CPU's buffer holds now and routes it: the partially filled pages too, and
 * through following.c's queues while a stream follows pids. */
void manager_read_all(Manager *m);
/* Routes pages to the recordings, the decoding and the streams: following.c's queued pages too. */
void manager_take_pages(Manager *m, unsigned cpu, const void *pages, size_t n_pages, size_t page_size);
/* The first record after a quiet spell: buffer_percent as configured, the flush timer running. */
void manager_quiet_leave(Manager *m);

/* following.c: streams that follow pids (lineage.h). A following stream starts (the first one holds
 * the fork and exit events: 0 or a negative errno from tracefs, nothing held then) and ends. */
int manager_follow_start(Manager *m);
void manager_follow_stop(Manager *m);
void manager_follow_done(Manager *m);
/* Marks the start of the selection's follow set (follow.h) and adds to it the threads and
 * descendants its roots have now (read from /proc, when tpd sees the records' pids), or the tasks
 * of its cgroup subtree: call after manager_follow_start(), so that no
 * fork falls between. */
void manager_follow_seed(Manager *m, Selection *sel);
/* The readers' pages while pages wait for each other: queued, and read and routed on the loop's
 * next turn. */
void manager_follow_pages(Manager *m, unsigned cpu, const void *pages, size_t n_pages, size_t page_size);
/* Reads every CPU to the end and routes what the watermark allows, while pages wait: for a sync, a
 * count, manager_read_all(). */
void manager_follow_flush(Manager *m);
/* The flush timer's: the same, each CPU read a batch at most (following.c). */
void manager_follow_tick(Manager *m);

/* attributing.c: streams whose records carry their task's cgroup. The first one reads the cgroup
 * of every task and follows (manager_follow_start()) for the forks, exits and moves, which the
 * lineage hands over here; the last one ends that. */
int manager_attribution_start(Manager *m);
void manager_attribution_stop(Manager *m);
/* The cgroup path pid was in at ts (*ret_len bytes, not NUL-terminated), or NULL when unknown: the
 * loop decoder's cgroup callback (core/decode.h). */
const char *manager_attribution_at(Manager *m, int pid, uint64_t ts, size_t *ret_len);
void manager_attribution_fork(Manager *m, const LineageChange *c);
void manager_attribution_exit(Manager *m, const LineageChange *c);
/* A move of c->pid and its threads tids (c->pid among them). */
void manager_attribution_move(Manager *m, const LineageChange *c, const int32_t *tids, size_t n);
/* After a flush: forgets the tasks that exited well before watermark, once a second at most. */
void manager_attribution_expire(Manager *m, uint64_t watermark);

/* aggregating.c (aggregating.h): a stream whose records go into an aggregation. */
typedef struct Aggregation Aggregation;
Aggregation *aggregation_free(Aggregation *a);
/* Takes what the stream selects of a batch of one CPU. */
void aggregation_feed(Aggregation *a, Decoder *d, Stream *s, const Batch *b);

/* stacking.c: streams whose records carry their kernel stacks. The first one reads the kernel's
 * symbols, the last one frees them. */
int manager_stacks_start(Manager *m);
void manager_stacks_stop(Manager *m);
/* The loop decoder's ksym callback (core/decode.h). */
size_t manager_stacks_name(Manager *m, uint64_t address, char *buf, size_t size);
/* Offers b of cpu to the streams that want stacks: first the record held from the CPU's last batch,
 * now with the stack that b leads with, then b's records but a last one whose stack is not read
 * yet, which waits for the next batch (or the next flush). */
void manager_stacks_offer(Manager *m, unsigned cpu, Batch *b);
/* From the flush timer: the records that waited since the last one go out without their stack,
 * and /proc/modules is looked at every few seconds (symbols reloaded when it changed). */
void manager_stacks_tick(Manager *m);
/* Whether b is held (not to be trimmed yet). */
bool manager_stacks_holds(const Manager *m, const Batch *b);

static inline bool manager_following(const Manager *m) {
        return m->follow.n > 0 || m->follow.draining || m->follow.reading || m->lineage.queued > 0;
}

/* decoding.c: the decoders, the loss counters they ask, the decode workers. */
int manager_setup_decoding(Manager *m);
/* The kernel's counters of cpu (per_cpu/cpuN/stats) summed over the lives of its buffer: they never
 * go back when a clock change clears it, as counters that GetStatus and metrics show must not;
 * entries is what the buffer holds now. */
int manager_cpu_stats(Manager *m, unsigned cpu, TracingCpuStats *ret);
/* The losses the kernel's counters of cpu show beyond those reported, as lost records appended to
 * b at ts: on the loop, or on cpu's decode worker (thread-safe). */
void manager_losses_into(Manager *m, unsigned cpu, uint64_t ts, Batch *b);
/* Pages that could not be handed to a worker: their records are lost, reported with the CPU's next
 * batch as a decode's are. */
void manager_decode_failed(Manager *m, unsigned cpu, int error, const void *pages, size_t n_pages,
                           size_t page_size);
/* Waits for the decode workers' batches and offers them (workers_sync()): for whoever must see
 * every record of the pages read so far. Nothing to do when the loop decodes. */
void manager_sync_decoding(Manager *m);
/* DecodeWorkers=auto: the workers in use, from the decoding's CPU time (once a second). */
void manager_scale_decoding(Manager *m);
/* Configure's DecodeWorkers=: "auto", or a number of the threads tpd started with (-ERANGE for more:
 * threads are made at start). */
int manager_set_decode_workers(Manager *m, const char *value);

/* counting.c: tpd's totals, the STATUS= line, and the per-event counts of GetCounters. */

void manager_counters(Manager *m, ManagerCounters *ret);

/* Starts keeping per-event counters for peer p, until it disconnects (GetCounters), after reading
 * what the buffers hold (each call does). Every record read from the kernel is counted from then
 * on, selected by a stream or not; while only counters are asked for, pages are walked for their
 * event ids and pids, not decoded. */
int manager_counting_start(Manager *m, Peer *p);
/* A connection that asked for counts ended: the last one ends the count. */
void manager_counting_stop(Manager *m);
/* The kernel's overrun and dropped events summed over CPUs, since counting started. */
void manager_counting_kernel_losses(Manager *m, uint64_t *ret_overrun, uint64_t *ret_dropped);

/* Count the records of pages no stream decodes (walked for their event ids and pids), or of a
 * decoded batch, while counting. */
void manager_count_pages(Manager *m, const void *pages, size_t n_pages, size_t page_size);
void manager_count_batch(Manager *m, const Batch *b);

/* Sends STATUS= every few seconds. */
int manager_add_status_timer(Manager *m);

/* timekeeping.c: the trace clock against the system's clocks. */

/* The wall clock minus the trace clock now, in ns, and the trace clock's name: -ENOENT for a trace
 * clock that no clock_gettime() clock reads (local, global, x86-tsc…). */
int manager_realtime_offset(Manager *m, int64_t *ret_offset_ns, char **ret_clock);
/* Now on the trace clock, as far as a system clock reads it (CLOCK_MONOTONIC for the others). */
uint64_t manager_trace_clock_now_ns(Manager *m);
/* Watches the wall clock for steps (a CLOCK_REALTIME timerfd), noting the offset now. */
int manager_watch_clock(Manager *m);
/* Sends the streams that asked a clock record when the offset moved (stepped: whatever it is). */
void manager_check_realtime(Manager *m, bool stepped);

/* transport.c: the shared-memory rings' glue. */

/* Sets the rings up as the settings say. */
void manager_setup_rings(Manager *m);
/* A ring reader's client wrote: WAIT frames. */
ssize_t manager_on_stream_input(Peer *p, const void *data, size_t size, void *userdata);
/* Queues a WAKE frame to a ring reader's client (owner: its Peer). */
void manager_shm_wake(void *owner, uint64_t head_seq);

/* instance.c: the instance and its readers, set up at start and checked once a second. */

/* Creates the instance and applies the settings to it. */
int manager_setup_instance(Manager *m);
/* Starts a reader for each online CPU; buffer clears from then on are accounted for. */
int manager_open_cpus(Manager *m);
/* Checks the CPUs online and the instance once a second. */
int manager_add_check_timer(Manager *m);

/* persist.c: the pins that outlive tpd. */

/* Schedules saving the pinned events and their filters, to be restored at the next start. The
 * write happens from a timer, MANAGER_SAVE_DELAY_USEC after the last change (at most
 * MANAGER_SAVE_MAX_DELAY_USEC after the first), and at stop: a call never waits for the disk. A
 * failed save is logged once, shown by GetStatus ("state_error") and retried. */
int manager_save_state(Manager *m);
/* Writes the state file now: from the save timer, and at stop for a save still pending. */
int manager_write_state(Manager *m);
/* Pins what the state file holds, skipping (and logging) what no longer works. */
int manager_restore_state(Manager *m);
/* Pins the events of Events=; one the kernel does not have stops the start. */
int manager_pin_configured(Manager *m);
