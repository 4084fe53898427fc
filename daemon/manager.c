/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <grp.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/timerfd.h>

#include <systemd/sd-daemon.h>

#include "core/clock.h"
#include "core/page.h"
#include "cpus.h"
#include "log.h"
#include "manager.h"
#include "peer.h"
#include "ratelimit.h"
#include "server.h"
#include "state.h"
#include "tpd-protocol.h"

/* How often the STATUS= line is sent. */
#define STATUS_USEC (5 * 1000 * 1000ULL)
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

/* A burst of Enable/Disable calls costs one write of the state file; a failed write is tried
 * again after MANAGER_SAVE_RETRY_USEC. */
#define MANAGER_SAVE_DELAY_USEC (200 * 1000ULL)
#define MANAGER_SAVE_MAX_DELAY_USEC (1000 * 1000ULL)
#define MANAGER_SAVE_RETRY_USEC (10 * 1000 * 1000ULL)

Manager *manager_free(Manager *m) {
        if (!m)
                return NULL;

        /* Peers first: their streams hold event references in tracing. */
        while (m->peers)
                peer_free(m->peers);
        server_free(m->server);
        for (unsigned i = 0; m->readers && i < m->n_cpus; i++)
                reader_free(m->readers[i]);
        free(m->readers);
        free(m->cpus);
        sd_event_source_disable_unref(m->flush_timer);
        sd_event_source_disable_unref(m->status_timer);
        sd_event_source_disable_unref(m->check_timer);
        sd_event_source_disable_unref(m->save_timer);
        sd_event_source_disable_unref(m->clock_source);
        safe_close(m->clock_fd);
        decoder_free(m->decoder);
        tracing_free(m->tracing);
        comm_cache_free(m->comm);
        batch_unref(m->batch);
        counters_free(m->counters);
        free(m->accounts);
        free(m->counters_reply);
        free(m->overrun_reported);
        free(m->dropped_reported);
        free(m->decode_pending);
        free(m->state_path);
        sd_event_unref(m->event);
        config_done(&m->config);
        free(m);
        return NULL;
}

int manager_new(const Config *config, Manager **ret) {
        _cleanup_(manager_freep) Manager *m = NULL;
        int r;

        m = calloc(1, sizeof(Manager));
        if (!m)
                return -ENOMEM;
        m->clock_fd = -1;
        r = config_copy(&m->config, config);
        if (r < 0)
                return r;
        r = sd_event_default(&m->event);
        if (r < 0)
                return r;
        *ret = TAKE_PTR(m);
        return 0;
}

static const char *manager_comm(void *userdata, int pid, uint64_t ts) {
        Manager *m = userdata;
        return comm_cache_lookup(m->comm, pid, ts);
}

/* The kernel's counters of cpu summed over the clears of its buffer (cpustats.h): every loss account
 * of tpd takes differences of these, never of the raw counters, which a clear sets back to zero. */
int manager_cpu_stats(Manager *m, unsigned cpu, TracingCpuStats *ret) {
        TracingCpuStats raw;
        int r;

        if (cpu >= m->n_cpus)
                return -EINVAL;
        r = tracing_cpu_stats(m->tracing, cpu, &raw);
        if (r < 0)
                return r;
        if (cpu_account_sample(&m->accounts[cpu], &raw, ret))
                log_debug("CPU %u: the kernel's counters went back: its buffer was cleared by another "
                          "process; counting on from there.",
                          cpu);
        return 0;
}

/* A page flags that the kernel overwrote records before it. The count it may store is the overrun
 * since the kernel's previous page swap; when the page was full it stores none, and only the
 * kernel's counter tells. Reading the counter later counts overruns that a later page will flag
 * again, so the two cannot be mixed: every loss reported is the counter's increase since the last
 * one reported, which counts each overwritten record exactly once. */
static uint64_t manager_missed(void *userdata, unsigned cpu, const uint64_t *stored) {
        Manager *m = userdata;
        TracingCpuStats s;
        uint64_t n;

        if (cpu >= m->n_cpus)
                return stored ? *stored : 0;
        if (manager_cpu_stats(m, cpu, &s) < 0) {
                n = stored ? *stored : 0;
                m->overrun_reported[cpu] += n;
                return n;
        }
        n = s.overrun > m->overrun_reported[cpu] ? s.overrun - m->overrun_reported[cpu] : 0;
        m->overrun_reported[cpu] += n;
        return n;
}

static uint64_t manager_overrun_now(void *userdata, unsigned cpu) {
        Manager *m = userdata;
        TracingCpuStats st;

        if (manager_cpu_stats(m, cpu, &st) < 0)
                return UINT64_MAX;
        return st.overrun;
}

/* Offers a batch of one CPU to every stream. */
static void manager_offer(Manager *m, Batch *b) {
        int r;

        b->plain_end = b->buf.len;
        for (Peer *c = m->peers; c; c = c->next) {
                if (!c->stream || c->recording)
                        continue;
                r = stream_offer_batch(c->stream, m->decoder, b);
                if (r < 0)
                        log_warning_errno(r, "Peer %d: failed to queue records: %m", (int) c->pid);
        }
}

/* Counts the records of a page that a failed decode left out, by walking its entry headers. */
static uint64_t page_records_left(const void *page, size_t size, const Batch *b, size_t from) {
        uint64_t total = page_records(page, size), got = 0;

        for (size_t i = from; i < b->n_records; i++)
                if (b->records[i].kind == RECORD_EVENT)
                        got++;
                else if (b->records[i].kind == RECORD_LOST_UNKNOWN)
                        got += b->records[i].lost;
        return total > got ? total - got : 0;
}

/* Losses the kernel counts without flagging a page: "dropped events" (overwrite off: the writer
 * drops new records when the buffer is full), and overruns not flagged yet. From the flush timer. */
static void manager_report_kernel_losses(Manager *m) {
        for (unsigned cpu = 0; cpu < m->n_cpus; cpu++) {
                TracingCpuStats st;
                Batch *b;
                uint64_t ts = 0;
                int r = 0;

                if (manager_cpu_stats(m, cpu, &st) < 0)
                        continue;
                /* Recordings keep their own account: each flags its losses on its next page. */
                if (m->n_recordings > 0) {
                        uint64_t now = 0;

                        (void) sd_event_now(m->event, CLOCK_BOOTTIME, &now);
                        for (Peer *c = m->peers; c; c = c->next)
                                if (c->recording) {
                                        recording_note_kernel_losses(c->recording, cpu, st.overrun,
                                                                     st.dropped, now * 1000);
                                        if (cpu == 0)
                                                (void) recording_resolve_comms(c->recording, m->decoder);
                                }
                }
                if (m->n_streams == m->n_recordings)
                        continue;
                if (st.overrun <= m->overrun_reported[cpu] && st.dropped <= m->dropped_reported[cpu])
                        continue;
                b = batch_new();
                if (!b)
                        return;
                /* No page dates these losses: take the time of this tick (the boot clock, tpd's
                 * default trace clock). */
                (void) sd_event_now(m->event, CLOCK_BOOTTIME, &ts);
                ts *= 1000;
                if (st.overrun > m->overrun_reported[cpu]) {
                        r = batch_add_lost(b, ts, cpu, st.overrun - m->overrun_reported[cpu],
                                           RECORD_LOST_OVERRUN);
                        if (r >= 0) {
                                b->records[b->n_records - 1].lost_base = m->overrun_reported[cpu];
                                m->overrun_reported[cpu] = st.overrun;
                        }
                }
                if (r >= 0 && st.dropped > m->dropped_reported[cpu]) {
                        r = batch_add_lost(b, ts, cpu, st.dropped - m->dropped_reported[cpu],
                                           RECORD_LOST_DROPPED);
                        if (r >= 0) {
                                b->records[b->n_records - 1].lost_base = m->dropped_reported[cpu];
                                m->dropped_reported[cpu] = st.dropped;
                        }
                }
                if (b->n_records > 0)
                        manager_offer(m, b);
                batch_trim(b);
                batch_unref(b);
        }
}

void manager_flush_clients(Manager *m) {
        Peer *c, *next;

        for (c = m->peers; c; c = next) {
                next = c->next;
                if (c->stream && !queue_is_empty(&c->stream->queue))
                        (void) peer_flush(c);
        }
}

/* The parts every stream wants in its lines go into the plain lines while decoding: when all
 * streams are --symbolic, "sym" costs no copy of the line. Recordings take no lines. */
static uint8_t manager_inline_variant(Manager *m) {
        bool any = false;

        for (Peer *c = m->peers; c; c = c->next)
                if (c->stream && !c->recording) {
                        if (!c->stream->symbolic)
                                return 0;
                        any = true;
                }
        return any ? DECODER_VARIANT_SYM : 0;
}

static void manager_count_record(void *userdata, uint16_t id, int32_t pid) {
        counter_run_add(userdata, id, pid, 1);
}

/* The records of a decoded batch, and those of events without a format that it counts as lost. */
static void manager_count_batch(Counters *c, const Batch *b) {
        CounterRun run = { .counters = c };

        for (size_t i = 0; i < b->n_records; i++) {
                const Record *r = &b->records[i];

                if (r->kind == RECORD_EVENT)
                        counter_run_add(&run, r->event_id, r->pid, 1);
                else if (r->kind == RECORD_LOST_UNKNOWN)
                        counter_run_add(&run, r->event_id, r->pid, r->lost);
        }
        counter_run_flush(&run);
}

static void manager_on_pages(void *userdata, unsigned cpu, const void *pages, size_t n_pages,
                             size_t page_size) {
        Manager *m = userdata;
        uint64_t overrun_before;
        Batch *b;
        int r;

        /* Recordings take the pages as they are, before (and without) any decoding. */
        if (m->n_recordings > 0) {
                PageSource src = {
                        .cpu = cpu,
                        .page_size = page_size,
                        .overrun = manager_overrun_now,
                        .userdata = m,
                };

                for (Peer *c = m->peers; c; c = c->next)
                        if (c->recording) {
                                r = recording_offer_pages(c->recording, m->decoder, &src, pages, n_pages);
                                if (r < 0)
                                        log_warning_errno(r, "Peer %d: failed to queue pages: %m",
                                                          (int) c->pid);
                        }
        }

        /* Nobody listens to records: the pages were drained so that a new stream starts with fresh
         * records, and there is nothing to decode them for; only counted, when someone asks. */
        if (m->n_streams == m->n_recordings) {
                if (m->n_recordings > 0)
                        manager_flush_clients(m);
                if (m->counters) {
                        CounterRun run = { .counters = m->counters };

                        for (size_t i = 0; i < n_pages; i++)
                                (void) decoder_page_walk((const uint8_t *) pages + i * page_size, page_size,
                                                         manager_count_record, &run);
                        counter_run_flush(&run);
                }
                return;
        }

        /* Reuse the last batch's memory unless a peer still holds part of it. */
        if (m->batch && m->batch->refs == 1)
                batch_reset(m->batch);
        else {
                m->batch = batch_unref(m->batch);
                m->batch = batch_new();
                if (!m->batch)
                        return;
        }
        b = m->batch;
        b->variant = manager_inline_variant(m);

        overrun_before = cpu < m->n_cpus ? m->overrun_reported[cpu] : 0;

        /* Records a failed decode left out before: their lost record comes first. */
        if (cpu < m->n_cpus && m->decode_pending[cpu] > 0 &&
            batch_add_lost(b, 0, cpu, m->decode_pending[cpu], RECORD_LOST_DECODE) >= 0)
                m->decode_pending[cpu] = 0;

        for (size_t i = 0; i < n_pages; i++) {
                const uint8_t *page = (const uint8_t *) pages + i * page_size;
                size_t before = b->n_records;
                uint64_t left = 0, page_ts = 0;

                r = decoder_decode_page(m->decoder, page, page_size, cpu, b);
                if (r >= 0)
                        continue;
                /* What the page held and tpd could not deliver becomes a lost record: the records
                 * a walk of the page can still count, or the page itself when it cannot be walked
                 * (at least one record). */
                if (r == -EBADMSG) {
                        left = MAX(page_records_left(page, page_size, b, before), (uint64_t) 1);
                        log_debug("CPU %u: a page did not parse; %" PRIu64 " records lost.", cpu, left);
                } else {
                        /* On the record path: at most one warning every ten seconds. */
                        static RateLimit decode_log_limit = RATELIMIT_INIT(10 * 1000 * 1000ULL, 1);

                        left = page_records_left(page, page_size, b, before);
                        if (ratelimit_below(&decode_log_limit)) {
                                log_warning_errno(
                                        r, "CPU %u: failed to decode a page, %" PRIu64 " records lost: %m",
                                        cpu, left);
                        }
                }
                if (page_size >= 8)
                        memcpy(&page_ts, page, 8);
                if (left > 0 && cpu < m->n_cpus &&
                    batch_add_lost(b, page_ts, cpu, left, RECORD_LOST_DECODE) < 0)
                        m->decode_pending[cpu] += left;
        }
        if (b->n_records == 0)
                return;
        if (m->counters)
                manager_count_batch(m->counters, b);

        /* The overrun records of this batch cover the kernel's counter from where the last one
         * ended: a stream started since is charged only with the part after its start. */
        for (size_t i = 0; i < b->n_records; i++)
                if (b->records[i].kind == RECORD_LOST_OVERRUN) {
                        b->records[i].lost_base = overrun_before;
                        overrun_before += b->records[i].lost;
                }

        manager_offer(m, b);
        manager_flush_clients(m);
        /* Queues hold lines of it: keep only what they were charged for. */
        if (b->refs > 1)
                batch_trim(b);
}

/* GetCounters reads the partial pages at most this often. */
#define MANAGER_COUNTING_FLUSH_USEC (50 * 1000ULL)

/* Time sources fire once; a periodic one is set up again from its handler. */
static int rearm(sd_event_source *s, uint64_t usec) {
        int r = sd_event_source_set_time_relative(s, usec);
        if (r < 0)
                return r;
        return sd_event_source_set_enabled(s, SD_EVENT_ONESHOT);
}

static int manager_on_flush(sd_event_source *s, uint64_t usec, void *userdata) {
        Manager *m = userdata;

        /* Names looked up before this tick may have changed since (exec, prctl). */
        comm_cache_next_generation(m->comm);
        for (unsigned i = 0; i < m->n_cpus; i++)
                if (m->readers[i])
                        (void) reader_flush(m->readers[i]);
        if (m->n_streams > 0) {
                manager_report_kernel_losses(m);
                /* No page may follow to push out what was just queued. */
                manager_flush_clients(m);
        }
        /* Streams whose drops were not reported yet get their lost records now that there may be
         * room. */
        for (Peer *c = m->peers, *next; c; c = next) {
                next = c->next;
                if (c->stream && c->stream->drops_pending)
                        (void) peer_flush(c);
        }
        /* Without streams nothing waits for a partial page: sleep until one starts (or counting
         * does: counts must be as fresh as a stream's records). */
        if (m->n_streams == 0 && m->n_counting == 0)
                return 0;
        return rearm(s, (uint64_t) m->config.flush_interval_ms * 1000);
}

void manager_stream_started(Manager *m) {
        int enabled = SD_EVENT_OFF;
        Peer *new_stream = NULL;
        bool first, recording;

        /* The new stream is the one without its base yet. */
        for (Peer *c = m->peers; c; c = c->next)
                if (c->stream && !c->stream->has_base)
                        new_stream = c;
        recording = new_stream && new_stream->recording;

        /* Pages are decoded only while a stream wants records, and their losses counted only then:
         * the first such stream starts the count of reported overruns from the kernel's, so that
         * the first page that flags a loss without a count does not charge it with losses from
         * before it. */
        first = !recording && m->n_streams == m->n_recordings;
        m->n_streams++;
        if (recording)
                m->n_recordings++;

        /* Each new stream notes the kernel's loss counters at its start: losses counted before
         * are not its own (they reach it only when reported later, for streams started earlier). */
        for (unsigned cpu = 0; cpu < m->n_cpus; cpu++) {
                TracingCpuStats st;
                if (manager_cpu_stats(m, cpu, &st) < 0)
                        continue;
                if (first) {
                        m->overrun_reported[cpu] = st.overrun;
                        m->dropped_reported[cpu] = st.dropped;
                }
                for (Peer *c = m->peers; c; c = c->next)
                        if (c->recording && !c->stream->has_base)
                                (void) recording_set_base(c->recording, cpu, st.overrun, st.dropped);
                        else if (c->stream && !c->stream->has_base)
                                (void) stream_set_base(c->stream, cpu, st.overrun, st.dropped);
        }
        for (Peer *c = m->peers; c; c = c->next)
                if (c->stream) {
                        c->stream->has_base = true;
                        c->stream->counters = m->counters;
                }
        if (sd_event_source_get_enabled(m->flush_timer, &enabled) >= 0 && enabled == SD_EVENT_OFF)
                (void) rearm(m->flush_timer, (uint64_t) m->config.flush_interval_ms * 1000);
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
                for (unsigned i = 0; i < m->n_cpus; i++)
                        if (m->readers[i])
                                (void) reader_flush(m->readers[i]);
        }
        if (p->counting)
                return 0;
        if (!m->counters) {
                r = counters_new(&m->counters);
                if (r < 0)
                        return r;
                (void) sd_event_now(m->event, CLOCK_MONOTONIC, &m->counting_usec);
                manager_kernel_losses(m, &m->counting_overrun, &m->counting_dropped);
                for (Peer *c = m->peers; c; c = c->next)
                        if (c->stream)
                                c->stream->counters = m->counters;
        }
        p->counting = true;
        m->n_counting++;
        /* Partial pages are read on the flush timer, which sleeps while there is no stream. */
        if (sd_event_source_get_enabled(m->flush_timer, &enabled) >= 0 && enabled == SD_EVENT_OFF)
                (void) rearm(m->flush_timer, (uint64_t) m->config.flush_interval_ms * 1000);
        return 0;
}

static void manager_counting_stop(Manager *m) {
        if (--m->n_counting > 0)
                return;
        for (Peer *c = m->peers; c; c = c->next)
                if (c->stream)
                        c->stream->counters = NULL;
        m->counters = counters_free(m->counters);
        m->counters_reply = mfree(m->counters_reply);
}

/* STATUS= for systemctl status: what tpd does, in one line. */
void manager_counters(Manager *m, ManagerCounters *ret) {
        const DecoderStats *d = decoder_stats(m->decoder);

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
        return rearm(s, STATUS_USEC);
}

/* Now on the instance's trace clock, for records tpd makes itself. Clocks without a system
 * counterpart (local, global, x86-tsc, counter…) get CLOCK_MONOTONIC. */
uint64_t manager_trace_clock_now_ns(Manager *m) {
        _cleanup_free_ char *clock = NULL;
        clockid_t id = CLOCK_MONOTONIC;
        struct timespec ts;

        if (tracing_get_clock(m->tracing, &clock) >= 0)
                (void) trace_clock_id(clock, &id);
        if (clock_gettime(id, &ts) < 0)
                return 0;
        return (uint64_t) ts.tv_sec * 1000000000ULL + (uint64_t) ts.tv_nsec;
}

/* Another process changed tpd's instance (disabled an event, changed a filter, turned tracing
 * off…), and tracing_check() put it back: every stream may have missed records the kernel never
 * wrote, so each gets a notice record, after what was read before the repair. */
/* Compares the instance with what tpd set, puts back what others changed and tells the streams. */
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

                for (unsigned i = 0; i < m->n_cpus; i++)
                        if (m->readers[i])
                                (void) reader_flush(m->readers[i]);
                ts = manager_trace_clock_now_ns(m);
                for (Peer *c = m->peers; c; c = c->next)
                        if (c->stream &&
                            (c->recording
                                     ? recording_queue_notice(c->recording, ts, "instance-changed", report)
                                     : stream_queue_notice(c->stream, ts, "instance-changed", report)) < 0)
                                log_debug("Peer %d: failed to queue a notice.", (int) c->pid);
                manager_flush_clients(m);
        }
}

static int manager_on_signal(sd_event_source *s, const struct signalfd_siginfo *si, void *userdata) {
        Manager *m = userdata;

        log_info("Received SIG%s, stopping.", sigabbrev_np((int) si->ssi_signo));
        (void) sd_notify(false, "STOPPING=1");
        return sd_event_exit(m->event, 0);
}

static int manager_open_cpu(Manager *m, unsigned cpu) {
        int fd = tracing_open_cpu(m->tracing, cpu);
        if (fd < 0)
                return fd;
        return reader_new(m->event, fd, cpu, tracing_page_size(m->tracing), manager_on_pages, m,
                          &m->readers[cpu]);
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
int manager_realtime_offset(Manager *m, int64_t *ret_offset_ns, char **ret_clock) {
        _cleanup_free_ char *clock = NULL;
        struct timespec rt, t, rt2;
        clockid_t id;
        int r;

        r = tracing_get_clock(m->tracing, &clock);
        if (r < 0)
                return r;
        if (trace_clock_id(clock, &id) < 0)
                return -ENOENT;
        /* The trace clock read between two reads of the wall clock: their middle is its moment. */
        if (clock_gettime(CLOCK_REALTIME, &rt) < 0 || clock_gettime(id, &t) < 0 ||
            clock_gettime(CLOCK_REALTIME, &rt2) < 0)
                return -errno;
        *ret_offset_ns =
                ((int64_t) rt.tv_sec - t.tv_sec) * 1000000000LL + (rt.tv_nsec - t.tv_nsec) +
                (((int64_t) rt2.tv_sec - rt.tv_sec) * 1000000000LL + (rt2.tv_nsec - rt.tv_nsec)) / 2;
        if (ret_clock)
                *ret_clock = TAKE_PTR(clock);
        return 0;
}

/* Sends the streams that asked for it a clock record when the offset of the trace clock to the wall
 * clock moved: stepped (the timerfd), or slewed by more than MANAGER_CLOCK_SLEW_NS (the check
 * timer), or after a change of the trace clock. */
#define MANAGER_CLOCK_SLEW_NS 100000LL

static void manager_check_realtime(Manager *m, bool stepped) {
        _cleanup_free_ char *clock = NULL;
        int64_t offset;
        uint64_t ts;

        if (manager_realtime_offset(m, &offset, &clock) < 0)
                return;
        if (!stepped && llabs(offset - m->realtime_offset_ns) <= MANAGER_CLOCK_SLEW_NS)
                return;
        m->realtime_offset_ns = offset;
        ts = manager_trace_clock_now_ns(m);
        for (Peer *c = m->peers; c; c = c->next)
                if (c->stream && c->stream->realtime && stream_queue_clock(c->stream, ts, clock, offset) < 0)
                        log_debug("Peer %d: failed to queue a clock record.", (int) c->pid);
        manager_flush_clients(m);
}

static int manager_arm_clock_watch(Manager *m) {
        /* An expiry that never comes: only the cancellation on a clock change matters. */
        struct itimerspec its = { .it_value.tv_sec = (time_t) INT32_MAX * 2 };

        if (timerfd_settime(m->clock_fd, TFD_TIMER_ABSTIME | TFD_TIMER_CANCEL_ON_SET, &its, NULL) < 0)
                return -errno;
        return 0;
}

static int manager_on_clock_change(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        Manager *m = userdata;
        uint64_t expirations;

        /* ECANCELED: the wall clock was set. Either way the timer is armed again. */
        (void) read(fd, &expirations, sizeof(expirations));
        if (manager_arm_clock_watch(m) < 0)
                log_warning_errno(-errno, "Failed to watch the wall clock again: %m");
        manager_check_realtime(m, true);
        return 0;
}

static int manager_watch_clock(Manager *m) {
        int r;

        (void) manager_realtime_offset(m, &m->realtime_offset_ns, NULL);
        m->clock_fd = timerfd_create(CLOCK_REALTIME, TFD_NONBLOCK | TFD_CLOEXEC);
        if (m->clock_fd < 0)
                return -errno;
        r = manager_arm_clock_watch(m);
        if (r < 0)
                return r;
        return sd_event_add_io(m->event, &m->clock_source, m->clock_fd, EPOLLIN, manager_on_clock_change, m);
}

static int manager_on_check_timer(sd_event_source *s, uint64_t usec, void *userdata) {
        Manager *m = userdata;

        manager_check_cpus(m);
        manager_check_instance(m);
        manager_check_realtime(m, false);
        if (m->counters)
                counters_age(m->counters);
        return rearm(s, CHECK_USEC);
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
                cpu_account_cleared(&m->accounts[cpu], r >= 0 ? &st : NULL);
        }
        if (!done)
                manager_flush_clients(m);
}

static int manager_setup_tracing(Manager *m) {
        DecoderCallbacks callbacks = {
                .comm = manager_comm,
                .missed = manager_missed,
                .userdata = m,
        };
        _cleanup_free_ bool *online = NULL;
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

        r = comm_cache_new(tracing_saved_cmdlines_path(m->tracing), &m->comm);
        if (r < 0)
                return r;
        {
                _cleanup_free_ char *clock = NULL;
                (void) tracing_get_clock(m->tracing, &clock);
                comm_cache_set_clock(m->comm, clock);
        }

        r = decoder_new(tracing_tep(m->tracing), &callbacks, &m->decoder);
        if (r < 0)
                return r;

        m->accounts = calloc(m->n_cpus, sizeof(CpuAccount));
        m->overrun_reported = calloc(m->n_cpus, sizeof(uint64_t));
        m->dropped_reported = calloc(m->n_cpus, sizeof(uint64_t));
        m->decode_pending = calloc(m->n_cpus, sizeof(uint64_t));
        m->readers = calloc(m->n_cpus, sizeof(Reader *));
        m->cpus = calloc(m->n_cpus, sizeof(ManagerCpu));
        online = calloc(m->n_cpus, sizeof(bool));
        if (!m->accounts || !m->overrun_reported || !m->dropped_reported || !m->decode_pending ||
            !m->readers || !m->cpus || !online)
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

/* Writes the state file now. Runs on the loop, but from a timer, never inside a call. */
static int manager_write_state(Manager *m) {
        TracingEvent *const *events;
        StatePin *pins;
        size_t n, k = 0;
        int r;

        m->save_due_usec = 0;
        if (!m->state_path)
                return 0;

        events = tracing_events(m->tracing, &n);
        pins = calloc(n + 1, sizeof(StatePin));
        if (!pins)
                return -ENOMEM;
        for (size_t i = 0; i < n; i++)
                if (events[i]->pinned)
                        pins[k++] = (StatePin){ .event = events[i]->name,
                                                .filter = events[i]->filter,
                                                .filter_uid = events[i]->filter_uid,
                                                .uids = events[i]->pin_uids,
                                                .n_uids = events[i]->n_pin_uids };
        r = state_save(m->state_path, pins, k);
        free(pins); /* the strings belong to the events */
        if (r < 0) {
                /* Once per kind of failure: a full disk must not fill the journal too. */
                if (r != m->state_error)
                        log_error_errno(r,
                                        "Failed to save state to '%s': %m. Pins made since will not survive "
                                        "a restart until a save succeeds; retrying.",
                                        m->state_path);
                m->state_error = r;
                return r;
        }
        if (m->state_error != 0)
                log_notice("Saved state to '%s' again.", m->state_path);
        m->state_error = 0;
        m->state_saves++;
        return 0;
}

static int manager_on_save_timer(sd_event_source *s, uint64_t usec, void *userdata) {
        Manager *m = userdata;

        if (manager_write_state(m) < 0) {
                /* Keep it pending: a later change or the retry, whichever comes first, tries again. */
                (void) sd_event_source_set_time_relative(s, MANAGER_SAVE_RETRY_USEC);
                (void) sd_event_source_set_enabled(s, SD_EVENT_ONESHOT);
                m->save_due_usec = usec + MANAGER_SAVE_RETRY_USEC;
        }
        return 0;
}

int manager_save_state(Manager *m) {
        uint64_t now = 0, when;
        int r;

        if (!m->state_path)
                return 0;
        r = sd_event_now(m->event, CLOCK_MONOTONIC, &now);
        if (r < 0)
                return r;

        /* Put off by each change, but not forever under a steady stream of changes. */
        if (m->save_due_usec == 0)
                m->save_due_usec = now + MANAGER_SAVE_MAX_DELAY_USEC;
        when = MIN(now + MANAGER_SAVE_DELAY_USEC, m->save_due_usec);

        if (!m->save_timer) {
                r = sd_event_add_time(m->event, &m->save_timer, CLOCK_MONOTONIC, when, 10 * 1000,
                                      manager_on_save_timer, m);
                if (r < 0)
                        return log_warning_errno(r, "Failed to schedule saving the state: %m");
                return 0;
        }
        r = sd_event_source_set_time(m->save_timer, when);
        if (r >= 0)
                r = sd_event_source_set_enabled(m->save_timer, SD_EVENT_ONESHOT);
        if (r < 0)
                return log_warning_errno(r, "Failed to schedule saving the state: %m");
        return 0;
}

static int manager_restore_state(Manager *m) {
        StatePin *pins = NULL;
        size_t n = 0;
        int r;

        if (!m->config.state_dir)
                return 0;
        if (asprintf(&m->state_path, "%s/%s.json", m->config.state_dir, m->config.instance) < 0)
                return -ENOMEM;
        if (mkdir(m->config.state_dir, 0700) < 0 && errno != EEXIST)
                log_warning_errno(negative_errno(), "Failed to create '%s': %m", m->config.state_dir);

        r = state_load(m->state_path, &pins, &n);
        if (r < 0) {
                /* A broken or planted file must not keep tpd from starting: start without pins
                 * (the next save replaces the file). */
                log_warning_errno(r, "Ignoring state file '%s': %m", m->state_path);
                return 0;
        }

        for (size_t i = 0; i < n; i++) {
                _cleanup_free_ char *message = NULL;
                char esc[ESCAPE_TEXT_MAX];
                TracingEvent *e;

                /* The kernel may have lost an event (a module unloaded) or changed its format:
                 * restore what still works and say what does not. */
                if (pins[i].n_uids == 0)
                        continue;
                r = tracing_event_get(m->tracing, pins[i].event, &e);
                if (r < 0) {
                        log_warning_errno(r, "Not restoring '%s': %m",
                                          escape_text(pins[i].event, esc, sizeof(esc)));
                        continue;
                }
                if (pins[i].filter) {
                        char esc_message[ESCAPE_TEXT_MAX];

                        r = tracing_event_set_filter(m->tracing, e, pins[i].filter, &message);
                        if (r < 0) {
                                log_warning_errno(r, "Not restoring '%s': filter '%s' failed: %s", e->name,
                                                  escape_text(pins[i].filter, esc, sizeof(esc)),
                                                  escape_text(message ?: strerror(-r), esc_message,
                                                              sizeof(esc_message)));
                                continue;
                        }
                        e->filter_uid = pins[i].filter_uid;
                }
                /* Each pin keeps its owner across restarts. */
                for (size_t j = 0; j < pins[i].n_uids; j++)
                        r = tracing_event_pin_uid(m->tracing, e, pins[i].uids[j], true);
                if (!e->pinned) {
                        log_warning_errno(r, "Not restoring '%s': %m", e->name);
                        continue;
                }
                log_info("Restored '%s'%s%s%s.", e->name, e->filter ? " with filter '" : "",
                         e->filter ? escape_text(e->filter, esc, sizeof(esc)) : "", e->filter ? "'" : "");
        }
        state_pins_free(pins, n);
        return 0;
}

/* Events= of the configuration: pinned at every start. An event the kernel does not have stops the
 * start, as any other invalid setting does. */
static int manager_pin_configured(Manager *m) {
        for (size_t i = 0; m->config.events && m->config.events[i]; i++) {
                _cleanup_strv_free_ char **names = NULL;
                const char *bad = NULL;
                int r;

                r = tracing_resolve(m->tracing, &m->config.events[i], 1, &names, &bad);
                if (r < 0)
                        return log_error_errno(r, "%s: Events=: no event matches '%s'.",
                                               m->config.events_origin[i], m->config.events[i]);
                for (char **n = names; *n; n++) {
                        TracingEvent *e;

                        r = tracing_event_get(m->tracing, *n, &e);
                        if (r >= 0)
                                r = tracing_event_pin(m->tracing, e, true);
                        if (r < 0)
                                return log_error_errno(r, "%s: Events=: failed to enable '%s': %m",
                                                       m->config.events_origin[i], *n);
                }
        }
        return 0;
}

static int manager_on_call(Peer *p, const VarlinkCall *call, void *userdata) {
        Manager *m = userdata;

        return m->dispatch(m, p, call);
}

/* A connection ends: out of the list, its stream's counts into the totals, its holds released. */
static void manager_on_peer_free(Peer *p, void *userdata) {
        Manager *m = userdata;

        if (p->prev)
                p->prev->next = p->next;
        else if (m->peers == p)
                m->peers = p->next;
        if (p->next)
                p->next->prev = p->prev;
        m->n_peers--;
        if (p->refusal_error)
                m->n_refused--;
        if (p->stream) {
                m->n_streams--;
                if (p->recording)
                        m->n_recordings--;
                m->delivered += p->stream->delivered;
                m->lost_client += p->stream->lost_client;
        }
        for (size_t i = 0; i < p->n_held; i++) {
                int r = tracing_event_unref(m->tracing, p->held[i]);
                if (r < 0)
                        log_warning_errno(r, "Failed to disable '%s' after its last stream: %m",
                                          p->held[i]->name);
        }
        p->n_held = 0;
        if (p->counting)
                manager_counting_stop(m);
}

/* A recording ends: its peer asks for the names the kernel can give now, as trace-cmd reads the
 * kernel's table when it stops. A task gone before tpd read its records, whose last switch the
 * table had not seen at its last read, is named only by a read from now. One read per recording
 * that ends, which only the peer's own call started. */
static void manager_on_hangup(Peer *p, void *userdata) {
        Manager *m = userdata;
        int r;

        if (!p->recording)
                return;
        comm_cache_reread(m->comm);
        r = recording_finish(p->recording, m->decoder);
        if (r < 0)
                log_debug_errno(r, "Peer %d: cannot send the last names of its recording: %m", (int) p->pid);
}

static const PeerHandler manager_peer_handler = {
        .on_call = manager_on_call,
        .on_free = manager_on_peer_free,
        .on_hangup = manager_on_hangup,
};

static int manager_add_peer(Manager *m, int fd, const struct ucred *cred, Peer **ret) {
        Peer *p;
        int r;

        r = peer_new(m->event, fd, cred, &manager_peer_handler, m, &p);
        if (r < 0)
                return r;
        p->next = m->peers;
        if (m->peers)
                m->peers->prev = p;
        m->peers = p;
        m->n_peers++;
        *ret = p;
        return 0;
}

static bool manager_is_member(Manager *m, const struct ucred *cred, const gid_t *groups, size_t n) {
        if (!m->access_gid_valid)
                return false;
        if (cred->gid == m->access_gid)
                return true;
        for (size_t i = 0; i < n; i++)
                if (groups[i] == m->access_gid)
                        return true;
        return false;
}

/* A refused peer gets its error as the answer to its first call (closing at once would race with
 * that call: the peer might see EPIPE instead of the reason). Only this many refusals wait at once;
 * beyond, connections are closed without one. */
#define MANAGER_REFUSALS_MAX 16U

static void manager_refuse(Manager *m, int fd, const struct ucred *cred, const char *error,
                           const char *message) {
        Peer *p;

        if (m->n_refused >= MANAGER_REFUSALS_MAX) {
                safe_close(fd);
                return;
        }
        if (manager_add_peer(m, fd, cred, &p) < 0)
                return;
        m->n_refused++; /* given back by manager_on_peer_free() */
        if (streq(error, VARLINK_ERROR_PERMISSION_DENIED) && m->config.access_group)
                p->refusal_group = strdup(m->config.access_group); /* only for a hint: NULL is fine */
        (void) peer_refuse(p, error, message);
}

static unsigned manager_connections_of(Manager *m, uid_t uid) {
        unsigned n = 0;

        for (Peer *p = m->peers; p; p = p->next)
                if (p->uid == uid && !p->refusal_error)
                        n++;
        return n;
}

/* Returns NULL when the peer may have one more connection, else why not. */
static const char *manager_connection_limit(Manager *m, const struct ucred *cred, bool root) {
        unsigned total = m->config.max_clients * 2, n = m->n_peers - m->n_refused;

        if (m->config.max_clients == 0)
                return NULL;
        if (n >= total)
                return "tpd has no connection left";
        if (root)
                return NULL;
        if (n >= total - manager_root_slots(total))
                return "the connections left are kept for root";
        if (m->config.max_connections_per_user > 0 &&
            manager_connections_of(m, cred->uid) >= m->config.max_connections_per_user)
                return "this user has as many connections as it may (MaxConnectionsPerUser=)";
        return NULL;
}

/* Who may connect (docs/design.md §5): root, and members of the access group by the groups the peer
 * process holds. The socket's mode keeps others out already; this check still holds when the
 * socket was made by someone else or its mode was changed. Then the connection limits. */
static void manager_on_accept(int fd, const struct ucred *cred, const gid_t *groups, size_t n_groups,
                              void *userdata) {
        static RateLimit log_limit = RATELIMIT_INIT(10 * 1000 * 1000ULL, 5);
        Manager *m = userdata;
        bool root = cred->uid == 0 || cred->uid == geteuid();
        _cleanup_free_ char *message = NULL;
        const char *why;
        Peer *p;
        int r;

        if (!root && !manager_is_member(m, cred, groups, n_groups)) {
                if (ratelimit_below(&log_limit))
                        log_notice("Denying access to uid %u (pid %d).", (unsigned) cred->uid,
                                   (int) cred->pid);
                if (asprintf(&message, "Only root and members of group '%s' may use tpd.",
                             strempty(m->config.access_group)) < 0)
                        message = NULL;
                manager_refuse(m, fd, cred, VARLINK_ERROR_PERMISSION_DENIED,
                               message ?: "Only root and members of the access group may use tpd.");
                return;
        }

        why = manager_connection_limit(m, cred, root);
        if (why) {
                if (ratelimit_below(&log_limit))
                        log_warning("Refusing a connection of uid %u (pid %d): %s (%u connected).",
                                    (unsigned) cred->uid, (int) cred->pid, why, m->n_peers);
                if (asprintf(&message, "Too many connections: %s.", why) < 0)
                        message = NULL;
                manager_refuse(m, fd, cred, TPD_ERROR_LIMIT_EXCEEDED, message ?: "Too many connections.");
                return;
        }

        r = manager_add_peer(m, fd, cred, &p);
        if (r < 0 && ratelimit_below(&log_limit))
                log_warning_errno(r, "Failed to set up a connection: %m");
}

int manager_start(Manager *m, int listen_fd, ManagerDispatch dispatch) {
        int r;

        if (m->config.access_group && *m->config.access_group) {
                struct group *g = getgrnam(m->config.access_group);
                if (g) {
                        m->access_gid = g->gr_gid;
                        m->access_gid_valid = true;
                } else
                        log_notice("Access group '%s' does not exist: only root may connect.",
                                   m->config.access_group);
        }

        r = manager_setup_tracing(m);
        if (r < 0) {
                safe_close(listen_fd);
                return r;
        }

        r = manager_restore_state(m);
        if (r >= 0)
                r = manager_pin_configured(m);
        if (r < 0) {
                safe_close(listen_fd);
                return r;
        }

        m->dispatch = dispatch;
        /* server_new() says why binding failed; only what it leaves unsaid is logged here. */
        r = server_new(m->event, listen_fd, m->config.socket_path,
                       m->access_gid_valid ? m->access_gid : (gid_t) -1, manager_on_accept, m, &m->server);
        if (r == -ENOMEM)
                return log_error_errno(r, "Out of memory.");
        if (r < 0)
                return r;

        r = sd_event_add_time_relative(m->event, &m->flush_timer, CLOCK_MONOTONIC,
                                       (uint64_t) m->config.flush_interval_ms * 1000, 1000, manager_on_flush,
                                       m);
        if (r >= 0)
                r = sd_event_add_time_relative(m->event, &m->status_timer, CLOCK_MONOTONIC, STATUS_USEC,
                                               100 * 1000, manager_on_status_timer, m);
        if (r >= 0)
                r = sd_event_add_time_relative(m->event, &m->check_timer, CLOCK_MONOTONIC, CHECK_USEC,
                                               CHECK_SLACK_USEC, manager_on_check_timer, m);
        if (r < 0)
                return log_error_errno(r, "Failed to set up tpd's timers: %m");
        r = manager_watch_clock(m);
        if (r < 0)
                log_warning_errno(r,
                                  "Failed to watch the wall clock, streams will not hear of its steps: %m");

        /* WATCHDOG=1 from the loop itself, at half of WatchdogSec=, when the service asks for it. */
        r = sd_event_set_watchdog(m->event, true);
        if (r < 0)
                log_warning_errno(r, "Failed to enable the watchdog: %m");

        r = sd_event_add_signal(m->event, NULL, SIGTERM, manager_on_signal, m);
        if (r >= 0)
                r = sd_event_add_signal(m->event, NULL, SIGINT, manager_on_signal, m);
        if (r < 0)
                return log_error_errno(r, "Failed to watch signals: %m");
        return 0;
}

int manager_run(Manager *m) {
        unsigned n_online = 0;
        int r;

        for (unsigned i = 0; i < m->n_cpus; i++)
                n_online += m->cpus[i].online;
        log_info("Tracing in instance '%s' on %u of %u possible CPUs, listening on %s.",
                 tracing_instance_name(m->tracing), n_online, m->n_cpus, m->config.socket_path);
        (void) sd_notifyf(false, "READY=1\nSTATUS=Tracing in instance '%s'.",
                          tracing_instance_name(m->tracing));

        r = loop_run(m->event, &m->loop);
        if (r < 0)
                return log_error_errno(r, "Event loop failed: %m");

        /* Hand the streams what is still queued before closing them. */
        for (unsigned i = 0; i < m->n_cpus; i++)
                if (m->readers[i])
                        (void) reader_flush(m->readers[i]);
        manager_flush_clients(m);

        /* A save still pending (a change less than the debounce delay ago, or a failed one) is
         * done now: the pins must survive this stop. */
        if (m->save_due_usec != 0)
                (void) manager_write_state(m);
        return 0;
}
