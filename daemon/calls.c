/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "access.h"
#include "calls.h"
#include "core/names.h"
#include "tpd-protocol.h"

int call_reply(Peer *peer, json_object *p, int r) {
        if (r < 0) {
                json_object_put(p);
                return r;
        }
        return peer_reply(peer, p);
}

int invalid_parameter(Peer *p, const char *key) {
        return peer_errorf(p, VARLINK_ERROR_INVALID_PARAMETER, "parameter", key, "Invalid parameter '%s'.",
                           key);
}

int check_keys(Peer *p, const VarlinkCall *call, const char *const *allowed) {
        const char *bad = NULL;

        if (varlink_params_check_keys(call->parameters, allowed, &bad) < 0) {
                (void) invalid_parameter(p, bad);
                return -EINVAL;
        }
        return 0;
}

static int call_param_read(json_object *params, const CallParam *t, uint8_t *base) {
        json_object *v;
        const char **text;
        int r;

        switch (t->type) {
        case CALL_PARAM_STRINGS:
                return varlink_param_strv(params, t->name, t->max, (char ***) (base + t->field),
                                          (size_t *) (base + t->count));
        case CALL_PARAM_INTS:
        case CALL_PARAM_CPUS:
                return varlink_param_intv(params, t->name, t->max, (int64_t **) (base + t->field),
                                          (size_t *) (base + t->count));
        case CALL_PARAM_STRING:
                text = (const char **) (base + t->field);
                r = varlink_param_string(params, t->name, true, text);
                return r < 0 || (*text && strlen(*text) > t->max) ? -EINVAL : 0;
        case CALL_PARAM_BOOL:
                if (!json_object_object_get_ex(params, t->name, &v) || !v)
                        return 0; /* the default stays */
                return varlink_param_bool(params, t->name, (bool *) (base + t->field));
        case CALL_PARAM_INT: {
                int64_t x;

                if (!json_object_object_get_ex(params, t->name, &v) || !v)
                        return 0;
                if (!json_object_is_type(v, json_type_int))
                        return -EINVAL;
                errno = 0;
                x = json_object_get_int64(v);
                if (errno != 0 || x < t->min || x > t->max_value)
                        return -EINVAL;
                *(int64_t *) (base + t->field) = x;
                return 0;
        }
        }
        return -EINVAL;
}

int call_params_parse(Manager *m, Peer *p, const VarlinkCall *call, const CallParam *table, size_t n,
                      void *ret) {
        uint8_t *base = ret;
        int r;

        for (size_t i = 0; i < n; i++)
                if (call_param_read(call->parameters, &table[i], base) < 0)
                        return invalid_parameter(p, table[i].name) < 0 ? -ENOMEM : 1;

        /* The values of the lists: CPUs first, whose error says which CPUs there are, then the
         * other numbers, in the table's order. */
        for (int pass = 0; pass < 2; pass++)
                for (size_t i = 0; i < n; i++) {
                        const CallParam *t = &table[i];
                        const int64_t *v;
                        size_t count;

                        if (t->type != (pass == 0 ? CALL_PARAM_CPUS : CALL_PARAM_INTS))
                                continue;
                        v = *(int64_t **) (base + t->field);
                        count = *(size_t *) (base + t->count);
                        for (size_t k = 0; k < count; k++) {
                                if (t->type == CALL_PARAM_CPUS &&
                                    (v[k] < 0 || v[k] >= (int64_t) m->n_cpus)) {
                                        r = peer_errorf(
                                                p, VARLINK_ERROR_INVALID_PARAMETER, "parameter", t->name,
                                                "There is no CPU %lld: this machine has CPUs 0 to %u.",
                                                (long long) v[k], m->n_cpus - 1);
                                        return r < 0 ? r : 1;
                                }
                                if (t->type == CALL_PARAM_INTS && (v[k] < t->min || v[k] > t->max_value))
                                        return invalid_parameter(p, t->name) < 0 ? -ENOMEM : 1;
                        }
                }
        return 0;
}

/* Replies with the error for a failed tracing_resolve(). */
int resolve_error(Peer *p, int r, const char *bad) {
        if (r == -ENOENT)
                return peer_errorf(p, TPD_ERROR_NO_SUCH_EVENT, "event", bad,
                                   "No event '%s'. 'tpctl list' shows the kernel's events.", bad);
        if (r == -EINVAL)
                return peer_errorf(
                        p, TPD_ERROR_NO_SUCH_EVENT, "event", bad,
                        "'%s' is not an event name: use system:event, optionally with * and ? globs.", bad);
        return r;
}

int tracefs_error(Peer *p, int r, const char *what) {
        return peer_errorf(p, TPD_ERROR_TRACEFS_UNAVAILABLE, "reason", strerror(-r), "Failed to %s: %s",
                           what, strerror(-r));
}

/* Enabling these events must not take tpd past MaxEnabledEvents=: each enabled event costs the
 * kernel on every hit, and enabling it costs a tracefs write on the loop. Events that Enable calls
 * still being answered will enable count as enabled. On error the reply is queued and a positive
 * value returned. */
static int check_enabled_limit(Manager *m, Peer *p, char *const *names, size_t n) {
        unsigned now = tracing_n_enabled(m->tracing) + m->n_enabling, more = 0;
        int r;

        /* Before any format is loaded (≈ 1 ms an event): an event never loaded is not enabled. */
        for (size_t i = 0; i < n; i++) {
                TracingEvent *e = tracing_event_find(m->tracing, names[i]);
                if (!e || (!e->enabled && !e->always_on))
                        more++;
        }
        if (more == 0 || m->config.max_enabled_events == 0 || now + more <= m->config.max_enabled_events)
                return 0;
        r = peer_errorf(
                p, TPD_ERROR_LIMIT_EXCEEDED, "limit", "enabled_events",
                "tpd has %u events enabled and enables at most %u (MaxEnabledEvents=); this call would "
                "add %u.",
                now, m->config.max_enabled_events, more);
        return r < 0 ? r : 1;
}

int check_call_events(Manager *m, Peer *p, size_t n) {
        bool root = access_peer_is_root(p);
        unsigned max = access_max_call_events(&m->access, p, API_EVENTS_MAX);
        int r;

        if (n <= max)
                return 0;
        r = peer_errorf(p, TPD_ERROR_LIMIT_EXCEEDED, "limit", "call_events",
                        "The call selects %zu events; at most %u may be selected in one call%s.", n, max,
                        root ? "" : " (MaxCallEvents=)");
        return r < 0 ? r : 1;
}

int resolve_names(Manager *m, Peer *p, char *const *names, size_t n, bool enable, char ***ret) {
        _cleanup_strv_free_ char **resolved = NULL;
        const char *bad = NULL;
        size_t count = 0;
        int r;

        /* Bounded work: distinct patterns per call for everyone; broad globs and large selections
         * are root's. */
        r = tracing_resolve_limited(m->tracing, names, n, API_PATTERNS_MAX,
                                    access_max_glob_events(&m->access, p), &resolved, &bad, &count);
        if (r < 0) {
                if (r == -E2BIG)
                        r = peer_errorf(
                                p, TPD_ERROR_LIMIT_EXCEEDED, "limit", "patterns",
                                "The call names %zu distinct patterns; at most %u are allowed in one call.",
                                count, API_PATTERNS_MAX);
                else if (r == -EPERM)
                        r = peer_errorf(
                                p, TPD_ERROR_LIMIT_EXCEEDED, "limit", "glob_events",
                                "'%s' matches %zu events; only root may use a glob that matches more "
                                "than %u (MaxGlobEvents=).",
                                bad, count, m->config.max_glob_events);
                else
                        r = resolve_error(p, r, bad);
                return r < 0 ? r : 1;
        }
        r = check_call_events(m, p, strv_length(resolved));
        if (r != 0)
                return r;
        if (enable) {
                r = check_enabled_limit(m, p, resolved, strv_length(resolved));
                if (r != 0)
                        return r;
        }
        *ret = TAKE_PTR(resolved);
        return 0;
}

int resolve_events(Manager *m, Peer *p, char *const *names, size_t n, bool enable, TracingEvent ***ret,
                   size_t *ret_n) {
        _cleanup_strv_free_ char **resolved = NULL;
        _cleanup_free_ TracingEvent **events = NULL;
        size_t k;
        int r;

        r = resolve_names(m, p, names, n, enable, &resolved);
        if (r != 0)
                return r;
        k = strv_length(resolved);
        events = calloc(k + 1, sizeof(TracingEvent *));
        if (!events)
                return -ENOMEM;
        for (size_t i = 0; i < k; i++) {
                r = tracing_event_get(m->tracing, resolved[i], &events[i]);
                if (r < 0) {
                        r = peer_errorf(p, TPD_ERROR_NO_SUCH_EVENT, "event", resolved[i],
                                        "The format of '%s' could not be loaded: %s", resolved[i],
                                        strerror(-r));
                        return r < 0 ? r : 1;
                }
        }
        *ret = TAKE_PTR(events);
        *ret_n = k;
        return 0;
}

bool peer_holds(const Peer *k, const TracingEvent *e) {
        if (!k->stream)
                return false;
        /* A stream that named no event takes every enabled one: a kernel filter changes it too. */
        if (k->n_held == 0)
                return e->enabled;
        for (size_t i = 0; i < k->n_held; i++)
                if (k->held[i] == e)
                        return true;
        return false;
}

int uids_add(uid_t **l, size_t *n, uid_t uid) {
        uid_t *nl;

        for (size_t i = 0; i < *n; i++)
                if ((*l)[i] == uid)
                        return 0;
        nl = reallocarray(*l, *n + 1, sizeof(uid_t));
        if (!nl)
                return -ENOMEM;
        nl[(*n)++] = uid;
        *l = nl;
        return 0;
}

/* Whether anyone but uid holds e: a pin of another uid, or a stream of another uid that gets the
 * event. On 1, *ret_who says who: "uid 0 (pin), uid 1001 (pin, stream)". */
int event_held_by_others(Manager *m, const TracingEvent *e, uid_t uid, char **ret_who) {
        _cleanup_free_ uid_t *streams = NULL;
        _cleanup_free_ char *who = NULL;
        size_t n_streams = 0, size = 0;
        bool any = false;
        FILE *f;

        for (Peer *k = m->peers; k; k = k->next)
                if (k->uid != uid && peer_holds(k, e) && uids_add(&streams, &n_streams, k->uid) < 0)
                        return -ENOMEM;

        f = open_memstream(&who, &size);
        if (!f)
                return -ENOMEM;
        for (size_t i = 0; i < e->n_pin_uids; i++) {
                bool streaming = false;

                if (e->pin_uids[i] == uid)
                        continue;
                for (size_t j = 0; j < n_streams; j++)
                        if (streams[j] == e->pin_uids[i]) {
                                streaming = true;
                                streams[j] = uid; /* listed here, not again below */
                        }
                fprintf(f, "%suid %u (pin%s)", any ? ", " : "", (unsigned) e->pin_uids[i],
                        streaming ? ", stream" : "");
                any = true;
        }
        for (size_t i = 0; i < n_streams; i++)
                if (streams[i] != uid) {
                        fprintf(f, "%suid %u (stream)", any ? ", " : "", (unsigned) streams[i]);
                        any = true;
                }
        if (fclose(f) != 0)
                return -ENOMEM;
        if (!any)
                return 0;
        *ret_who = TAKE_PTR(who);
        return 1;
}

void json_set(int *r, json_object *o, const char *key, json_object *v) {
        if (*r < 0 || !o) {
                json_object_put(v);
                *r = *r < 0 ? *r : -ENOMEM;
                return;
        }
        *r = json_add(o, key, v);
}

void json_push(int *r, json_object *array, json_object *v) {
        if (*r >= 0 && (!array || !v))
                *r = -ENOMEM;
        if (*r >= 0 && json_object_array_add(array, v) < 0)
                *r = -ENOMEM;
        if (*r < 0)
                json_object_put(v);
}
