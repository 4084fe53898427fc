/* SPDX-License-Identifier: LGPL-2.1-or-later */

/*
 * What the manager counts: tpd's totals (GetStatus, and the STATUS= line systemctl status shows
 * every few seconds), and the per-event counts of GetCounters, kept only while a connection that
 * asked for them lives.
 */

#include <inttypes.h>

#include <systemd/sd-daemon.h>

#include "loop.h"
#include "manager.h"
#include "peer.h"

/* How often the STATUS= line is sent. */
#define STATUS_USEC (5 * 1000 * 1000ULL)
/* GetCounters reads the partial pages at most this often. */
#define MANAGER_COUNTING_FLUSH_USEC (50 * 1000ULL)

static void manager_count_record(void *userdata, uint16_t id, int32_t pid) {
        counter_run_add(userdata, id, pid, 1);
}

void manager_count_pages(Manager *m, const void *pages, size_t n_pages, size_t page_size) {
        CounterRun run = { .counters = m->counters };

        if (!m->counters)
                return;
        for (size_t i = 0; i < n_pages; i++)
                (void) decoder_page_walk((const uint8_t *) pages + i * page_size, page_size,
                                         manager_count_record, &run);
        counter_run_flush(&run);
}

/* The records of a decoded batch, and those of events without a format that it counts as lost. */
void manager_count_batch(Manager *m, const Batch *b) {
        CounterRun run = { .counters = m->counters };

        if (!m->counters)
                return;
        for (size_t i = 0; i < b->n_records; i++) {
                const Record *r = &b->records[i];

                if (r->kind == RECORD_EVENT)
                        counter_run_add(&run, r->event_id, r->pid, 1);
                else if (r->kind == TPD_LOST_UNKNOWN)
                        counter_run_add(&run, r->event_id, r->pid, r->lost);
        }
        counter_run_flush(&run);
}

static void manager_kernel_losses(Manager *m, uint64_t *ret_overrun, uint64_t *ret_dropped) {
        uint64_t overrun = 0, dropped = 0;

        for (unsigned cpu = 0; cpu < m->n_cpus; cpu++) {
                TracingCpuStats st;
                if (manager_cpu_stats(m, cpu, &st) < 0)
                        continue;
                overrun += st.overrun;
                dropped += st.dropped;
        }
        *ret_overrun = overrun;
        *ret_dropped = dropped;
}

void manager_counting_kernel_losses(Manager *m, uint64_t *ret_overrun, uint64_t *ret_dropped) {
        uint64_t overrun, dropped;

        manager_kernel_losses(m, &overrun, &dropped);
        *ret_overrun = overrun - m->counting_overrun;
        *ret_dropped = dropped - m->counting_dropped;
}

int manager_counting_start(Manager *m, Peer *p) {
        int enabled = SD_EVENT_OFF, r;
        uint64_t now = 0;

        /* What the buffers hold was written before this call: read it out now, so that a reply
         * counts every record written before it (rates between two calls are exact whatever the
         * flush interval), and the first call counts nothing written before the count started.
         * Partial pages cost more per record than full ones: calls in quick succession (any
         * member may make them) share one read per MANAGER_COUNTING_FLUSH_USEC. */
        (void) sd_event_now(m->event, CLOCK_MONOTONIC, &now);
        if (!m->counters || now >= m->counting_flushed_usec + MANAGER_COUNTING_FLUSH_USEC) {
                m->counting_flushed_usec = now;
                manager_read_all(m);
                manager_sync_decoding(m);
        }
        if (p->counting)
                return 0;
        if (!m->counters) {
                r = counters_new(&m->counters);
                if (r < 0)
                        return r;
                (void) sd_event_now(m->event, CLOCK_MONOTONIC, &m->counting_usec);
                manager_kernel_losses(m, &m->counting_overrun, &m->counting_dropped);
                for (Peer *peer = m->peers; peer; peer = peer->next)
                        if (peer->stream)
                                peer->stream->counters = m->counters;
        }
        p->counting = true;
        m->n_counting++;
        /* Partial pages are read on the flush timer, which sleeps while there is no stream. */
        if (sd_event_source_get_enabled(m->flush_timer, &enabled) >= 0 && enabled == SD_EVENT_OFF)
                (void) loop_rearm(m->flush_timer, (uint64_t) m->config.flush_interval_ms * 1000);
        return 0;
}

void manager_counting_stop(Manager *m) {
        if (--m->n_counting > 0)
                return;
        for (Peer *p = m->peers; p; p = p->next)
                if (p->stream)
                        p->stream->counters = NULL;
        m->counters = counters_free(m->counters);
        m->counters_reply = mfree(m->counters_reply);
}

void manager_counters(Manager *m, ManagerCounters *ret) {
        DecoderStats sum = *decoder_stats(m->decoder), w;
        const DecoderStats *d = &sum;

        if (m->workers) {
                workers_stats(m->workers, &w);
                sum.records += w.records;
                sum.unknown += w.unknown;
                sum.bad_pages += w.bad_pages;
                sum.overrun += w.overrun;
        }

        *ret = (ManagerCounters){
                .records = d->records,
                .delivered = m->delivered,
                .lost_client = m->lost_client,
                .lost_overrun = d->overrun,
                .lost_unknown = d->unknown,
                .bad_pages = d->bad_pages,
        };
        /* Streams that ended were added to m's totals by manager_on_peer_free(). */
        for (Peer *p = m->peers; p; p = p->next)
                if (p->stream) {
                        ret->delivered += p->stream->delivered;
                        ret->lost_client += p->stream->lost_client;
                }
}

/* STATUS= for systemctl status: what tpd does, in one line. */
static void manager_notify_status(Manager *m) {
        ManagerCounters c;
        uint64_t usec = 0, rate = 0;

        manager_counters(m, &c);
        (void) sd_event_now(m->event, CLOCK_MONOTONIC, &usec);
        if (m->status_usec > 0 && usec > m->status_usec)
                rate = (c.records - m->status_records) * 1000000ULL / (usec - m->status_usec);
        m->status_usec = usec;
        m->status_records = c.records;

        (void) sd_notifyf(false,
                          "STATUS=%" PRIu64 " events/s, %u streams, %u peers, %" PRIu64 " delivered, "
                          "%" PRIu64 " lost (%" PRIu64 " overrun, %" PRIu64 " client, %" PRIu64 " unknown)",
                          rate, m->n_streams, m->n_peers, c.delivered,
                          c.lost_overrun + c.lost_client + c.lost_unknown, c.lost_overrun, c.lost_client,
                          c.lost_unknown);
}

static int manager_on_status_timer(sd_event_source *s, uint64_t usec, void *userdata) {
        Manager *m = userdata;

        manager_notify_status(m);
        return loop_rearm(s, STATUS_USEC);
}

int manager_add_status_timer(Manager *m) {
        /* A second's accuracy lets sd-event fire it together with the check timer: an idle tpd
         * wakes once a second, not 1.2 times. */
        return sd_event_add_time_relative(m->event, &m->status_timer, CLOCK_MONOTONIC, STATUS_USEC,
                                          1000 * 1000, manager_on_status_timer, m);
}
