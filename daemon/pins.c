/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "access.h"
#include "calls.h"
#include "core/names.h"
#include "log.h"
#include "pins.h"
#include "tpd-protocol.h"

/* Enable and Disable change one event at a time: loading its format (≈ 1 ms), setting its filter
 * and its enable switch (a tracefs write each). A call may name up to 4,096 events (root), so it is
 * answered over as many turns of the loop as it takes (peer_defer()), each a slice of a few
 * milliseconds: other connections are served in between, this one's next calls wait for the
 * reply. A call is carried out to its end even when its peer leaves, as one answered at once
 * would be. */

typedef enum PinPhase {
        PIN_LOAD,  /* Enable: the formats of the events */
        PIN_CHECK, /* Enable with a filter: checked against every event before any changes */
        PIN_APPLY, /* the pins, and filters */
} PinPhase;

typedef struct PinJob {
        Manager *m;
        uid_t uid;
        bool root;
        bool enable;
        char *filter; /* Enable: the filter to set, "" to clear; NULL leaves filters alone */
        char **names; /* Enable: the resolved names, for loading */
        TracingEvent **events;
        size_t n;
        size_t i; /* the next event of the phase */
        PinPhase phase;
        json_object *list; /* the names enabled or disabled */
        unsigned reserved; /* counted in m->n_enabling until the job ends */
        bool changed;      /* a pin changed: the state file is due */
} PinJob;

static void pin_job_free(void *userdata) {
        PinJob *j = userdata;

        if (!j)
                return;
        j->m->n_enabling -= j->reserved;
        free(j->filter);
        strv_free(j->names);
        free(j->events);
        json_object_put(j->list);
        free(j);
}

/* Removes the pin of uid, or with NULL every pin. The kernel filter stays while anyone pins the
 * event, even when its setter leaves: the others may rely on it (on getting fewer records). It
 * goes with the last pin; streams that still hold the event then get it unfiltered. */
static int event_unpin(Manager *m, TracingEvent *e, const uid_t *uid) {
        if (e->filter && (!uid || e->n_pin_uids <= 1))
                (void) tracing_event_set_filter(m->tracing, e, NULL, NULL);
        if (!uid)
                return tracing_event_pin(m->tracing, e, false);
        return tracing_event_pin_uid(m->tracing, e, *uid, false);
}

/* The job ends with an error reply: what it changed so far stays (as with any call failing half
 * way), and is saved. Returns 1, or a negative errno. */
static int pin_job_fail(PinJob *j, int r) {
        if (j->changed)
                (void) manager_save_state(j->m);
        return r < 0 ? r : 1;
}

/* A member sets, changes or clears the kernel filter only of events nobody else holds: a kernel
 * filter decides what every holder of the event gets. */
static int pin_check_filter_owner(PinJob *j, Peer *p, TracingEvent *e) {
        _cleanup_free_ char *who = NULL;
        int r;

        if (j->root || streq_ptr(e->filter, *j->filter ? j->filter : NULL))
                return 0;
        r = event_held_by_others(j->m, e, j->uid, &who);
        if (r <= 0)
                return r;
        r = peer_errorf(p, VARLINK_ERROR_PERMISSION_DENIED, "event", e->name,
                        "The kernel filter of '%s' is shared with %s: only root, or a user that alone "
                        "holds the event, may change it.",
                        e->name, who);
        return r < 0 ? r : 1;
}

/* One event of the current phase; 1 when an error reply was queued. */
static int pin_job_step(PinJob *j, Peer *p) {
        Manager *m = j->m;
        TracingEvent *e = j->events[j->i];
        bool was_enabled;
        int r;

        switch (j->phase) {
        case PIN_LOAD:
                r = tracing_event_get(m->tracing, j->names[j->i], &j->events[j->i]);
                if (r < 0) {
                        r = peer_errorf(p, TPD_ERROR_NO_SUCH_EVENT, "event", j->names[j->i],
                                        "The format of '%s' could not be loaded: %s", j->names[j->i],
                                        strerror(-r));
                        return r < 0 ? r : 1;
                }
                return 0;

        case PIN_CHECK: {
                _cleanup_free_ char *message = NULL;

                r = pin_check_filter_owner(j, p, e);
                if (r != 0 || !*j->filter)
                        return r;
                /* A bad filter changes nothing. An empty one clears the events' filters. */
                if (e->always_on) {
                        r = peer_errorf(p, TPD_ERROR_INVALID_FILTER, "event", e->name,
                                        "'%s' cannot be filtered in the kernel.", e->name);
                        return r < 0 ? r : 1;
                }
                r = tracing_filter_verify(m->tracing, e, j->filter, &message);
                if (r < 0) {
                        r = peer_errorf(p, TPD_ERROR_INVALID_FILTER, "event", e->name,
                                        "Invalid filter for '%s': %s", e->name, strempty(message));
                        return r < 0 ? r : 1;
                }
                return 0;
        }

        case PIN_APPLY:
                break;
        }

        if (!j->enable) {
                if (!e->pinned || (!j->root && !tracing_event_pinned_by(e, j->uid)))
                        return 0;
                r = event_unpin(m, e, j->root ? NULL : &j->uid);
                if (r < 0)
                        return tracefs_error(p, r, "disable the event") < 0 ? -ENOMEM : 1;
                j->changed = true;
                json_push(&r, j->list, json_object_new_string(e->name));
                return r;
        }

        if (j->filter && !e->always_on && !streq_ptr(e->filter, *j->filter ? j->filter : NULL)) {
                _cleanup_free_ char *message = NULL;

                /* Checked again: others may have come to hold the event while the call waited for
                 * its turns. */
                r = pin_check_filter_owner(j, p, e);
                if (r != 0)
                        return r;
                r = tracing_event_set_filter(m->tracing, e, *j->filter ? j->filter : NULL, &message);
                if (r == -EINVAL) {
                        r = peer_errorf(p, TPD_ERROR_INVALID_FILTER, "event", e->name,
                                        "The kernel rejected the filter for '%s': %s", e->name,
                                        message ? message : strerror(EINVAL));
                        return r < 0 ? r : 1;
                }
                if (r < 0)
                        return tracefs_error(p, r, "set the filter") < 0 ? -ENOMEM : 1;
                e->filter_uid = j->uid;
        }
        was_enabled = e->enabled;
        r = tracing_event_pin_uid(m->tracing, e, j->uid, true);
        if (r < 0)
                return tracefs_error(p, r, "enable the event") < 0 ? -ENOMEM : 1;
        /* Enabled now: counted by tracing_n_enabled(), no longer as reserved. */
        if (!was_enabled && e->enabled && j->reserved > 0) {
                j->reserved--;
                m->n_enabling--;
        }
        j->changed = true;
        json_push(&r, j->list, json_object_new_string(e->name));
        return r;
}

static int pin_job_reply(PinJob *j, Peer *p) {
        json_object *reply = json_object_new_object();
        int r = 0;

        if (j->enable) {
                char esc[ESCAPE_TEXT_MAX];

                log_info("Enabled %zu event(s)%s%s%s for uid %u.", j->n, j->filter ? " with filter '" : "",
                         j->filter ? escape_text(j->filter, esc, sizeof(esc)) : "", j->filter ? "'" : "",
                         (unsigned) j->uid);
        }
        (void) manager_save_state(j->m);
        json_set(&r, reply, j->enable ? "enabled" : "disabled", TAKE_PTR(j->list));
        if (r < 0) {
                json_object_put(reply);
                return r;
        }
        r = peer_reply(p, reply);
        return r < 0 ? r : 1;
}

static int pin_job_work(Peer *p, uint64_t until_usec, void *userdata) {
        PinJob *j = userdata;
        int r;

        for (;;) {
                if (j->i == j->n) {
                        j->i = 0;
                        if (j->phase == PIN_APPLY)
                                return pin_job_reply(j, p);
                        j->phase = j->phase == PIN_LOAD && j->filter ? PIN_CHECK : PIN_APPLY;
                        continue;
                }
                r = pin_job_step(j, p);
                if (r != 0)
                        return pin_job_fail(j, r);
                j->i++;
                if (now_usec(CLOCK_MONOTONIC) >= until_usec)
                        return 0;
        }
}

static int pin_job_new(Manager *m, Peer *p, bool enable, PinJob **ret) {
        PinJob *j = calloc(1, sizeof(PinJob));

        if (!j)
                return -ENOMEM;
        *j = (PinJob){
                .m = m,
                .uid = p->uid,
                .root = access_peer_is_root(p),
                .enable = enable,
                .phase = enable ? PIN_LOAD : PIN_APPLY,
                .list = json_object_new_array(),
        };
        if (!j->list) {
                free(j);
                return -ENOMEM;
        }
        *ret = j;
        return 0;
}

int pins_method_enable(Manager *m, Peer *p, const VarlinkCall *call) {
        static const char *const keys[] = { "events", "filter", NULL };
        _cleanup_free_ char **names = NULL;
        _cleanup_strv_free_ char **resolved = NULL;
        const char *filter = NULL;
        size_t n_names;
        PinJob *j;
        int r;

        if (check_keys(p, call, keys) < 0)
                return 0;
        r = varlink_param_strv(call->parameters, "events", API_EVENTS_MAX, &names, &n_names);
        if (r < 0 || n_names == 0)
                return invalid_parameter(p, "events");
        if (varlink_param_string(call->parameters, "filter", true, &filter) < 0 ||
            (filter && strlen(filter) > TPD_FILTER_MAX))
                return invalid_parameter(p, "filter");

        r = resolve_names(m, p, names, n_names, true, &resolved);
        if (r != 0)
                return r < 0 ? r : 0;

        r = pin_job_new(m, p, true, &j);
        if (r < 0)
                return r;
        j->n = strv_length(resolved);
        j->names = TAKE_PTR(resolved);
        j->events = calloc(j->n + 1, sizeof(TracingEvent *));
        j->filter = filter ? strdup(filter) : NULL;
        if (!j->events || (filter && !j->filter)) {
                pin_job_free(j);
                return -ENOMEM;
        }
        /* What the call may enable counts against MaxEnabledEvents= while it is answered. */
        for (size_t i = 0; i < j->n; i++) {
                TracingEvent *e = tracing_event_find(m->tracing, j->names[i]);
                if (!e || (!e->enabled && !e->always_on))
                        j->reserved++;
        }
        m->n_enabling += j->reserved;
        return peer_defer(p, pin_job_work, j, pin_job_free);
}

int pins_method_disable(Manager *m, Peer *p, const VarlinkCall *call) {
        static const char *const keys[] = { "events", "all", NULL };
        _cleanup_free_ char **names = NULL;
        _cleanup_strv_free_ char **resolved = NULL;
        size_t n_names;
        bool all = false;
        PinJob *j;
        int r;

        if (check_keys(p, call, keys) < 0)
                return 0;
        r = varlink_param_strv(call->parameters, "events", API_EVENTS_MAX, &names, &n_names);
        if (r < 0)
                return invalid_parameter(p, "events");
        if (varlink_param_bool(call->parameters, "all", &all) < 0)
                return invalid_parameter(p, "all");
        if (all == (n_names > 0))
                return peer_errorf(p, VARLINK_ERROR_INVALID_PARAMETER, "parameter", "events",
                                   "Name the events to disable, or set 'all', not both.");

        r = pin_job_new(m, p, false, &j);
        if (r < 0)
                return r;
        if (all) {
                TracingEvent *const *known = tracing_events(m->tracing, &j->n);

                j->events = calloc(j->n + 1, sizeof(TracingEvent *));
                if (!j->events) {
                        pin_job_free(j);
                        return -ENOMEM;
                }
                memcpy(j->events, known, j->n * sizeof(TracingEvent *));
                return peer_defer(p, pin_job_work, j, pin_job_free);
        }

        r = resolve_names(m, p, names, n_names, false, &resolved);
        if (r != 0) {
                pin_job_free(j);
                return r < 0 ? r : 0;
        }
        j->events = calloc(strv_length(resolved) + 1, sizeof(TracingEvent *));
        if (!j->events) {
                pin_job_free(j);
                return -ENOMEM;
        }
        /* An event whose format was never loaded was never enabled: nothing to disable, and
         * nothing to load. */
        for (char **k = resolved; *k; k++) {
                TracingEvent *e = tracing_event_find(m->tracing, *k);
                if (e)
                        j->events[j->n++] = e;
        }

        /* A member removes its own pins only. Naming an event that only others pinned is refused
         * (before anything changes); a glob just passes over others' pins. Root removes every pin
         * of what it names. A member's call names at most MaxCallEvents= events. */
        if (!j->root)
                for (size_t i = 0; i < j->n; i++) {
                        TracingEvent *e = j->events[i];
                        _cleanup_free_ char *who = NULL;
                        bool named = false;

                        if (!e->pinned || tracing_event_pinned_by(e, p->uid))
                                continue;
                        for (size_t k = 0; k < n_names && !named; k++)
                                named = !names_is_glob(names[k]) && streq(names[k], e->name);
                        if (!named)
                                continue;
                        pin_job_free(j);
                        r = event_held_by_others(m, e, p->uid, &who);
                        if (r < 0)
                                return r;
                        return peer_errorf(p, VARLINK_ERROR_PERMISSION_DENIED, "event", e->name,
                                           "'%s' is pinned by others (%s): a member removes only its "
                                           "own pins.",
                                           e->name, strempty(who));
                }
        return peer_defer(p, pin_job_work, j, pin_job_free);
}
