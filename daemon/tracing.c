/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <traceevent/event-parse.h>
#include <tracefs/tracefs.h>

#include "filter.h"
#include "log.h"
#include "tracing.h"

struct Tracing {
        struct tracefs_instance *instance;
        struct tep_handle *tep;
        char *name;
        char *saved_cmdlines;
        unsigned n_cpus;
        size_t page_size;

        char **available; /* sorted "system:event" names the kernel has */
        size_t n_available;

        TracingEvent **events; /* events whose format was loaded, in order of first use */
        size_t n_events;
};

/* The events of the "ftrace" system record without being enabled and are missing from
 * available_events; print is the one an instance's trace_marker produces. */
static const char *const always_on_events[] = { "ftrace:print" };

DEFINE_TRIVIAL_CLEANUP_FUNC(struct tracefs_instance *, tracefs_instance_free);

static TracingEvent *tracing_event_free(TracingEvent *e);
DEFINE_TRIVIAL_CLEANUP_FUNC(TracingEvent *, tracing_event_free);

static int cmp_str(const void *a, const void *b) {
        return strcmp(*(char *const *) a, *(char *const *) b);
}

static int instance_write(Tracing *t, const char *file, const char *value) {
        return tracefs_instance_file_write(t->instance, file, value) < 0 ? negative_errno() : 0;
}

static int event_write(Tracing *t, const TracingEvent *e, const char *file, const char *value) {
        return tracefs_event_file_write(t->instance, e->system, e->event, file, value) < 0 ? negative_errno() : 0;
}

static int load_available(Tracing *t) {
        _cleanup_free_ char *text = NULL;
        _cleanup_strv_free_ char **list = NULL;
        size_t n = 0, cap = 0;
        char *line, *save = NULL;

        text = tracefs_instance_file_read(NULL, "available_events", NULL);
        if (!text)
                return log_error_errno(negative_errno(), "Failed to read available_events: %m");

        for (line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
                if (!tracing_event_name_is_valid(line))
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

        qsort(list, n, sizeof(char *), cmp_str);
        strv_free(t->available);
        t->available = TAKE_PTR(list);
        t->n_available = n;
        return 0;
}

static bool is_available(Tracing *t, const char *name) {
        return bsearch(&name, t->available, t->n_available, sizeof(char *), cmp_str) != NULL;
}

static int setup_tep(Tracing *t) {
        _cleanup_free_ char *header = NULL;
        int size = 0;

        t->tep = tep_alloc();
        if (!t->tep)
                return -ENOMEM;
        tep_set_long_size(t->tep, sizeof(long));
        tep_set_page_size(t->tep, (int) getpagesize());
        tep_set_file_bigendian(t->tep, __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__ ? TEP_BIG_ENDIAN : TEP_LITTLE_ENDIAN);
        tep_set_local_bigendian(t->tep, __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__ ? TEP_BIG_ENDIAN : TEP_LITTLE_ENDIAN);

        header = tracefs_instance_file_read(NULL, "events/header_page", &size);
        if (!header)
                return log_error_errno(negative_errno(), "Failed to read events/header_page: %m");
        if (tep_parse_header_page(t->tep, header, (unsigned long) size, (int) sizeof(long)) < 0)
                return log_error_errno(-EBADMSG, "Failed to parse events/header_page.");
        return 0;
}

static unsigned count_cpus(Tracing *t) {
        _cleanup_free_ char *dir = tracefs_instance_get_dir(t->instance);
        char path[PATH_MAX];
        unsigned n = 0;

        /* per_cpu/ holds a directory for every possible CPU; stop at the first gap. */
        while (dir) {
                snprintf(path, sizeof(path), "%s/per_cpu/cpu%u", dir, n);
                if (access(path, F_OK) < 0)
                        break;
                n++;
        }
        return n;
}

/* A crashed tpd leaves its instance behind. Nothing but a tpd should have it open, so a busy
 * instance means another tpd is alive and using it. */
static int reclaim_instance(const char *name) {
        _cleanup_(tracefs_instance_freep) struct tracefs_instance *old = NULL;

        if (!tracefs_instance_exists(name))
                return 0;

        old = tracefs_instance_alloc(NULL, name);
        if (!old)
                return negative_errno();
        /* Disable everything first: rmdir would work anyway, but if it fails the instance stops
         * recording for nobody. */
        (void) tracefs_instance_file_write(old, "events/enable", "0");
        if (tracefs_instance_destroy(old) < 0) {
                int r = negative_errno();
                if (r == -EBUSY)
                        return log_error_errno(r, "Tracefs instance '%s' is in use by another process; "
                                               "is another tpd running with the same instance name?", name);
                return log_error_errno(r, "Failed to remove stale tracefs instance '%s': %m", name);
        }
        log_notice("Reclaimed tracefs instance '%s' left behind by an earlier run.", name);
        return 0;
}

int tracing_new(const char *name, Tracing **ret) {
        _cleanup_(tracing_freep) Tracing *t = NULL;
        const char *dir = NULL;
        long long subbuf_kb;
        int r;

        /* Mounts tracefs at /sys/kernel/tracing when it is not mounted anywhere. */
        if (tracefs_tracing_dir_is_mounted(true, &dir) < 0 || !tracefs_tracing_dir())
                return log_error_errno(-ENODEV, "Tracefs is not mounted and could not be mounted.");

        r = reclaim_instance(name);
        if (r < 0)
                return r;

        t = calloc(1, sizeof(Tracing));
        if (!t)
                return -ENOMEM;
        t->name = strdup(name);
        if (!t->name)
                return -ENOMEM;

        t->instance = tracefs_instance_create(name);
        if (!t->instance)
                return log_error_errno(negative_errno(), "Failed to create tracefs instance '%s': %m", name);

        r = setup_tep(t);
        if (r < 0)
                return r;
        r = load_available(t);
        if (r < 0)
                return r;

        if (asprintf(&t->saved_cmdlines, "%s/saved_cmdlines", tracefs_tracing_dir()) < 0)
                return -ENOMEM;

        t->n_cpus = count_cpus(t);
        if (t->n_cpus == 0)
                return log_error_errno(-ENODEV, "Tracefs instance '%s' has no per-CPU buffers.", name);

        /* Since 6.8 the sub-buffer size is configurable; before, it is the page size. */
        t->page_size = (size_t) getpagesize();
        if (tracefs_instance_file_read_number(t->instance, "buffer_subbuf_size_kb", &subbuf_kb) == 0 &&
            subbuf_kb > 0)
                t->page_size = (size_t) subbuf_kb * 1024;

        *ret = TAKE_PTR(t);
        return 0;
}

static TracingEvent *tracing_event_free(TracingEvent *e) {
        if (!e)
                return NULL;
        free(e->name);
        free(e->system);
        free(e->event);
        free(e->filter);
        free(e);
        return NULL;
}

Tracing *tracing_free(Tracing *t) {
        if (!t)
                return NULL;

        if (t->instance) {
                for (size_t i = 0; i < t->n_events; i++) {
                        TracingEvent *e = t->events[i];
                        if (e->enabled && !e->always_on)
                                (void) event_write(t, e, "enable", "0");
                }
                if (tracefs_instance_destroy(t->instance) < 0)
                        log_warning_errno(negative_errno(), "Failed to remove tracefs instance '%s': %m", t->name);
                tracefs_instance_free(t->instance);
        }
        for (size_t i = 0; i < t->n_events; i++)
                tracing_event_free(t->events[i]);
        free(t->events);
        strv_free(t->available);
        if (t->tep)
                tep_free(t->tep);
        free(t->name);
        free(t->saved_cmdlines);
        free(t);
        return NULL;
}

const char *tracing_instance_name(Tracing *t) {
        return t->name;
}

struct tep_handle *tracing_tep(Tracing *t) {
        return t->tep;
}

const char *tracing_saved_cmdlines_path(Tracing *t) {
        return t->saved_cmdlines;
}

unsigned tracing_n_cpus(Tracing *t) {
        return t->n_cpus;
}

size_t tracing_page_size(Tracing *t) {
        return t->page_size;
}

int tracing_set_clock(Tracing *t, const char *clock) {
        _cleanup_free_ char *available = tracefs_instance_file_read(t->instance, "trace_clock", NULL);
        char *p;
        size_t n = strlen(clock);
        bool found = false;

        /* trace_clock lists "local [boot] mono …": accept only a listed name. */
        for (p = available; p && (p = strstr(p, clock)); p += n) {
                char before = p == available ? ' ' : p[-1];
                char after = p[n];
                if ((before == ' ' || before == '[') && (after == ' ' || after == ']' || after == '\n' || !after)) {
                        found = true;
                        break;
                }
        }
        if (!found)
                return -EINVAL;
        return instance_write(t, "trace_clock", clock);
}

int tracing_get_clock(Tracing *t, char **ret) {
        char *c = tracefs_get_clock(t->instance);
        if (!c)
                return negative_errno();
        *ret = c;
        return 0;
}

int tracing_set_buffer_size_kb(Tracing *t, unsigned kb) {
        return tracefs_instance_set_buffer_size(t->instance, kb, -1) < 0 ? negative_errno() : 0;
}

int tracing_get_buffer_size_kb(Tracing *t, unsigned *ret) {
        ssize_t kb = tracefs_instance_get_buffer_size(t->instance, 0);
        if (kb < 0)
                return negative_errno();
        *ret = (unsigned) kb;
        return 0;
}

int tracing_set_buffer_percent(Tracing *t, unsigned percent) {
        char buf[16];
        snprintf(buf, sizeof(buf), "%u", percent);
        return instance_write(t, "buffer_percent", buf);
}

int tracing_open_cpu(Tracing *t, unsigned cpu) {
        char file[64];
        int fd;

        snprintf(file, sizeof(file), "per_cpu/cpu%u/trace_pipe_raw", cpu);
        fd = tracefs_instance_file_open(t->instance, file, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
        return fd < 0 ? negative_errno() : fd;
}

int tracing_cpu_stats(Tracing *t, unsigned cpu, TracingCpuStats *ret) {
        static const struct {
                const char *key;
                size_t offset;
        } keys[] = {
                { "entries:", offsetof(TracingCpuStats, entries) },
                { "overrun:", offsetof(TracingCpuStats, overrun) },
                { "commit overrun:", offsetof(TracingCpuStats, commit_overrun) },
                { "dropped events:", offsetof(TracingCpuStats, dropped) },
                { "read events:", offsetof(TracingCpuStats, read) },
        };
        _cleanup_free_ char *text = NULL;
        char file[64], *line, *save = NULL;
        TracingCpuStats s = {};

        snprintf(file, sizeof(file), "per_cpu/cpu%u/stats", cpu);
        text = tracefs_instance_file_read(t->instance, file, NULL);
        if (!text)
                return negative_errno();

        for (line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save))
                for (size_t i = 0; i < ELEMENTSOF(keys); i++)
                        if (strncmp(line, keys[i].key, strlen(keys[i].key)) == 0)
                                *(uint64_t *) ((char *) &s + keys[i].offset) =
                                        strtoull(line + strlen(keys[i].key), NULL, 10);
        *ret = s;
        return 0;
}

static bool is_name_char(char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

bool tracing_event_name_is_valid(const char *name) {
        const char *colon = strchr(name, ':');
        size_t n = strlen(name);

        if (!colon || colon == name || !colon[1] || n > 255)
                return false;
        for (const char *p = name; *p; p++)
                if (p != colon && !is_name_char(*p))
                        return false;
        return true;
}

bool tracing_is_glob(const char *pattern) {
        return strpbrk(pattern, "*?[") != NULL;
}

/* Globs may use *, ? and bracket sets over name characters, and nothing that could name a path. */
static bool glob_is_valid(const char *pattern) {
        if (strlen(pattern) > 255 || !*pattern)
                return false;
        for (const char *p = pattern; *p; p++)
                if (!is_name_char(*p) && !strchr(":*?[]!-", *p))
                        return false;
        return true;
}

int tracing_list_events(Tracing *t, const char *pattern, char ***ret) {
        _cleanup_strv_free_ char **l = NULL;
        size_t n = 0;

        if (pattern && !glob_is_valid(pattern))
                return -EINVAL;

        l = calloc(t->n_available + 1, sizeof(char *));
        if (!l)
                return -ENOMEM;
        for (size_t i = 0; i < t->n_available; i++) {
                if (pattern && fnmatch(pattern, t->available[i], 0) != 0)
                        continue;
                l[n] = strdup(t->available[i]);
                if (!l[n++])
                        return -ENOMEM;
        }
        *ret = TAKE_PTR(l);
        return 0;
}

static int strv_add_unique(char ***l, size_t *n, const char *s) {
        char **nl;

        for (size_t i = 0; i < *n; i++)
                if (streq((*l)[i], s))
                        return 0;
        nl = reallocarray(*l, *n + 2, sizeof(char *));
        if (!nl)
                return -ENOMEM;
        *l = nl;
        nl[*n] = strdup(s);
        if (!nl[*n])
                return -ENOMEM;
        nl[++*n] = NULL;
        return 0;
}

int tracing_resolve(Tracing *t, char *const *patterns, size_t n, char ***ret_names, const char **ret_bad) {
        _cleanup_strv_free_ char **names = NULL;
        size_t n_names = 0;
        int r;

        /* Modules may have added events since we looked. */
        for (size_t i = 0; i < n; i++)
                if (!tracing_is_glob(patterns[i]) && tracing_event_name_is_valid(patterns[i]) &&
                    !is_available(t, patterns[i])) {
                        (void) load_available(t);
                        break;
                }

        for (size_t i = 0; i < n; i++) {
                const char *p = patterns[i];
                bool matched = false;

                if (tracing_is_glob(p)) {
                        if (!glob_is_valid(p)) {
                                *ret_bad = p;
                                return -EINVAL;
                        }
                        for (size_t j = 0; j < t->n_available; j++)
                                if (fnmatch(p, t->available[j], 0) == 0) {
                                        r = strv_add_unique(&names, &n_names, t->available[j]);
                                        if (r < 0)
                                                return r;
                                        matched = true;
                                }
                } else {
                        if (!tracing_event_name_is_valid(p)) {
                                *ret_bad = p;
                                return -EINVAL;
                        }
                        if (is_available(t, p)) {
                                r = strv_add_unique(&names, &n_names, p);
                                if (r < 0)
                                        return r;
                                matched = true;
                        }
                }
                if (!matched) {
                        *ret_bad = p;
                        return -ENOENT;
                }
        }
        if (!names) {
                names = calloc(1, sizeof(char *));
                if (!names)
                        return -ENOMEM;
        }
        *ret_names = TAKE_PTR(names);
        return 0;
}

static struct tep_event *load_format(Tracing *t, const char *system, const char *event) {
        _cleanup_free_ char *text = NULL;
        struct tep_event *e;
        int size = 0;

        e = tep_find_event_by_name(t->tep, system, event);
        if (e)
                return e;

        text = tracefs_event_file_read(NULL, system, event, "format", &size);
        if (!text)
                return NULL;
        if (tep_parse_event(t->tep, text, (unsigned long) size, system) != TEP_ERRNO__SUCCESS) {
                errno = EBADMSG;
                return NULL;
        }
        return tep_find_event_by_name(t->tep, system, event);
}

int tracing_event_get(Tracing *t, const char *name, TracingEvent **ret) {
        _cleanup_(tracing_event_freep) TracingEvent *e = NULL;
        TracingEvent **events;
        const char *colon;

        for (size_t i = 0; i < t->n_events; i++)
                if (streq(t->events[i]->name, name)) {
                        *ret = t->events[i];
                        return 0;
                }

        if (!tracing_event_name_is_valid(name))
                return -EINVAL;
        if (!is_available(t, name))
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

        e->format = load_format(t, e->system, e->event);
        if (!e->format)
                return log_warning_errno(negative_errno(), "Failed to load the format of '%s': %m", name);

        events = reallocarray(t->events, t->n_events + 1, sizeof(TracingEvent *));
        if (!events)
                return -ENOMEM;
        t->events = events;
        t->events[t->n_events++] = e;
        *ret = TAKE_PTR(e);
        return 0;
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
        r = event_write(t, e, "filter", copy ?: "0");
        if (r < 0) {
                /* The kernel drops the old filter when it rejects a new one (6.x): put it back. */
                if (ret_message)
                        *ret_message = tracefs_error_last(t->instance);
                if (event_write(t, e, "filter", e->filter ?: "0") < 0)
                        log_error_errno(negative_errno(), "Failed to restore the filter of '%s': %m", e->name);
                return r;
        }

        free(e->filter);
        e->filter = TAKE_PTR(copy);
        return 0;
}

static int event_update(Tracing *t, TracingEvent *e) {
        bool want = e->always_on || e->pinned || e->streams > 0;
        int r;

        if (want == e->enabled)
                return 0;
        r = event_write(t, e, "enable", want ? "1" : "0");
        if (r < 0)
                return log_error_errno(r, "Failed to %s '%s': %m", want ? "enable" : "disable", e->name);
        e->enabled = want;
        return 0;
}

int tracing_event_pin(Tracing *t, TracingEvent *e, bool pin) {
        bool old = e->pinned;
        int r;

        e->pinned = pin;
        r = event_update(t, e);
        if (r < 0)
                e->pinned = old;
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
