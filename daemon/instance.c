/* SPDX-License-Identifier: LGPL-2.1-or-later */

/*
 * The instance and its per-CPU readers: set up at start, then checked once a second, for CPUs that
 * came or went and for changes another process made to the instance; and the buffer clears that
 * tpd's own writes of trace_clock cause.
 */

#include <inttypes.h>
#include <stdlib.h>

#include "cpus.h"
#include "log.h"
#include "loop.h"
#include "manager.h"
#include "peer.h"

/* The online CPUs and the instance are checked at most a second apart (period plus timer slack): a
 * CPU that comes online is read within a second. A CPU check is one small sysfs read, an instance
 * check a few preads (tracing_check()), but each wake-up of an idle tpd costs ≈ 0.2 ms here (a 2-vCPU
 * VM), so both share one timer. The kernel's uevents would need no timer, but they need an
 * AF_NETLINK socket, which the unit's RestrictAddressFamilies=AF_UNIX rules out, and do not reach
 * containers with their own user namespace. */
#define CHECK_USEC (900 * 1000ULL)
#define CHECK_SLACK_USEC (100 * 1000ULL)
/* Pages read per check from a CPU that went offline: a large buffer is drained over a few checks
 * rather than in one long stall of the loop. */
#define CPUS_DRAIN_PAGES 1024U

/* Compares the instance with what tpd set and puts back what others changed. When another process
 * changed it (disabled an event, changed a filter, turned tracing off…), every stream may have
 * missed records the kernel never wrote, so each gets a notice record, after what was read before
 * the repair. */
static void manager_check_instance(Manager *m) {
        _cleanup_free_ char *report = NULL;
        uint64_t ts;
        int r;

        r = tracing_check(m->tracing, &report);
        if (r < 0)
                log_debug_errno(r, "Failed to check tracefs instance '%s': %m",
                                tracing_instance_name(m->tracing));
        else if (r == 0) {
                if (m->instance_repairs > 1)
                        log_notice("Tracefs instance '%s' stayed as tpd set it again, after %u repairs.",
                                   tracing_instance_name(m->tracing), m->instance_repairs);
                m->instance_repairs = 0;
        } else {
                /* Once per episode: a process that keeps changing the instance does not flood the log. */
                if (m->instance_repairs++ == 0)
                        log_warning("Tracefs instance '%s' was changed by another process: %s.",
                                    tracing_instance_name(m->tracing), report);
                else
                        log_debug("Tracefs instance '%s' changed again: %s.",
                                  tracing_instance_name(m->tracing), report);

                manager_read_all(m);
                manager_sync_decoding(m);
                ts = manager_trace_clock_now_ns(m);
                manager_publish_notice(m, ts, "instance-changed", report);
                for (Peer *p = m->peers; p; p = p->next)
                        if (p->stream && !p->shm && peer_queue_notice(p, ts, "instance-changed", report) < 0)
                                log_debug("Peer %d: failed to queue a notice.", (int) p->pid);
                manager_flush_peers(m);
        }
}

static int manager_open_cpu(Manager *m, unsigned cpu) {
        int fd = tracing_open_cpu(m->tracing, cpu), r;
        if (fd < 0)
                return fd;
        r = reader_new(m->event, fd, cpu, tracing_page_size(m->tracing), manager_on_pages, m,
                       &m->readers[cpu]);
        if (r >= 0 && m->quiet)
                (void) reader_set_partial(m->readers[cpu], true);
        return r;
}

/* Brings one CPU's reader in line with whether the CPU is online now. */
static void manager_update_cpu(Manager *m, unsigned cpu, bool online) {
        ManagerCpu *c = &m->cpus[cpu];
        Reader **reader = &m->readers[cpu];
        int r;

        if (online) {
                if (!c->online)
                        log_info("CPU %u came online, reading it.", cpu);
                c->online = true;
                c->empty_drains = 0;
                if (!*reader) {
                        r = manager_open_cpu(m, cpu);
                        if (r < 0) {
                                if (!c->open_failed)
                                        log_warning_errno(
                                                r, "Failed to start reading CPU %u, will retry: %m", cpu);
                                c->open_failed = true;
                                return;
                        }
                        if (c->open_failed)
                                log_info("Reading CPU %u now.", cpu);
                        c->open_failed = false;
                }
                /* Also wakes a reader that stopped watching an fd that polled ready for nothing. */
                (void) reader_set_polling(*reader, true);
                return;
        }

        if (c->online) {
                log_info("CPU %u went offline, reading what its buffer still holds.", cpu);
                c->online = false;
                c->open_failed = false;
                c->empty_drains = 0;
                /* Its buffer stays (the instance keeps it) but no longer wakes anyone. */
                if (*reader)
                        (void) reader_set_polling(*reader, false);
        }
        if (!*reader)
                return;

        r = reader_drain_all(*reader, CPUS_DRAIN_PAGES);
        if (r == 0) {
                c->empty_drains = 0;
                return;
        }
        /* The CPU may still write a record or two between leaving the online mask and dying: stop
         * only once a second check finds the buffer empty. A reader that fails (logged) stops at
         * once; the records left are read when the CPU is back. */
        if (r > 0 && ++c->empty_drains < 2)
                return;
        *reader = reader_free(*reader);
        log_debug("CPU %u: buffer drained, no longer reading it.", cpu);
}

static void manager_check_cpus(Manager *m) {
        _cleanup_free_ bool *online = calloc(m->n_cpus, sizeof(bool));
        int r;

        if (!online)
                return;
        r = cpus_read_list(CPUS_ONLINE_PATH, online, m->n_cpus);
        if (r <= 0) {
                if (!m->cpus_read_failed)
                        log_warning_errno(r < 0 ? r : -ENODATA,
                                          "Failed to read %s, keeping the readers as they are: %m",
                                          CPUS_ONLINE_PATH);
                m->cpus_read_failed = true;
                return;
        }
        m->cpus_read_failed = false;
        for (unsigned cpu = 0; cpu < m->n_cpus; cpu++)
                manager_update_cpu(m, cpu, online[cpu]);
}

/* Once a second: CPUs that came or went, and changes to the instance behind tpd's back. One timer
 * for both, since each wake-up of an idle tpd costs more than the checks. */
static int manager_on_check_timer(sd_event_source *s, uint64_t usec, void *userdata) {
        Manager *m = userdata;

        manager_check_cpus(m);
        manager_check_instance(m);
        manager_check_realtime(m, false);
        manager_scale_decoding(m);
        if (m->counters)
                counters_age(m->counters);
        return loop_rearm(s, CHECK_USEC);
}

int manager_add_check_timer(Manager *m) {
        return sd_event_add_time_relative(m->event, &m->check_timer, CLOCK_MONOTONIC, CHECK_USEC,
                                          CHECK_SLACK_USEC, manager_on_check_timer, m);
}

/* tpd is about to write trace_clock (Configure, or putting back a clock another process set), which
 * clears the buffers of the online CPUs (6.18: tracing_set_clock() resets them): first hand the
 * streams what the buffers hold and note the counters; once written, close the buffers' lives, the
 * records written in between counted as lost. */
static void manager_on_clear(void *userdata, bool done) {
        Manager *m = userdata;
        unsigned kb = 0;
        size_t max_pages = CPUS_DRAIN_PAGES;

        if (!done) {
                /* The whole buffer, not more: a writer that keeps up with the reader cannot hold
                 * up the loop. */
                if (tracing_get_buffer_size_kb(m->tracing, &kb) >= 0 && kb > 0)
                        max_pages = (size_t) kb * 1024 / tracing_page_size(m->tracing) + 2;
                for (unsigned cpu = 0; cpu < m->n_cpus; cpu++)
                        if (m->readers[cpu])
                                (void) reader_drain_all(m->readers[cpu], max_pages);
                /* Their records go out before the clock's notice. */
                manager_sync_decoding(m);
        }
        for (unsigned cpu = 0; cpu < m->n_cpus; cpu++) {
                TracingCpuStats st;
                int r;

                if (!done) {
                        (void) manager_cpu_stats(m, cpu, &st);
                        continue;
                }
                if (!m->cpus[cpu].online)
                        continue; /* its buffer was left as it was */
                r = tracing_cpu_stats(m->tracing, cpu, &st);
                if (m->accounts[cpu].last.entries > 0)
                        log_debug("CPU %u: %" PRIu64 " records not read out before the clock was set, lost.",
                                  cpu, m->accounts[cpu].last.entries);
                pthread_mutex_lock(&m->stats_lock);
                cpu_account_cleared(&m->accounts[cpu], r >= 0 ? &st : NULL);
                pthread_mutex_unlock(&m->stats_lock);
        }
        if (!done)
                manager_flush_peers(m);
}

int manager_setup_instance(Manager *m) {
        TracingEvent *print;
        int r;

        r = tracing_new(m->config.instance, &m->tracing);
        if (r < 0)
                return r;
        m->n_cpus = tracing_n_cpus(m->tracing);

        if (m->config.clock) {
                r = tracing_set_clock(m->tracing, m->config.clock);
                if (r < 0)
                        return log_error_errno(r, "Failed to set trace clock '%s': %m", m->config.clock);
        }
        if (m->config.buffer_size_kb > 0) {
                r = tracing_set_buffer_size_kb(m->tracing, m->config.buffer_size_kb);
                if (r < 0)
                        return log_error_errno(r, "Failed to set the buffer size to %u KiB: %m",
                                               m->config.buffer_size_kb);
        }
        r = tracing_set_buffer_percent(m->tracing, m->config.buffer_percent);
        if (r < 0)
                return log_error_errno(r, "Failed to set buffer_percent: %m");
        r = tracing_set_overwrite(m->tracing, m->config.buffer_overwrite);
        if (r < 0)
                return log_error_errno(r, "Failed to set options/overwrite: %m");

        /* trace_marker writes are recorded without enabling anything: know their format. */
        r = tracing_event_get(m->tracing, "ftrace:print", &print);
        if (r < 0)
                log_warning_errno(r, "Failed to load the format of ftrace:print: %m");
        return 0;
}

int manager_open_cpus(Manager *m) {
        _cleanup_free_ bool *online = NULL;
        int r;

        m->readers = calloc(m->n_cpus, sizeof(Reader *));
        m->cpus = calloc(m->n_cpus, sizeof(ManagerCpu));
        online = calloc(m->n_cpus, sizeof(bool));
        if (!m->readers || !m->cpus || !online)
                return -ENOMEM;
        /* Only online CPUs: the trace_pipe_raw of a CPU that was offline when the instance was made
         * has no ring buffer behind it and polls ready forever (6.18). */
        r = cpus_read_list(CPUS_ONLINE_PATH, online, m->n_cpus);
        if (r <= 0) {
                log_warning_errno(r < 0 ? r : -ENODATA, "Failed to read %s, reading every CPU: %m",
                                  CPUS_ONLINE_PATH);
                for (unsigned cpu = 0; cpu < m->n_cpus; cpu++)
                        online[cpu] = true;
        }
        for (unsigned cpu = 0; cpu < m->n_cpus; cpu++) {
                if (!online[cpu])
                        continue;
                r = manager_open_cpu(m, cpu);
                if (r < 0)
                        return log_error_errno(r, "Failed to start reading CPU %u: %m", cpu);
                m->cpus[cpu].online = true;
        }
        /* From here on the kernel's counters are summed over the clears of tpd's clock writes. */
        tracing_set_clear_handler(m->tracing, manager_on_clear, m);
        return 0;
}
