/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <inttypes.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include <systemd/sd-daemon.h>

#include "core/clock.h"
#include "core/page.h"
#include "log.h"
#include "loss.h"
#include "manager.h"
#include "peer.h"
#include "ratelimit.h"
#include "server.h"
#include "tpd-protocol.h"

Manager *manager_free(Manager *m) {
        if (!m)
                return NULL;

        /* The rings close first: their readers see "closed", not "retired", when their streams
         * end. Then peers: their streams hold event references in tracing. */
        shm_rings_done(&m->rings);
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
        sd_event_source_disable_unref(m->sync_defer);
        sd_event_source_disable_unref(m->save_timer);
        sd_event_source_disable_unref(m->clock_source);
        safe_close(m->clock_fd);
        /* Before the tracing: the workers are its format handler. */
        workers_free(m->workers);
        decoder_free(m->decoder);
        tracing_free(m->tracing);
        comm_cache_free(m->comm);
        manager_follow_done(m);
        ksyms_done(&m->stacks.ksyms);
        batch_unref(m->batch);
        counters_free(m->counters);
        free(m->accounts);
        free(m->counters_reply);
        free(m->overrun_reported);
        free(m->dropped_reported);
        free(m->decode_pending);
        pthread_mutex_destroy(&m->stats_lock);
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
        pthread_mutex_init(&m->stats_lock, NULL);
        r = config_copy(&m->config, config);
        if (r < 0)
                return r;
        r = sd_event_default(&m->event);
        if (r < 0)
                return r;
        *ret = TAKE_PTR(m);
        return 0;
}

static uint64_t manager_overrun_now(void *userdata, unsigned cpu) {
        Manager *m = userdata;
        TracingCpuStats st;

        if (manager_cpu_stats(m, cpu, &st) < 0)
                return UINT64_MAX;
        return st.overrun;
}

/* Offers a batch of one CPU to every stream. */
static void manager_offer(Manager *m, unsigned cpu, Batch *b) {
        int r;

        b->plain_end = b->buf.len;
        /* Once for every stream that reads a ring, then each other stream gets its share. */
        shm_rings_publish_batch(&m->rings, m->decoder, b);
        for (Peer *p = m->peers; p; p = p->next) {
                if (!p->stream || p->recording || p->shm || (p->stream->stack && !p->aggregation))
                        continue;
                if (p->aggregation) {
                        aggregation_feed(p->aggregation, m->decoder, p->stream, b);
                        continue;
                }
                r = stream_offer_batch(p->stream, m->decoder, b);
                if (r < 0)
                        log_warning_errno(r, "Peer %d: failed to queue records: %m", (int) p->pid);
        }
        manager_stacks_offer(m, cpu, b);
}

/* Losses the kernel counts without flagging a page: "dropped events" (overwrite off: the writer
 * drops new records when the buffer is full), and overruns not flagged yet. From the flush timer.
 * With decode workers in use, a CPU's report goes through its worker, after the pages handed over
 * before it, which may flag some of these losses in their place. */
static void manager_report_kernel_losses(Manager *m) {
        uint64_t ts = 0;

        /* No page dates these losses: take the time of this tick (the boot clock, tpd's default
         * trace clock). */
        (void) sd_event_now(m->event, CLOCK_BOOTTIME, &ts);
        ts *= 1000;
        for (unsigned cpu = 0; cpu < m->n_cpus; cpu++) {
                TracingCpuStats st;
                Batch *b;
                bool more;

                if (manager_cpu_stats(m, cpu, &st) < 0)
                        continue;
                /* Recordings keep their own account: each flags its losses on its next page. */
                for (Peer *p = m->peers; p; p = p->next)
                        if (p->recording) {
                                recording_note_kernel_losses(p->recording, cpu, st.overrun, st.dropped, ts);
                                if (cpu == 0)
                                        (void) recording_resolve_comms(p->recording, m->decoder);
                        }
                if (m->n_streams == m->n_recordings)
                        continue;
                pthread_mutex_lock(&m->stats_lock);
                more = st.overrun > m->overrun_reported[cpu] || st.dropped > m->dropped_reported[cpu];
                pthread_mutex_unlock(&m->stats_lock);
                if (!more)
                        continue;
                if (workers_active(m->workers) > 0) {
                        if (workers_submit_losses(m->workers, cpu, ts) < 0)
                                log_debug("CPU %u: no memory to report losses now; the next tick does.",
                                          cpu);
                        continue;
                }
                b = batch_new();
                if (!b)
                        return;
                manager_losses_into(m, cpu, ts, b);
                if (b->n_records > 0)
                        manager_offer(m, cpu, b);
                batch_trim(b);
                batch_unref(b);
        }
}

void manager_flush_peers(Manager *m) {
        Peer *p, *next;

        for (p = m->peers; p; p = next) {
                next = p->next;
                if (p->stream && !queue_is_empty(&p->stream->queue))
                        (void) peer_flush(p);
        }
}

/* The parts every stream wants in its lines go into the plain lines while decoding: when all
 * streams are --symbolic, "sym" costs no copy of the line; likewise "cgroup", when the loop decodes
 * (the tasks' cgroups are the loop's), and all want "sym" or none does (a copy adds "sym" after
 * the line's end). Recordings take no lines. */
static uint8_t manager_inline_variant(Manager *m, bool loop) {
        unsigned all = DECODER_VARIANT_SYM | DECODER_VARIANT_CGROUP, any = 0;
        bool streams = false;

        for (Peer *p = m->peers; p; p = p->next)
                if (p->stream && !p->recording && !p->aggregation) {
                        unsigned v = stream_variant(p->stream);

                        all &= v;
                        any |= v;
                        streams = true;
                }
        if (!streams)
                return 0;
        if (!loop || (any & ~all & DECODER_VARIANT_SYM))
                all &= ~(unsigned) DECODER_VARIANT_CGROUP;
        return (uint8_t) all;
}

/* A batch of one CPU decoded (on the loop, or by a worker: workers_sync() hands those over). */
void manager_on_decoded(Manager *m, unsigned cpu, Batch *b, int error) {
        /* On the record path: at most one warning every ten seconds. */
        static RateLimit decode_log_limit = RATELIMIT_INIT(10 * 1000 * 1000ULL, 1);

        if (error < 0 && ratelimit_below(&decode_log_limit))
                log_warning_errno(error, "CPU %u: failed to decode a page, its records were lost: %m", cpu);
        if (b->n_records == 0) {
                /* A read that brought only the stack of the CPU's last record. */
                if (b->lead_stack) {
                        manager_stacks_offer(m, cpu, b);
                        manager_flush_peers(m);
                }
                return;
        }
        manager_count_batch(m, b);
        manager_offer(m, cpu, b);
        manager_flush_peers(m);
        /* Queues hold lines of it: keep only what they were charged for (a record waiting for its
         * stack still needs them all). */
        if (b->refs > 1 && !manager_stacks_holds(m, b))
                batch_trim(b);
}

void manager_on_pages(void *userdata, unsigned cpu, const void *pages, size_t n_pages, size_t page_size) {
        Manager *m = userdata;

        if (manager_following(m))
                manager_follow_pages(m, cpu, pages, n_pages, page_size);
        else
                manager_take_pages(m, cpu, pages, n_pages, page_size);
}

void manager_read_all(Manager *m) {
        /* While a stream follows pids, the pages of all CPUs wait for each other (lineage.h). */
        if (manager_following(m)) {
                manager_follow_flush(m);
                return;
        }
        for (unsigned i = 0; i < m->n_cpus; i++)
                if (m->readers[i])
                        (void) reader_flush(m->readers[i]);
}

void manager_take_pages(Manager *m, unsigned cpu, const void *pages, size_t n_pages, size_t page_size) {
        uint64_t begin;
        Batch *b;
        int r;

        m->pages_seen += n_pages;
        if (m->quiet)
                manager_quiet_leave(m);

        /* Recordings take the pages as they are, before (and without) any decoding. */
        if (m->n_recordings > 0) {
                PageSource src = {
                        .cpu = cpu,
                        .page_size = page_size,
                        .overrun = manager_overrun_now,
                        .userdata = m,
                };

                for (Peer *p = m->peers; p; p = p->next)
                        if (p->recording) {
                                r = recording_offer_pages(p->recording, m->decoder, &src, pages, n_pages);
                                if (r < 0)
                                        log_warning_errno(r, "Peer %d: failed to queue pages: %m",
                                                          (int) p->pid);
                        }
        }

        /* Nobody listens to records: the pages were drained so that a new stream starts with fresh
         * records, and there is nothing to decode them for; only counted, when someone asks. */
        if (m->n_streams == m->n_recordings) {
                if (m->n_recordings > 0)
                        manager_flush_peers(m);
                manager_count_pages(m, pages, n_pages, page_size);
                return;
        }

        if (cpu >= m->n_cpus)
                return;
        if (workers_active(m->workers) > 0) {
                r = workers_submit(m->workers, cpu, pages, n_pages, page_size,
                                   manager_inline_variant(m, false), m->decode_pending[cpu]);
                if (r >= 0)
                        m->decode_pending[cpu] = 0;
                else
                        manager_decode_failed(m, cpu, r, pages, n_pages, page_size);
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
        b->variant = manager_inline_variant(m, true);
        /* DecodeWorkers=auto weighs the loop's decoding (manager_scale_decoding()). */
        begin = m->decode_auto ? thread_cpu_ns() : 0;
        r = decode_pages(m->decoder, &m->decode_context, cpu, pages, n_pages, page_size,
                         &m->decode_pending[cpu], b);
        if (m->decode_auto)
                m->decode_ns += thread_cpu_ns() - begin;
        manager_on_decoded(m, cpu, b, r);
}

/* Flushes in a row that found no page before tpd goes quiet: long enough that a steady trickle
 * keeps the timer, short enough that an idle tpd wakes about once a second (the check timer). */
#define QUIET_AFTER_FLUSHES 3U

static void manager_set_partial(Manager *m, bool partial) {
        for (unsigned i = 0; i < m->n_cpus; i++)
                if (m->readers[i])
                        (void) reader_set_partial(m->readers[i], partial);
}

/* Ten flushes a second cost an idle tpd more than all else (each wake-up of a VM's vCPU is
 * ≈ 0.2 ms here). buffer_percent 0 makes the kernel wake a reader at the first record instead:
 * the flush timer can sleep, and that record arrives sooner than the timer would have read it. */
static bool manager_quiet_enter(Manager *m) {
        int r;

        if (m->quiet_unsupported || m->lineage.queued > 0)
                return false;
        for (Peer *p = m->peers; p; p = p->next)
                if (p->stream && p->stream->drops_pending)
                        return false; /* the timer retries reporting them */
        r = tracing_set_buffer_percent(m->tracing, 0);
        if (r < 0) {
                /* -ERANGE: the kernel kept 1 for 0 (before 6.2), which would wait for a full page
                 * where the timer no longer reads the partial one. */
                log_debug_errno(r, "Failed to set buffer_percent to 0, staying on the flush timer: %m");
                if (r == -ERANGE) {
                        m->quiet_unsupported = true;
                        (void) tracing_set_buffer_percent(m->tracing, m->config.buffer_percent);
                }
                return false;
        }
        m->quiet = true;
        manager_set_partial(m, true);
        /* A record written before the fds were polled again is in the buffer now: read it. */
        manager_read_all(m);
        log_debug("No records for %u flushes: waiting for the next one.", QUIET_AFTER_FLUSHES);
        return m->quiet;
}

void manager_quiet_leave(Manager *m) {
        int r;

        /* Until buffer_percent is back, the readers must go on reading partial pages: with 0 the
         * kernel wakes them for any data, which splice() alone would not move. Tried again with
         * the next pages. */
        r = tracing_set_buffer_percent(m->tracing, m->config.buffer_percent);
        if (r < 0) {
                if (!m->quiet_leave_failed)
                        log_warning_errno(
                                r, "Failed to set buffer_percent back to %u, reading partial pages: %m",
                                m->config.buffer_percent);
                m->quiet_leave_failed = true;
                return;
        }
        m->quiet_leave_failed = false;
        m->quiet = false;
        m->empty_flushes = 0;
        manager_set_partial(m, false);
        if (m->n_streams > 0 || m->n_counting > 0)
                (void) loop_rearm(m->flush_timer, (uint64_t) m->config.flush_interval_ms * 1000);
}

static int manager_on_flush(sd_event_source *s, uint64_t usec, void *userdata) {
        Manager *m = userdata;

        /* Names looked up before this tick may have changed since (exec, prctl). */
        comm_cache_next_generation(m->comm);
        if (m->workers)
                workers_next_generation(m->workers);
        if (manager_following(m))
                manager_follow_tick(m);
        else
                manager_read_all(m);
        manager_stacks_tick(m);
        if (m->n_streams > 0) {
                manager_report_kernel_losses(m);
                /* No page may follow to push out what was just queued. */
                manager_flush_peers(m);
        }
        /* Streams whose drops were not reported yet get their lost records now that there may be
         * room. */
        for (Peer *p = m->peers, *next; p; p = next) {
                next = p->next;
                if (p->stream && p->stream->drops_pending)
                        (void) peer_flush(p);
        }
        /* Without streams nothing waits for a partial page: sleep until one starts (or counting
         * does: counts must be as fresh as a stream's records). */
        if (m->n_streams == 0 && m->n_counting == 0)
                return 0;
        if (m->pages_seen != m->pages_flushed)
                m->empty_flushes = 0;
        else if (m->empty_flushes < QUIET_AFTER_FLUSHES)
                m->empty_flushes++;
        m->pages_flushed = m->pages_seen;
        if (m->empty_flushes >= QUIET_AFTER_FLUSHES && !m->quiet && manager_quiet_enter(m))
                return 0;
        if (m->quiet)
                return 0;
        return loop_rearm(s, (uint64_t) m->config.flush_interval_ms * 1000);
}

void manager_stream_started(Manager *m) {
        int enabled = SD_EVENT_OFF;
        Peer *new_stream = NULL;
        bool first, recording;

        /* The new stream is the one without its base yet. */
        for (Peer *p = m->peers; p; p = p->next)
                if (p->stream && !p->stream->has_base)
                        new_stream = p;
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
                        /* Decode workers may still finish the pages of a stream that just ended. */
                        pthread_mutex_lock(&m->stats_lock);
                        m->overrun_reported[cpu] = st.overrun;
                        m->dropped_reported[cpu] = st.dropped;
                        pthread_mutex_unlock(&m->stats_lock);
                }
                for (Peer *p = m->peers; p; p = p->next)
                        if (p->recording && !p->stream->has_base)
                                (void) recording_set_base(p->recording, cpu, st.overrun, st.dropped);
                        else if (p->stream && !p->stream->has_base) {
                                (void) stream_set_base(p->stream, cpu, st.overrun, st.dropped);
                                if (p->shm)
                                        shm_reader_set_base(p->shm, cpu, st.overrun, st.dropped);
                        }
        }
        for (Peer *p = m->peers; p; p = p->next)
                if (p->stream) {
                        p->stream->has_base = true;
                        p->stream->counters = m->counters;
                }
        if (sd_event_source_get_enabled(m->flush_timer, &enabled) >= 0 && enabled == SD_EVENT_OFF)
                (void) loop_rearm(m->flush_timer, (uint64_t) m->config.flush_interval_ms * 1000);
}

static int manager_on_signal(sd_event_source *s, const struct signalfd_siginfo *si, void *userdata) {
        Manager *m = userdata;

        log_info("Received SIG%s, stopping.", sigabbrev_np((int) si->ssi_signo));
        (void) sd_notify(false, "STOPPING=1");
        return sd_event_exit(m->event, 0);
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
        p->aggregation = aggregation_free(p->aggregation);
        if (p->stream) {
                if (p->stream->selection.follow)
                        manager_follow_stop(m);
                if (p->stream->cgroup)
                        manager_attribution_stop(m);
                if (p->stream->stack) {
                        for (size_t i = 0; i < p->n_held; i++)
                                if (tracing_event_stack(m->tracing, p->held[i], false) < 0)
                                        log_warning("Failed to remove the stacktrace trigger of '%s'.",
                                                    p->held[i]->name);
                        if (!p->recording)
                                manager_stacks_stop(m);
                }
                m->n_streams--;
                if (p->recording)
                        m->n_recordings--;
                m->delivered += p->stream->delivered;
                m->lost_client += p->stream->lost_client;
        }
        p->shm = shm_reader_free(p->shm);
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
        .on_stream_input = manager_on_stream_input,
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

/* Who may connect and how many connections each may hold: access_admit() decides. */
static void manager_on_accept(int fd, const struct ucred *cred, const gid_t *groups, size_t n_groups,
                              void *userdata) {
        Manager *m = userdata;
        AccessRefusal refusal;
        Peer *p;
        int r;

        if (!access_admit(&m->access, m->peers, m->n_peers, m->n_refused, cred, groups, n_groups,
                          &refusal)) {
                manager_refuse(m, fd, cred, refusal.error, refusal.message);
                access_refusal_done(&refusal);
                return;
        }

        r = manager_add_peer(m, fd, cred, &p);
        if (r < 0 && ratelimit_below(&m->access.log_limit))
                log_warning_errno(r, "Failed to set up a connection: %m");
}

int manager_start(Manager *m, int listen_fd, ManagerDispatch dispatch) {
        int r;

        access_init(&m->access, &m->config);

        r = manager_setup_instance(m);
        if (r >= 0)
                r = manager_setup_decoding(m);
        if (r >= 0)
                manager_setup_rings(m);
        if (r >= 0)
                r = manager_open_cpus(m);
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
                       m->access.gid_valid ? m->access.gid : (gid_t) -1, manager_on_accept, m, &m->server);
        if (r == -ENOMEM)
                return log_error_errno(r, "Out of memory.");
        if (r < 0)
                return r;

        r = sd_event_add_time_relative(m->event, &m->flush_timer, CLOCK_MONOTONIC,
                                       (uint64_t) m->config.flush_interval_ms * 1000, 1000, manager_on_flush,
                                       m);
        if (r >= 0)
                r = manager_add_status_timer(m);
        if (r >= 0)
                r = manager_add_check_timer(m);
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
        manager_read_all(m);
        manager_sync_decoding(m);
        manager_flush_peers(m);

        /* A save still pending (a change less than the debounce delay ago, or a failed one) is
         * done now: the pins must survive this stop. */
        if (m->save_due_usec != 0)
                (void) manager_write_state(m);
        return 0;
}
