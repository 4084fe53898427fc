/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <grp.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <systemd/sd-daemon.h>

#include "client.h"
#include "log.h"
#include "manager.h"
#include "server.h"
#include "state.h"

/* How often the STATUS= line is sent. */
#define STATUS_USEC (5 * 1000 * 1000ULL)

void manager_config_done(ManagerConfig *c) {
        free(c->socket_path);
        free(c->instance);
        free(c->clock);
        free(c->access_group);
        free(c->state_dir);
        strv_free(c->events);
        strv_free(c->events_origin);
        *c = (ManagerConfig) {};
}

static int config_copy(ManagerConfig *dst, const ManagerConfig *src) {
        *dst = *src;
        dst->socket_path = src->socket_path ? strdup(src->socket_path) : NULL;
        dst->instance = src->instance ? strdup(src->instance) : NULL;
        dst->clock = src->clock ? strdup(src->clock) : NULL;
        dst->access_group = src->access_group ? strdup(src->access_group) : NULL;
        dst->state_dir = src->state_dir ? strdup(src->state_dir) : NULL;
        dst->events = NULL;
        dst->events_origin = NULL;
        for (size_t i = 0; src->events && src->events[i]; i++) {
                size_t n = strv_length(dst->events);
                char **l = reallocarray(dst->events, n + 2, sizeof(char *));
                char **o = l ? reallocarray(dst->events_origin, n + 2, sizeof(char *)) : NULL;
                if (l)
                        dst->events = l;
                if (!l || !o)
                        return -ENOMEM;
                dst->events_origin = o;
                l[n] = strdup(src->events[i]);
                o[n] = strdup(src->events_origin[i]);
                l[n + 1] = o[n + 1] = NULL;
                if (!l[n] || !o[n])
                        return -ENOMEM;
        }
        if ((src->state_dir && !dst->state_dir) ||
            (src->socket_path && !dst->socket_path) || (src->instance && !dst->instance) ||
            (src->clock && !dst->clock) || (src->access_group && !dst->access_group))
                return -ENOMEM;
        return 0;
}

Manager *manager_free(Manager *m) {
        if (!m)
                return NULL;

        /* Clients first: their streams hold event references in tracing. */
        while (m->clients)
                client_free(m->clients);
        server_free(m->server);
        for (unsigned i = 0; m->readers && i < m->n_cpus; i++)
                reader_free(m->readers[i]);
        free(m->readers);
        sd_event_source_disable_unref(m->flush_timer);
        sd_event_source_disable_unref(m->status_timer);
        decoder_free(m->decoder);
        tracing_free(m->tracing);
        comm_cache_free(m->comm);
        batch_unref(m->batch);
        free(m->overrun_reported);
        free(m->dropped_reported);
        free(m->decode_pending);
        free(m->state_path);
        sd_event_unref(m->event);
        manager_config_done(&m->config);
        free(m);
        return NULL;
}

int manager_new(const ManagerConfig *config, Manager **ret) {
        _cleanup_(manager_freep) Manager *m = NULL;
        int r;

        m = calloc(1, sizeof(Manager));
        if (!m)
                return -ENOMEM;
        r = config_copy(&m->config, config);
        if (r < 0)
                return r;
        r = sd_event_default(&m->event);
        if (r < 0)
                return r;
        *ret = TAKE_PTR(m);
        return 0;
}

static const char *manager_comm(void *userdata, int pid) {
        Manager *m = userdata;
        return comm_cache_lookup(m->comm, pid);
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
        if (tracing_cpu_stats(m->tracing, cpu, &s) < 0) {
                n = stored ? *stored : 0;
                m->overrun_reported[cpu] += n;
                return n;
        }
        n = s.overrun > m->overrun_reported[cpu] ? s.overrun - m->overrun_reported[cpu] : 0;
        m->overrun_reported[cpu] += n;
        return n;
}

/* Offers a batch of one CPU to every stream. */
static void manager_offer(Manager *m, Batch *b) {
        int r;

        b->plain_end = b->buf.len;
        for (Client *c = m->clients; c; c = c->next) {
                if (!c->stream)
                        continue;
                r = stream_offer_batch(c->stream, m->decoder, b);
                if (r < 0)
                        log_warning_errno(r, "Client %d: failed to queue records: %m", (int) c->pid);
        }
}

/* Counts the records of a page that a failed decode left out, by walking its entry headers. */
static uint64_t page_records_left(const void *page, size_t size, const Batch *b, size_t from) {
        uint64_t total = decoder_page_records(page, size), got = 0;

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

                if (tracing_cpu_stats(m->tracing, cpu, &st) < 0)
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
                        r = batch_add_lost(b, ts, cpu, st.overrun - m->overrun_reported[cpu], RECORD_LOST_OVERRUN);
                        if (r >= 0) {
                                b->records[b->n_records - 1].lost_base = m->overrun_reported[cpu];
                                m->overrun_reported[cpu] = st.overrun;
                        }
                }
                if (r >= 0 && st.dropped > m->dropped_reported[cpu]) {
                        r = batch_add_lost(b, ts, cpu, st.dropped - m->dropped_reported[cpu], RECORD_LOST_DROPPED);
                        if (r >= 0) {
                                b->records[b->n_records - 1].lost_base = m->dropped_reported[cpu];
                                m->dropped_reported[cpu] = st.dropped;
                        }
                }
                if (b->n_records > 0)
                        manager_offer(m, b);
                batch_unref(b);
        }
}

void manager_flush_clients(Manager *m) {
        Client *c, *next;

        for (c = m->clients; c; c = next) {
                next = c->next;
                if (c->stream && !queue_is_empty(&c->stream->queue))
                        (void) client_flush(c);
        }
}

static void manager_on_pages(void *userdata, unsigned cpu, const void *pages, size_t n_pages, size_t page_size) {
        Manager *m = userdata;
        uint64_t overrun_before;
        Batch *b;
        int r;

        /* Nobody listens: the pages were drained so that a new stream starts with fresh records,
         * and there is nothing to decode them for. */
        if (m->n_streams == 0)
                return;

        /* Reuse the last batch's memory unless a client still holds part of it. */
        if (m->batch && m->batch->refs == 1)
                batch_reset(m->batch);
        else {
                m->batch = batch_unref(m->batch);
                m->batch = batch_new();
                if (!m->batch)
                        return;
        }
        b = m->batch;

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
                        uint64_t now = 0;

                        left = page_records_left(page, page_size, b, before);
                        /* On the record path: at most one warning every ten seconds. */
                        (void) sd_event_now(m->event, CLOCK_MONOTONIC, &now);
                        if (m->decode_warned_usec == 0 || now >= m->decode_warned_usec + 10 * 1000 * 1000ULL) {
                                m->decode_warned_usec = now;
                                log_warning_errno(r, "CPU %u: failed to decode a page, %" PRIu64 " records lost: %m",
                                                  cpu, left);
                        }
                }
                if (page_size >= 8)
                        memcpy(&page_ts, page, 8);
                if (left > 0 && cpu < m->n_cpus && batch_add_lost(b, page_ts, cpu, left, RECORD_LOST_DECODE) < 0)
                        m->decode_pending[cpu] += left;
        }
        if (b->n_records == 0)
                return;

        /* The overrun records of this batch cover the kernel's counter from where the last one
         * ended: a stream started since is charged only with the part after its start. */
        for (size_t i = 0; i < b->n_records; i++)
                if (b->records[i].kind == RECORD_LOST_OVERRUN) {
                        b->records[i].lost_base = overrun_before;
                        overrun_before += b->records[i].lost;
                }

        manager_offer(m, b);
        manager_flush_clients(m);
}

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
                (void) reader_flush(m->readers[i]);
        if (m->n_streams > 0) {
                manager_report_kernel_losses(m);
                /* No page may follow to push out what was just queued. */
                manager_flush_clients(m);
        }
        /* Streams whose drops were not reported yet get their lost records now that there may be
         * room. */
        for (Client *c = m->clients, *next; c; c = next) {
                next = c->next;
                if (c->stream && c->stream->drops_pending)
                        (void) client_flush(c);
        }
        /* Without streams nothing waits for a partial page: sleep until one starts. */
        if (m->n_streams == 0)
                return 0;
        return rearm(s, (uint64_t) m->config.flush_interval_ms * 1000);
}

void manager_stream_started(Manager *m) {
        int enabled = SD_EVENT_OFF;

        /* Pages read while nobody listened were not decoded, nor their losses counted: start the
         * count of reported overruns from the kernel's, so that the first page that flags a loss
         * without a count does not charge the new stream with losses from before it. */
        bool first = m->n_streams++ == 0;

        /* Each new stream notes the kernel's loss counters at its start: losses counted before
         * are not its own (they reach it only when reported later, for streams started earlier). */
        for (unsigned cpu = 0; cpu < m->n_cpus; cpu++) {
                TracingCpuStats st;
                if (tracing_cpu_stats(m->tracing, cpu, &st) < 0)
                        continue;
                if (first) {
                        m->overrun_reported[cpu] = st.overrun;
                        m->dropped_reported[cpu] = st.dropped;
                }
                for (Client *c = m->clients; c; c = c->next)
                        if (c->stream && !c->stream->has_base)
                                (void) stream_set_base(c->stream, cpu, st.overrun, st.dropped);
        }
        for (Client *c = m->clients; c; c = c->next)
                if (c->stream)
                        c->stream->has_base = true;
        if (sd_event_source_get_enabled(m->flush_timer, &enabled) >= 0 && enabled == SD_EVENT_OFF)
                (void) rearm(m->flush_timer, (uint64_t) m->config.flush_interval_ms * 1000);
}

/* STATUS= for systemctl status: what tpd does, in one line. */
static void manager_notify_status(Manager *m) {
        uint64_t records = decoder_stats(m->decoder)->records, delivered = m->delivered;
        uint64_t lost_client = m->lost_client, lost_overrun = decoder_stats(m->decoder)->overrun;
        uint64_t usec = 0, rate = 0;

        (void) sd_event_now(m->event, CLOCK_MONOTONIC, &usec);
        if (m->status_usec > 0 && usec > m->status_usec)
                rate = (records - m->status_records) * 1000000ULL / (usec - m->status_usec);
        m->status_usec = usec;
        m->status_records = records;

        for (Client *c = m->clients; c; c = c->next)
                if (c->stream) {
                        delivered += c->stream->delivered;
                        lost_client += c->stream->lost_client;
                }
        (void) sd_notifyf(false,
                          "STATUS=%" PRIu64 " events/s, %u streams, %u clients, %" PRIu64 " delivered, "
                          "%" PRIu64 " lost (%" PRIu64 " overrun, %" PRIu64 " client)",
                          rate, m->n_streams, m->n_clients, delivered, lost_overrun + lost_client, lost_overrun,
                          lost_client);
}

static int manager_on_status_timer(sd_event_source *s, uint64_t usec, void *userdata) {
        Manager *m = userdata;

        manager_notify_status(m);
        return rearm(s, STATUS_USEC);
}

static int manager_on_signal(sd_event_source *s, const struct signalfd_siginfo *si, void *userdata) {
        Manager *m = userdata;

        log_info("Received SIG%s, stopping.", sigabbrev_np((int) si->ssi_signo));
        (void) sd_notify(false, "STOPPING=1");
        return sd_event_exit(m->event, 0);
}

static int manager_setup_tracing(Manager *m) {
        DecoderCallbacks callbacks = {
                .comm = manager_comm,
                .missed = manager_missed,
                .userdata = m,
        };
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

        /* trace_marker writes are recorded without enabling anything: know their format. */
        r = tracing_event_get(m->tracing, "ftrace:print", &print);
        if (r < 0)
                log_warning_errno(r, "Failed to load the format of ftrace:print: %m");

        r = comm_cache_new(tracing_saved_cmdlines_path(m->tracing), &m->comm);
        if (r < 0)
                return r;

        r = decoder_new(tracing_tep(m->tracing), &callbacks, &m->decoder);
        if (r < 0)
                return r;

        m->overrun_reported = calloc(m->n_cpus, sizeof(uint64_t));
        m->dropped_reported = calloc(m->n_cpus, sizeof(uint64_t));
        m->decode_pending = calloc(m->n_cpus, sizeof(uint64_t));
        m->readers = calloc(m->n_cpus, sizeof(Reader *));
        if (!m->overrun_reported || !m->dropped_reported || !m->decode_pending || !m->readers)
                return -ENOMEM;
        for (unsigned cpu = 0; cpu < m->n_cpus; cpu++) {
                int fd = tracing_open_cpu(m->tracing, cpu);
                if (fd < 0)
                        return log_error_errno(fd, "Failed to open trace_pipe_raw of CPU %u: %m", cpu);
                r = reader_new(m->event, fd, cpu, tracing_page_size(m->tracing), manager_on_pages, m,
                               &m->readers[cpu]);
                if (r < 0)
                        return r;
        }
        return 0;
}

int manager_save_state(Manager *m) {
        TracingEvent *const *events;
        StatePin *pins;
        size_t n, k = 0;
        int r;

        if (!m->state_path)
                return 0;

        events = tracing_events(m->tracing, &n);
        pins = calloc(n + 1, sizeof(StatePin));
        if (!pins)
                return -ENOMEM;
        for (size_t i = 0; i < n; i++)
                if (events[i]->pinned)
                        pins[k++] = (StatePin) { .event = events[i]->name, .filter = events[i]->filter };
        r = state_save(m->state_path, pins, k);
        free(pins); /* the strings belong to the events */
        if (r < 0)
                return log_warning_errno(r, "Failed to save state to '%s': %m", m->state_path);
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
        if (r < 0)
                return log_warning_errno(r, "Ignoring state file '%s': %m", m->state_path);

        for (size_t i = 0; i < n; i++) {
                _cleanup_free_ char *message = NULL;
                TracingEvent *e;

                /* The kernel may have lost an event (a module unloaded) or changed its format:
                 * restore what still works and say what does not. */
                r = tracing_event_get(m->tracing, pins[i].event, &e);
                if (r < 0) {
                        log_warning_errno(r, "Not restoring '%s': %m", pins[i].event);
                        continue;
                }
                if (pins[i].filter) {
                        r = tracing_event_set_filter(m->tracing, e, pins[i].filter, &message);
                        if (r < 0) {
                                log_warning_errno(r, "Not restoring '%s': filter '%s' failed: %s", e->name,
                                                  pins[i].filter, message ?: strerror(-r));
                                continue;
                        }
                }
                r = tracing_event_pin(m->tracing, e, true);
                if (r < 0)
                        continue;
                log_info("Restored '%s'%s%s%s.", e->name, e->filter ? " with filter '" : "", strempty(e->filter),
                         e->filter ? "'" : "");
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
                        return log_error_errno(r, "%s: Events=: no event matches '%s'.", m->config.events_origin[i],
                                               m->config.events[i]);
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

int manager_start(Manager *m, int listen_fd) {
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

        r = server_new(m, listen_fd, m->config.socket_path, &m->server);
        if (r < 0)
                return r;

        r = sd_event_add_time_relative(m->event, &m->flush_timer, CLOCK_MONOTONIC,
                                       (uint64_t) m->config.flush_interval_ms * 1000, 1000, manager_on_flush, m);
        if (r < 0)
                return r;
        r = sd_event_add_time_relative(m->event, &m->status_timer, CLOCK_MONOTONIC, STATUS_USEC,
                                       100 * 1000, manager_on_status_timer, m);
        if (r < 0)
                return r;

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
        int r;

        log_info("Tracing in instance '%s' on %u CPUs, listening on %s.", tracing_instance_name(m->tracing),
                 m->n_cpus, m->config.socket_path);
        (void) sd_notifyf(false, "READY=1\nSTATUS=Tracing in instance '%s'.", tracing_instance_name(m->tracing));

        r = sd_event_loop(m->event);
        if (r < 0)
                return log_error_errno(r, "Event loop failed: %m");

        /* Hand the streams what is still queued before closing them. */
        for (unsigned i = 0; i < m->n_cpus; i++)
                (void) reader_flush(m->readers[i]);
        manager_flush_clients(m);
        return 0;
}
