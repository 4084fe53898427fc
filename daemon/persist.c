/* SPDX-License-Identifier: LGPL-2.1-or-later */

/*
 * The pins that outlive tpd: the state file written a moment after Enable and Disable change them
 * (and at stop), read back at start; and the events Events= pins at every start.
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "log.h"
#include "manager.h"
#include "state.h"

/* A burst of Enable/Disable calls costs one write of the state file; a failed write is tried
 * again after MANAGER_SAVE_RETRY_USEC. */
#define MANAGER_SAVE_DELAY_USEC (200 * 1000ULL)
#define MANAGER_SAVE_MAX_DELAY_USEC (1000 * 1000ULL)
#define MANAGER_SAVE_RETRY_USEC (10 * 1000 * 1000ULL)

/* Writes the state file now. Runs on the loop, but from a timer, never inside a call. */
int manager_write_state(Manager *m) {
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

int manager_restore_state(Manager *m) {
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
int manager_pin_configured(Manager *m) {
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
