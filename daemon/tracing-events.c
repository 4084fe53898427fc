/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Tracing control's events: the kernel's list of them, the names and globs clients give resolved
 * against it, the formats of the events in use, their kernel filters, and the pins and stream
 * references that decide whether each is enabled. */

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <traceevent/event-parse.h>
#include <tracefs/tracefs.h>

#include "core/filter.h"
#include "core/names.h"
#include "log.h"
#include "tracing-internal.h"
#include "tracing.h"

/* The events of the "ftrace" system record without being enabled and are missing from
 * available_events; print is the one an instance's trace_marker produces, kernel_stack the one the
 * stacktrace trigger does (its records come as "stack" on the record they follow). */
static const char *const always_on_events[] = { "ftrace:print", "ftrace:kernel_stack" };

DEFINE_TRIVIAL_CLEANUP_FUNC(TracingEvent *, tracing_event_free);

int tracing_load_available(Tracing *t) {
        _cleanup_free_ char *text = NULL;
        _cleanup_strv_free_ char **list = NULL;
        _cleanup_free_ TracingEvent **by_index = NULL;
        size_t n = 0, cap = 0;
        char *line, *save = NULL;

        text = tracefs_instance_file_read(NULL, "available_events", NULL);
        if (!text)
                return log_error_errno(negative_errno(), "Failed to read available_events: %m");

        for (line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
                if (!names_event_is_valid(line))
                        continue;
                if (n + 2 + ELEMENTSOF(always_on_events) > cap) {
                        char **l;
                        cap = MAX(cap * 2, (size_t) 1024);
                        l = reallocarray(list, cap, sizeof(char *));
                        if (!l)
                                return -ENOMEM;
                        list = l;
                }
                list[n] = strdup(line);
                if (!list[n])
                        return -ENOMEM;
                list[++n] = NULL;
        }
        for (size_t i = 0; i < ELEMENTSOF(always_on_events); i++) {
                if (n + 1 >= cap)
                        break;
                list[n] = strdup(always_on_events[i]);
                if (!list[n])
                        return -ENOMEM;
                list[++n] = NULL;
        }
        if (!list)
                return -ENOENT;

        qsort(list, n, sizeof(char *), tracing_cmp_names);

        /* Events already loaded keep their state; one the kernel no longer lists stays in
         * t->events (it may still be enabled) but is no longer indexed. */
        by_index = calloc(n + 1, sizeof(TracingEvent *));
        if (!by_index)
                return -ENOMEM;
        for (size_t i = 0; i < t->n_events; i++) {
                char **f = bsearch(&t->events[i]->name, list, n, sizeof(char *), tracing_cmp_names);
                if (f)
                        by_index[f - list] = t->events[i];
        }

        strv_free(t->available);
        free(t->by_index);
        t->available = TAKE_PTR(list);
        t->by_index = TAKE_PTR(by_index);
        t->n_available = n;
        ratelimit_restart(&t->reload_limit);
        return 0;
}

/* Modules may add events at any time, so a name tpd does not know may be new. Rereading the list
 * costs milliseconds: at most once a second, however many unknown names peers ask for. */
static void reload_available_ratelimited(Tracing *t) {
        if (!ratelimit_below(&t->reload_limit))
                return;
        (void) tracing_load_available(t);
        /* A failed read is not retried before the interval either. */
        ratelimit_restart(&t->reload_limit);
}

/* The index of name in the sorted list of available events, or -1. */
static ssize_t available_index(Tracing *t, const char *name) {
        char **f = bsearch(&name, t->available, t->n_available, sizeof(char *), tracing_cmp_names);
        return f ? f - t->available : -1;
}

TracingEvent *tracing_event_free(TracingEvent *e) {
        if (!e)
                return NULL;
        free(e->name);
        free(e->system);
        free(e->event);
        free(e->filter);
        free(e->pin_uids);
        free(e->format_text);
        free(e);
        return NULL;
}

/* Calls f for the index of each available event the glob matches. Only the range of names that
 * start with the glob's literal prefix is looked at. Returns the number of matches. */
static size_t glob_scan(Tracing *t, const Glob *g, void (*f)(size_t i, void *userdata), void *userdata) {
        char prefix[256];
        size_t lo = 0, hi = t->n_available, n = 0;

        for (size_t i = 0; i < g->prefix; i++)
                prefix[i] = g->tokens[i].c;
        prefix[g->prefix] = 0;

        if (g->prefix > 0) {
                /* Lower bound of the prefix in the sorted list. */
                while (lo < hi) {
                        size_t mid = lo + (hi - lo) / 2;
                        if (strcmp(t->available[mid], prefix) < 0)
                                lo = mid + 1;
                        else
                                hi = mid;
                }
                hi = t->n_available;
        }
        const char *system = NULL;
        size_t system_len = 0;
        bool system_match = false;

        for (size_t i = lo; i < hi; i++) {
                const char *name = t->available[i], *colon;
                bool match;

                if (g->prefix > 0 && strncmp(name, prefix, g->prefix) != 0)
                        break;
                if (g->colon == SIZE_MAX)
                        match = glob_match(g, name);
                else {
                        colon = strchr(name, ':');
                        if (!system || (size_t) (colon - name) != system_len ||
                            memcmp(name, system, system_len) != 0) {
                                system = name;
                                system_len = (size_t) (colon - name);
                                system_match = glob_match_system(g, name, colon);
                        }
                        match = system_match && glob_match_event(g, colon);
                }
                if (match) {
                        n++;
                        if (f)
                                f(i, userdata);
                }
        }
        return n;
}

static void mark_bit(size_t i, void *userdata) {
        uint64_t *bits = userdata;
        bits[i / 64] |= UINT64_C(1) << (i % 64);
}

int tracing_list_events(Tracing *t, const char *pattern, char ***ret) {
        _cleanup_free_ uint64_t *bits = NULL;
        _cleanup_strv_free_ char **l = NULL;
        Glob g;
        size_t n = 0;
        int r;

        if (pattern) {
                r = glob_compile(pattern, &g);
                if (r < 0)
                        return r;
        }
        bits = calloc(t->n_available / 64 + 1, sizeof(uint64_t));
        l = calloc(t->n_available + 1, sizeof(char *));
        if (!bits || !l)
                return -ENOMEM;
        if (pattern)
                (void) glob_scan(t, &g, mark_bit, bits);
        for (size_t i = 0; i < t->n_available; i++) {
                if (pattern && !(bits[i / 64] >> (i % 64) & 1))
                        continue;
                l[n] = strdup(t->available[i]);
                if (!l[n++])
                        return -ENOMEM;
        }
        *ret = TAKE_PTR(l);
        return 0;
}

int tracing_resolve_limited(Tracing *t, char *const *patterns, size_t n, size_t max_patterns,
                            size_t max_glob_events, char ***ret_names, const char **ret_bad,
                            size_t *ret_count) {
        _cleanup_free_ char **distinct = NULL;
        _cleanup_free_ uint64_t *bits = NULL;
        _cleanup_strv_free_ char **names = NULL;
        size_t n_distinct = 0, n_names = 0;
        bool reloaded = false;

        /* Each distinct pattern is matched once, however often a call repeats it. */
        distinct = calloc(n + 1, sizeof(char *));
        if (!distinct)
                return -ENOMEM;
        memcpy(distinct, patterns, n * sizeof(char *));
        qsort(distinct, n, sizeof(char *), tracing_cmp_names);
        for (size_t i = 0; i < n; i++)
                if (n_distinct == 0 || !streq(distinct[n_distinct - 1], distinct[i]))
                        distinct[n_distinct++] = distinct[i];
        if (max_patterns > 0 && n_distinct > max_patterns) {
                if (ret_count)
                        *ret_count = n_distinct;
                return -E2BIG;
        }

        /* Marks in a bitmap over the sorted list: duplicates cost nothing and the result comes
         * out sorted. */
        bits = calloc(t->n_available / 64 + 1, sizeof(uint64_t));
        if (!bits)
                return -ENOMEM;

        for (size_t i = 0; i < n_distinct; i++) {
                const char *p = distinct[i];

                if (names_is_glob(p)) {
                        Glob g;
                        size_t k;

                        if (glob_compile(p, &g) < 0) {
                                *ret_bad = p;
                                return -EINVAL;
                        }
                        /* One pass marks and counts; a glob over the bound fails the call, so
                         * what it marked does not matter. */
                        k = glob_scan(t, &g, mark_bit, bits);
                        if (k == 0) {
                                *ret_bad = p;
                                return -ENOENT;
                        }
                        if (max_glob_events > 0 && k > max_glob_events) {
                                *ret_bad = p;
                                if (ret_count)
                                        *ret_count = k;
                                return -EPERM;
                        }
                } else {
                        ssize_t idx;

                        if (!names_event_is_valid(p)) {
                                *ret_bad = p;
                                return -EINVAL;
                        }
                        idx = available_index(t, p);
                        if (idx < 0 && !reloaded) {
                                /* The bitmap is over the old list: start again over the new one. */
                                size_t old = t->n_available;
                                reload_available_ratelimited(t);
                                reloaded = true;
                                if (t->n_available != old || (idx = available_index(t, p)) >= 0) {
                                        uint64_t *nb = calloc(t->n_available / 64 + 1, sizeof(uint64_t));
                                        if (!nb)
                                                return -ENOMEM;
                                        free(bits);
                                        bits = nb;
                                        i = SIZE_MAX; /* the loop's i++ makes it 0 */
                                        continue;
                                }
                        }
                        if (idx < 0) {
                                *ret_bad = p;
                                return -ENOENT;
                        }
                        mark_bit((size_t) idx, bits);
                }
        }

        names = calloc(t->n_available + 1, sizeof(char *));
        if (!names)
                return -ENOMEM;
        for (size_t i = 0; i < t->n_available; i++)
                if (bits[i / 64] >> (i % 64) & 1) {
                        names[n_names] = strdup(t->available[i]);
                        if (!names[n_names++])
                                return -ENOMEM;
                }
        *ret_names = TAKE_PTR(names);
        return 0;
}

int tracing_resolve(Tracing *t, char *const *patterns, size_t n, char ***ret_names, const char **ret_bad) {
        return tracing_resolve_limited(t, patterns, n, 0, 0, ret_names, ret_bad, NULL);
}

/* Parses the event's format; its text is kept in e. */
static struct tep_event *load_format(Tracing *t, TracingEvent *e) {
        _cleanup_free_ char *text = NULL;
        struct tep_event *f;
        int size = 0;

        f = tep_find_event_by_name(t->tep, e->system, e->event);
        if (f)
                return f;

        text = tracefs_event_file_read(NULL, e->system, e->event, "format", &size);
        if (!text)
                return NULL;
        if (tracing_parse_format(t->tep, e->system, text, size > 0 ? (size_t) size : 0) < 0) {
                errno = EBADMSG;
                return NULL;
        }
        f = tep_find_event_by_name(t->tep, e->system, e->event);
        if (f) {
                e->format_text = TAKE_PTR(text);
                e->format_size = size > 0 ? (size_t) size : 0;
                if (t->format_handler)
                        t->format_handler(t->format_userdata, e->system, e->format_text, e->format_size);
        }
        return f;
}

int tracing_event_get(Tracing *t, const char *name, TracingEvent **ret) {
        _cleanup_(tracing_event_freep) TracingEvent *e = NULL;
        TracingEvent **events, *found;
        const char *colon;
        ssize_t idx;

        found = tracing_event_find(t, name);
        if (found) {
                *ret = found;
                return 0;
        }

        if (!names_event_is_valid(name))
                return -EINVAL;
        idx = available_index(t, name);
        if (idx < 0) {
                reload_available_ratelimited(t);
                idx = available_index(t, name);
        }
        if (idx < 0)
                return -ENOENT;

        colon = strchr(name, ':');
        e = calloc(1, sizeof(TracingEvent));
        if (!e)
                return -ENOMEM;
        e->name = strdup(name);
        e->system = strndup(name, (size_t) (colon - name));
        e->event = strdup(colon + 1);
        if (!e->name || !e->system || !e->event)
                return -ENOMEM;
        for (size_t i = 0; i < ELEMENTSOF(always_on_events); i++)
                if (streq(name, always_on_events[i]))
                        e->always_on = e->enabled = true;

        /* Not logged here: the caller says what failed and why it matters (a reply, a start). */
        e->format = load_format(t, e);
        if (!e->format)
                return negative_errno();

        events = reallocarray(t->events, t->n_events + 1, sizeof(TracingEvent *));
        if (!events)
                return -ENOMEM;
        t->events = events;
        t->events[t->n_events++] = e;
        t->by_index[idx] = e;
        *ret = TAKE_PTR(e);
        return 0;
}

TracingEvent *tracing_event_find(Tracing *t, const char *name) {
        ssize_t idx = available_index(t, name);

        if (idx >= 0)
                return t->by_index[idx];
        /* Not listed (any more): a module may have gone while tpd holds one of its events. */
        for (size_t i = 0; i < t->n_events; i++)
                if (streq(t->events[i]->name, name))
                        return t->events[i];
        return NULL;
}

unsigned tracing_n_enabled(Tracing *t) {
        return t->n_enabled;
}

TracingEvent *const *tracing_events(Tracing *t, size_t *ret_n) {
        *ret_n = t->n_events;
        return t->events;
}

int tracing_filter_verify(Tracing *t, TracingEvent *e, const char *filter, char **ret_message) {
        return filter_canonicalize(e->format, filter, FILTER_KERNEL, NULL, ret_message);
}

int tracing_event_set_filter(Tracing *t, TracingEvent *e, const char *filter, char **ret_message) {
        _cleanup_free_ char *copy = NULL;
        int r;

        if (filter) {
                /* Only the canonical text reaches the kernel, and is what status shows and the
                 * state file keeps. */
                r = filter_canonicalize(e->format, filter, FILTER_KERNEL, &copy, ret_message);
                if (r < 0)
                        return r;
        }

        (void) tracefs_error_clear(t->instance);
        r = tracing_event_write(t, e, "filter", copy ?: "0");
        if (r < 0) {
                /* The kernel drops the old filter when it rejects a new one (6.x): put it back. */
                if (ret_message)
                        *ret_message = tracefs_error_last(t->instance);
                if (tracing_event_write(t, e, "filter", e->filter ?: "0") < 0)
                        log_error_errno(negative_errno(), "Failed to restore the filter of '%s': %m",
                                        e->name);
                return r;
        }

        free(e->filter);
        e->filter = TAKE_PTR(copy);
        return 0;
}

static int event_update(Tracing *t, TracingEvent *e) {
        bool want = e->always_on || e->pinned || e->streams > 0 || e->internal > 0;
        int r;

        if (want == e->enabled)
                return 0;
        r = tracing_event_write(t, e, "enable", want ? "1" : "0");
        if (r < 0)
                return r; /* the caller logs or replies */
        e->enabled = want;
        if (!e->always_on) {
                if (want)
                        t->n_enabled++;
                else if (t->n_enabled > 0)
                        t->n_enabled--;
        }
        return 0;
}

int tracing_event_pin(Tracing *t, TracingEvent *e, bool pin) {
        size_t old = e->n_pin_uids;
        int r;

        if (pin)
                return tracing_event_pin_uid(t, e, 0, true);

        e->n_pin_uids = 0;
        e->pinned = false;
        r = event_update(t, e);
        if (r < 0) {
                e->n_pin_uids = old;
                e->pinned = old > 0;
        }
        return r;
}

bool tracing_event_pinned_by(const TracingEvent *e, uid_t uid) {
        for (size_t i = 0; i < e->n_pin_uids; i++)
                if (e->pin_uids[i] == uid)
                        return true;
        return false;
}

int tracing_event_pin_uid(Tracing *t, TracingEvent *e, uid_t uid, bool pin) {
        size_t i = 0;
        int r;

        while (i < e->n_pin_uids && e->pin_uids[i] < uid)
                i++;
        if (pin == (i < e->n_pin_uids && e->pin_uids[i] == uid))
                return event_update(t, e); /* nothing changes: make sure the kernel agrees */

        if (pin) {
                uid_t *l = reallocarray(e->pin_uids, e->n_pin_uids + 1, sizeof(uid_t));
                if (!l)
                        return -ENOMEM;
                e->pin_uids = l;
                memmove(l + i + 1, l + i, (e->n_pin_uids - i) * sizeof(uid_t));
                l[i] = uid;
                e->n_pin_uids++;
        } else {
                memmove(e->pin_uids + i, e->pin_uids + i + 1, (e->n_pin_uids - i - 1) * sizeof(uid_t));
                e->n_pin_uids--;
        }
        e->pinned = e->n_pin_uids > 0;

        r = event_update(t, e);
        if (r < 0) {
                /* Undo, so that the pins say what the kernel does. */
                if (pin) {
                        memmove(e->pin_uids + i, e->pin_uids + i + 1,
                                (e->n_pin_uids - i - 1) * sizeof(uid_t));
                        e->n_pin_uids--;
                } else {
                        memmove(e->pin_uids + i + 1, e->pin_uids + i, (e->n_pin_uids - i) * sizeof(uid_t));
                        e->pin_uids[i] = uid;
                        e->n_pin_uids++;
                }
                e->pinned = e->n_pin_uids > 0;
        }
        return r;
}

int tracing_event_ref(Tracing *t, TracingEvent *e) {
        int r;

        e->streams++;
        r = event_update(t, e);
        if (r < 0)
                e->streams--;
        return r;
}

int tracing_event_unref(Tracing *t, TracingEvent *e) {
        if (e->streams > 0)
                e->streams--;
        return event_update(t, e);
}

int tracing_event_hold(Tracing *t, TracingEvent *e, bool hold) {
        int r;

        if (!hold) {
                if (e->internal > 0)
                        e->internal--;
                return event_update(t, e);
        }
        e->internal++;
        r = event_update(t, e);
        if (r < 0)
                e->internal--;
        return r;
}

int tracing_event_stack(Tracing *t, TracingEvent *e, bool stack) {
        bool want;
        int r;

        if (stack)
                e->stacks++;
        else if (e->stacks > 0)
                e->stacks--;
        want = e->stacks > 0;
        if (want == e->stacked)
                return 0;
        r = tracing_event_write(t, e, "trigger", want ? "stacktrace" : "!stacktrace");
        if (r < 0) {
                if (stack)
                        e->stacks--;
                return r;
        }
        e->stacked = want;
        return 0;
}

int tracing_event_print_fmt(Tracing *t, TracingEvent *e, char **ret) {
        _cleanup_free_ char *text = NULL;
        const char *p;
        char *s;

        text = tracefs_event_file_read(NULL, e->system, e->event, "format", NULL);
        if (!text)
                return negative_errno();
        p = strstr(text, "\nprint fmt: ");
        if (!p)
                return -EBADMSG;
        p += strlen("\nprint fmt: ");
        s = strndup(p, strcspn(p, "\n"));
        if (!s)
                return -ENOMEM;
        *ret = s;
        return 0;
}

int tracing_event_format(Tracing *t, TracingEvent *e, char **ret_path, char **ret, size_t *ret_size) {
        _cleanup_free_ char *path = NULL;
        int size = 0;
        char *text;

        if (asprintf(&path, "events/%s/%s/format", e->system, e->event) < 0)
                return -ENOMEM;
        if (e->format_text) {
                text = malloc(e->format_size + 1);
                if (!text)
                        return -ENOMEM;
                memcpy(text, e->format_text, e->format_size + 1);
                size = (int) e->format_size;
        } else
                text = tracefs_event_file_read(NULL, e->system, e->event, "format", &size);
        if (!text)
                return negative_errno();
        *ret_path = TAKE_PTR(path);
        *ret = text;
        *ret_size = size > 0 ? (size_t) size : 0;
        return 0;
}
