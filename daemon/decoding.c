/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The manager's decoding (manager.h): the decoders, the loss counters they ask, and the decode
 * workers (daemon/workers.h), which DecodeWorkers=auto puts to use as the load needs. */
#include <inttypes.h>
#include <sched.h>
#include <stdlib.h>

#include "core/page.h"
#include "log.h"
#include "manager.h"
#include "ratelimit.h"

/* The kernel's counters of cpu summed over the clears of its buffer (cpustats.h): every loss account
 * of tpd takes differences of these, never of the raw counters, which a clear sets back to zero.
 * With the stats lock held: decode workers ask too (manager_missed()). */
static int manager_cpu_stats_locked(Manager *m, unsigned cpu, TracingCpuStats *ret, bool *ret_cleared) {
        TracingCpuStats raw;
        int r;

        if (cpu >= m->n_cpus)
                return -EINVAL;
        r = tracing_cpu_stats(m->tracing, cpu, &raw);
        if (r < 0)
                return r;
        *ret_cleared = cpu_account_sample(&m->accounts[cpu], &raw, ret);
        return 0;
}

int manager_cpu_stats(Manager *m, unsigned cpu, TracingCpuStats *ret) {
        bool cleared = false;
        int r;

        pthread_mutex_lock(&m->stats_lock);
        r = manager_cpu_stats_locked(m, cpu, ret, &cleared);
        pthread_mutex_unlock(&m->stats_lock);
        /* Logged on the loop only: a worker's read (manager_missed()) notes the clear silently. */
        if (cleared)
                log_debug("CPU %u: the kernel's counters went back: its buffer was cleared by another "
                          "process; counting on from there.",
                          cpu);
        return r;
}

void manager_losses_into(Manager *m, unsigned cpu, uint64_t ts, Batch *b) {
        TracingCpuStats st;
        bool cleared;
        int r = 0;

        /* Read under the lock, with the counter as the last report left it: a page's loss
         * (manager_missed()) and this report each take the counter from where the other ended. */
        pthread_mutex_lock(&m->stats_lock);
        if (cpu >= m->n_cpus || manager_cpu_stats_locked(m, cpu, &st, &cleared) < 0)
                goto out;
        if (st.overrun > m->overrun_reported[cpu]) {
                r = batch_add_lost(b, ts, cpu, st.overrun - m->overrun_reported[cpu], TPD_LOST_OVERRUN);
                if (r >= 0) {
                        b->records[b->n_records - 1].lost_base = m->overrun_reported[cpu];
                        m->overrun_reported[cpu] = st.overrun;
                }
        }
        if (r >= 0 && st.dropped > m->dropped_reported[cpu]) {
                r = batch_add_lost(b, ts, cpu, st.dropped - m->dropped_reported[cpu], TPD_LOST_DROPPED);
                if (r >= 0) {
                        b->records[b->n_records - 1].lost_base = m->dropped_reported[cpu];
                        m->dropped_reported[cpu] = st.dropped;
                }
        }
out:
        pthread_mutex_unlock(&m->stats_lock);
}

static void manager_worker_losses(void *userdata, unsigned cpu, uint64_t ts, Batch *b) {
        manager_losses_into(userdata, cpu, ts, b);
}

/* A page flags that the kernel overwrote records before it. The count it may store is the overrun
 * since the kernel's previous page swap; when the page was full it stores none, and only the
 * kernel's counter tells. Reading the counter later counts overruns that a later page will flag
 * again, so the two cannot be mixed: every loss reported is the counter's increase since the last
 * one reported, which counts each overwritten record exactly once. Runs on the decoding thread. */
static uint64_t manager_missed(void *userdata, unsigned cpu, const uint64_t *stored, uint64_t *ret_base) {
        Manager *m = userdata;
        TracingCpuStats s;
        bool cleared;
        uint64_t n;

        *ret_base = 0;
        if (cpu >= m->n_cpus)
                return stored ? *stored : 0;
        pthread_mutex_lock(&m->stats_lock);
        *ret_base = m->overrun_reported[cpu];
        if (manager_cpu_stats_locked(m, cpu, &s, &cleared) < 0)
                n = stored ? *stored : 0;
        else
                n = s.overrun > m->overrun_reported[cpu] ? s.overrun - m->overrun_reported[cpu] : 0;
        m->overrun_reported[cpu] += n;
        pthread_mutex_unlock(&m->stats_lock);
        return n;
}

static void manager_on_worker_batch(void *userdata, unsigned cpu, Batch *b, int error) {
        manager_on_decoded(userdata, cpu, b, error);
}

/* The CPUs tpd may run on (its affinity mask): what threads of its own can use. */
static unsigned usable_cpus(void) {
        cpu_set_t set;

        if (sched_getaffinity(0, sizeof(set), &set) < 0)
                return 1;
        return (unsigned) CPU_COUNT(&set);
}

static const char *manager_cgroup_at(void *userdata, int pid, uint64_t ts, size_t *ret_len) {
        return manager_attribution_at(userdata, pid, ts, ret_len);
}

static size_t manager_ksym(void *userdata, uint64_t address, char *buf, size_t size) {
        return manager_stacks_name(userdata, address, buf, size);
}

/* The decoders and what they ask of the manager: command names, and the losses pages flag. */
int manager_setup_decoding(Manager *m) {
        _cleanup_free_ char *clock = NULL;
        unsigned n = 0;
        int r;

        r = comm_cache_new(tracing_saved_cmdlines_path(m->tracing), &m->comm);
        if (r < 0)
                return r;
        (void) tracing_get_clock(m->tracing, &clock);
        comm_cache_set_clock(m->comm, clock);

        m->decode_context = (DecodeContext){
                .comm = m->comm,
                .missed = manager_missed,
                .cgroup = manager_cgroup_at,
                .ksym = manager_ksym,
                .userdata = m,
        };
        r = decode_context_decoder(&m->decode_context, tracing_tep(m->tracing), &m->decoder);
        if (r < 0)
                return r;

        m->accounts = calloc(m->n_cpus, sizeof(CpuAccount));
        m->overrun_reported = calloc(m->n_cpus, sizeof(uint64_t));
        m->dropped_reported = calloc(m->n_cpus, sizeof(uint64_t));
        m->decode_pending = calloc(m->n_cpus, sizeof(uint64_t));
        if (!m->accounts || !m->overrun_reported || !m->dropped_reported || !m->decode_pending)
                return -ENOMEM;

        /* auto: one thread per 8 CPUs tpd may run on (at least one, none on a machine of one), none
         * in use until the load needs them; a number: that many, always in use. */
        r = config_decode_workers(m->config.decode_workers, &n);
        if (r == 0) {
                unsigned usable = usable_cpus();

                m->decode_auto = true;
                /* A thread on a machine of one CPU would only add the hand-over's cost. */
                n = usable < 2 ? 0 : MAX(1U, MIN(CONFIG_DECODE_WORKERS_MAX, usable / 8));
        }
        if (n > 0) {
                WorkersSetup setup = {
                        .n_workers = n,
                        .active = m->decode_auto ? 0 : n,
                        .n_cpus = m->n_cpus,
                        .tracing = m->tracing,
                        .clock = clock,
                        .missed = manager_missed,
                        .losses = manager_worker_losses,
                        .done = manager_on_worker_batch,
                        .userdata = m,
                };

                r = workers_new(m->event, &setup, &m->workers);
                if (r < 0)
                        return log_error_errno(r, "Failed to start %u decode workers: %m", setup.n_workers);
                log_debug("%u decode workers, %s.", setup.n_workers,
                          m->decode_auto ? "in use as the load needs" : "in use");
        }
        return 0;
}

/* Pages that could not be handed to a worker: their records are lost, reported as a decode's are. */
void manager_decode_failed(Manager *m, unsigned cpu, int error, const void *pages, size_t n_pages,
                           size_t page_size) {
        /* On the record path: at most one warning every ten seconds. */
        static RateLimit submit_log_limit = RATELIMIT_INIT(10 * 1000 * 1000ULL, 1);
        uint64_t records = 0;

        for (size_t i = 0; i < n_pages; i++)
                records += page_records((const uint8_t *) pages + i * page_size, page_size);
        if (ratelimit_below(&submit_log_limit))
                log_warning_errno(error,
                                  "CPU %u: failed to hand pages to a worker, %" PRIu64 " records lost: %m",
                                  cpu, records);
        /* Reported before the CPU's next batch, in its place after those handed over before. */
        m->decode_pending[cpu] += records;
}

void manager_sync_decoding(Manager *m) {
        if (m->workers)
                workers_sync(m->workers);
}

static void manager_use_workers(Manager *m, unsigned n) {
        if (workers_active(m->workers) == n)
                return;
        workers_set_active(m->workers, n);
        m->decode_changes++;
        /* What a worker could not report goes with the CPU, to whoever decodes it now (the loop
         * reports its own pending counts first; a worker takes them with the next pages). */
        for (unsigned cpu = 0; cpu < m->n_cpus; cpu++)
                m->decode_pending[cpu] += workers_take_pending(m->workers, cpu);
}

/* Starts a new weighing: what decoding took before does not count. */
static void manager_decoding_weigh_from(Manager *m, uint64_t now) {
        m->decode_checked_usec = now;
        m->decode_ns = 0;
        m->decode_fewer = 0;
        if (m->workers)
                (void) workers_take_busy_ns(m->workers);
}

/* DecodeWorkers=auto, once a second: the workers the decoding of the last second needs. */
void manager_scale_decoding(Manager *m) {
        uint64_t now = 0, busy;
        unsigned active, want;

        (void) sd_event_now(m->event, CLOCK_MONOTONIC, &now);
        if (!m->workers || !m->decode_auto)
                return;
        if (m->decode_checked_usec == 0 || now <= m->decode_checked_usec) {
                manager_decoding_weigh_from(m, now);
                return;
        }
        busy = m->decode_ns + workers_take_busy_ns(m->workers);
        m->decode_ns = 0;
        active = workers_active(m->workers);
        want = workers_wanted(active, workers_count(m->workers), busy, (now - m->decode_checked_usec) * 1000,
                              &m->decode_fewer);
        m->decode_checked_usec = now;
        if (want == active)
                return;
        log_debug("Decoding took %" PRIu64 " ms of the last second: %s.", busy / 1000000,
                  want == 0       ? "on the event loop"
                  : want > active ? "more workers"
                                  : "fewer workers");
        manager_use_workers(m, want);
}

int manager_set_decode_workers(Manager *m, const char *value) {
        uint64_t now = 0;
        unsigned n = 0;
        int r;

        r = config_decode_workers(value, &n);
        if (r < 0)
                return r;
        if (r == 0 ? !m->workers : n > workers_count(m->workers))
                return -ERANGE;
        if (r == 0 && m->decode_auto)
                return 0; /* auto already: the workers in use stay as the load wants them */
        m->decode_auto = r == 0;
        (void) sd_event_now(m->event, CLOCK_MONOTONIC, &now);
        manager_decoding_weigh_from(m, now);
        /* auto starts from the loop, as at start. */
        manager_use_workers(m, r == 0 ? 0 : n);
        return 0;
}
