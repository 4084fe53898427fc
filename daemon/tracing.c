/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>

#include <traceevent/event-parse.h>
#include <tracefs/tracefs.h>

#include "config.h"
#include "core/clock.h"
#include "core/filter.h"
#include "core/names.h"
#include "log.h"
#include "ratelimit.h"
#include "tracing.h"

/* Instance files whose content tpd decides, watched by tracing_check(): the value read back
 * after tpd's last write (or at creation) is the expected one, and is written back on a change. */
static const char *const watched_files[] = { "buffer_percent", "tracing_cpumask", "options/overwrite",
                                             "tracing_on" };
/* The one that stops recording: put back last, once everything else is as tpd wants it. */
#define WATCHED_TRACING_ON (ELEMENTSOF(watched_files) - 1)
/* available_events is reread for an unknown name at most this often. */
#define TRACING_RELOAD_USEC (1000 * 1000ULL)

struct Tracing {
        struct tracefs_instance *instance;
        struct tep_handle *tep;
        char *name;
        /* set_event, held open for tpd's whole life: the kernel refuses to rmdir an instance with
         * open files, so no other tpd (in any PID namespace) can reclaim it from under us, and it
         * is ours to write to as long as this is open. tracing_check() reads it. */
        int hold_fd;
        char *clock;                               /* the trace clock tpd wants */
        int clock_fd;                              /* trace_clock, for tracing_check() */
        char *watched[ELEMENTSOF(watched_files)];  /* expected content of watched_files */
        int watched_fd[ELEMENTSOF(watched_files)]; /* kept open: a check costs one pread each */
        size_t check_cursor;                       /* next event whose filter tracing_check() reads */
        TracingClearHandler clear_handler;
        void *clear_userdata;
        char *saved_cmdlines;
        unsigned n_cpus;
        size_t page_size;

        char **available; /* sorted "system:event" names the kernel has */
        size_t n_available;
        TracingEvent **by_index; /* per entry of available: its loaded event, or NULL */
        RateLimit reload_limit;  /* rereads of available_events, counted from the last one */
        unsigned n_enabled;      /* events tpd enabled (always-on ones not counted) */

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

/* Writes trace_clock, which clears the buffers: the handler hears of it before and after. */
static int clock_write(Tracing *t, const char *clock) {
        int r;

        if (t->clear_handler)
                t->clear_handler(t->clear_userdata, false);
        r = instance_write(t, "trace_clock", clock);
        if (r >= 0 && t->clear_handler)
                t->clear_handler(t->clear_userdata, true);
        return r;
}

void tracing_set_clear_handler(Tracing *t, TracingClearHandler handler, void *userdata) {
        t->clear_handler = handler;
        t->clear_userdata = userdata;
}

static int event_write(Tracing *t, const TracingEvent *e, const char *file, const char *value) {
        return tracefs_event_file_write(t->instance, e->system, e->event, file, value) < 0 ? negative_errno()
                                                                                           : 0;
}

static int load_available(Tracing *t) {
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

        qsort(list, n, sizeof(char *), cmp_str);

        /* Events already loaded keep their state; one the kernel no longer lists stays in
         * t->events (it may still be enabled) but is no longer indexed. */
        by_index = calloc(n + 1, sizeof(TracingEvent *));
        if (!by_index)
                return -ENOMEM;
        for (size_t i = 0; i < t->n_events; i++) {
                char **f = bsearch(&t->events[i]->name, list, n, sizeof(char *), cmp_str);
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
        (void) load_available(t);
        /* A failed read is not retried before the interval either. */
        ratelimit_restart(&t->reload_limit);
}

/* The index of name in the sorted list of available events, or -1. */
static ssize_t available_index(Tracing *t, const char *name) {
        char **f = bsearch(&name, t->available, t->n_available, sizeof(char *), cmp_str);
        return f ? f - t->available : -1;
}

static int setup_tep(Tracing *t) {
        _cleanup_free_ char *header = NULL;
        int size = 0;

        t->tep = tep_alloc();
        if (!t->tep)
                return -ENOMEM;
        tep_set_long_size(t->tep, sizeof(long));
        tep_set_page_size(t->tep, (int) getpagesize());
        tep_set_file_bigendian(t->tep,
                               __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__ ? TEP_BIG_ENDIAN : TEP_LITTLE_ENDIAN);
        tep_set_local_bigendian(t->tep,
                                __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__ ? TEP_BIG_ENDIAN : TEP_LITTLE_ENDIAN);

        header = tracefs_instance_file_read(NULL, "events/header_page", &size);
        if (!header)
                return log_error_errno(negative_errno(), "Failed to read events/header_page: %m");
        if (tep_parse_header_page(t->tep, header, (unsigned long) size, (int) sizeof(long)) < 0)
                return log_error_errno(-EBADMSG, "Failed to parse events/header_page.");
        return 0;
}

/* The number of per-CPU slots: one more than the highest CPU of per_cpu/. */
static unsigned count_cpus(Tracing *t) {
        _cleanup_free_ char *dir = tracefs_instance_get_dir(t->instance);
        char path[PATH_MAX];
        struct dirent *de;
        unsigned n = 0;
        DIR *d;

        /* per_cpu/ holds a directory for every possible CPU, online or not, and the possible CPUs
         * may have gaps: take the highest number, not the first gap. */
        if (!dir)
                return 0;
        snprintf(path, sizeof(path), "%s/per_cpu", dir);
        d = opendir(path);
        if (!d)
                return 0;
        while ((de = readdir(d))) {
                char *end;
                unsigned long cpu;

                if (strncmp(de->d_name, "cpu", 3) != 0 || de->d_name[3] < '0' || de->d_name[3] > '9')
                        continue;
                cpu = strtoul(de->d_name + 3, &end, 10);
                if (*end == 0 && cpu < 65536 && cpu + 1 > n)
                        n = (unsigned) cpu + 1;
        }
        closedir(d);
        return n;
}

/* Reclaim, creation and removal of instances are serialised between tpds by a lock on the
 * instances directory: tracefs has one superblock however often it is mounted, so the lock is the
 * same for a tpd in a container (another PID and mount namespace). Without it two tpds starting at
 * once could both find the name free, and the second could remove the instance the first just
 * made before the first opened a file of it. Only root can open that directory. */
static int lock_instances(void) {
        _cleanup_free_ char *dir = NULL;
        _cleanup_close_ int fd = -1;

        if (asprintf(&dir, "%s/instances", tracefs_tracing_dir()) < 0)
                return -ENOMEM;
        fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0)
                return log_error_errno(negative_errno(), "Failed to open '%s': %m", dir);
        /* Held for a few system calls at a time: wait up to 5 s, never forever. */
        for (unsigned i = 0; flock(fd, LOCK_EX | LOCK_NB) < 0; i++) {
                if (errno != EWOULDBLOCK && errno != EINTR)
                        return log_error_errno(negative_errno(), "Failed to lock '%s': %m", dir);
                if (i >= 500)
                        return log_error_errno(-ETIMEDOUT, "Timed out waiting for the lock on '%s'.", dir);
                (void) nanosleep(&(struct timespec){ .tv_nsec = 10 * 1000 * 1000 }, NULL);
        }
        return TAKE_FD(fd);
}

static int instance_path(const char *name, char **ret) {
        return asprintf(ret, "%s/instances/%s", tracefs_tracing_dir(), name) < 0 ? -ENOMEM : 0;
}

/* A crashed tpd leaves its instance behind, and the kernel disables its events when it is
 * removed. Nothing is written to it before: an instance that anyone holds open (another tpd,
 * perhaps in a container, or any tracing tool) cannot be removed (EBUSY), and is not ours to touch.
 * Called with the instances lock held. */
static int reclaim_instance(const char *path, const char *name) {
        if (rmdir(path) < 0) {
                if (errno == ENOENT)
                        return 0;
                if (errno == EBUSY)
                        return log_error_errno(-EBUSY,
                                               "Tracefs instance '%s' is in use by another process "
                                               "(it has open files); is another tpd running with the same "
                                               "instance name? Leaving it untouched.",
                                               name);
                return log_error_errno(negative_errno(), "Failed to remove stale tracefs instance '%s': %m",
                                       name);
        }
        log_notice("Reclaimed tracefs instance '%s' left behind by an earlier run.", name);
        return 0;
}

static char *strip_newline(char *s) {
        if (s)
                s[strcspn(s, "\n")] = 0;
        return s;
}

/* The selected clock of trace_clock's "local [boot] mono …". */
static char *clock_from_text(const char *text) {
        const char *p = text ? strchr(text, '[') : NULL;
        return p ? strndup(p + 1, strcspn(p + 1, "]")) : NULL;
}

/* Creates the instance and opens the file that holds it, under the instances lock. On -EBUSY and
 * -EEXIST the instance belongs to someone else and nothing of it was written. */
static int create_instance(Tracing *t) {
        _cleanup_free_ char *path = NULL;
        _cleanup_close_ int lock = -1;
        int r;

        r = instance_path(t->name, &path);
        if (r < 0)
                return r;
        lock = lock_instances();
        if (lock < 0)
                return lock;
        r = reclaim_instance(path, t->name);
        if (r < 0)
                return r;
        /* Not tracefs_instance_create(): it quietly adopts an existing instance. */
        if (mkdir(path, 0755) < 0) {
                if (errno == EEXIST)
                        return log_error_errno(-EBUSY,
                                               "Tracefs instance '%s' is in use by another process "
                                               "(it created the instance while tpd started); leaving it "
                                               "untouched.",
                                               t->name);
                return log_error_errno(negative_errno(), "Failed to create tracefs instance '%s': %m",
                                       t->name);
        }
        t->instance = tracefs_instance_alloc(NULL, t->name);
        if (!t->instance) {
                r = negative_errno();
                (void) rmdir(path);
                return log_error_errno(r, "Failed to set up tracefs instance '%s': %m", t->name);
        }
        t->hold_fd = tracefs_instance_file_open(t->instance, "set_event", O_RDONLY | O_CLOEXEC);
        if (t->hold_fd < 0) {
                r = negative_errno();
                tracefs_instance_free(TAKE_PTR(t->instance));
                (void) rmdir(path);
                return log_error_errno(r, "Failed to open tracefs instance '%s': %m", t->name);
        }
        return 0;
}

void tracing_setup_logging(void) {
        /* Parse problems of exotic event formats are not worth a warning each at start. Their
         * messages reach our log through tep_vprint() (log.c). */
        enum tep_loglevel level = log_get_max_level() >= LOG_DEBUG ? TEP_LOG_ALL : TEP_LOG_ERROR;

        tep_set_loglevel(level);
        tracefs_set_loglevel(level);
}

int tracing_new(const char *name, Tracing **ret) {
        _cleanup_(tracing_freep) Tracing *t = NULL;
        _cleanup_free_ char *clock = NULL;
        const char *dir = NULL;
        long long subbuf_kb;
        int r;

        /* Mounts tracefs at /sys/kernel/tracing when it is not mounted anywhere. libtracefs 1.6 hands
         * back a copy of the path (const, but the caller's to free). */
        r = tracefs_tracing_dir_is_mounted(true, &dir);
        free((char *) dir);
        if (r < 0 || !tracefs_tracing_dir())
                return log_error_errno(-ENODEV, "Tracefs is not mounted and could not be mounted.");

        t = calloc(1, sizeof(Tracing));
        if (!t)
                return -ENOMEM;
        t->hold_fd = t->clock_fd = -1;
        t->reload_limit = RATELIMIT_INIT(TRACING_RELOAD_USEC, 1);
        for (size_t i = 0; i < ELEMENTSOF(watched_files); i++)
                t->watched_fd[i] = -1;
        t->name = strdup(name);
        if (!t->name)
                return -ENOMEM;

        r = create_instance(t);
        if (r < 0)
                return r;

        /* What a new instance starts with is what tpd keeps, until it sets something else. */
        clock = tracefs_instance_file_read(t->instance, "trace_clock", NULL);
        t->clock = clock_from_text(clock);
        t->clock_fd = tracefs_instance_file_open(t->instance, "trace_clock", O_RDONLY | O_CLOEXEC);
        for (size_t i = 0; i < ELEMENTSOF(watched_files); i++) {
                t->watched[i] =
                        strip_newline(tracefs_instance_file_read(t->instance, watched_files[i], NULL));
                t->watched_fd[i] =
                        tracefs_instance_file_open(t->instance, watched_files[i], O_RDONLY | O_CLOEXEC);
        }

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
        free(e->pin_uids);
        free(e->format_text);
        free(e);
        return NULL;
}

static void close_instance_files(Tracing *t) {
        t->hold_fd = safe_close(t->hold_fd);
        t->clock_fd = safe_close(t->clock_fd);
        for (size_t i = 0; i < ELEMENTSOF(watched_files); i++)
                t->watched_fd[i] = safe_close(t->watched_fd[i]);
}

Tracing *tracing_free(Tracing *t) {
        if (!t)
                return NULL;

        /* t->instance is set only once tpd created the instance and holds it: an instance that
         * belongs to someone else is never written to or removed here. */
        if (t->instance) {
                _cleanup_free_ char *path = NULL;
                _cleanup_close_ int lock = -1;

                /* Still held, so still ours: disable what we enabled, in case the removal fails
                 * (someone else has a file of it open) and it stays behind. */
                for (size_t i = 0; i < t->n_events; i++) {
                        TracingEvent *e = t->events[i];
                        if (e->enabled && !e->always_on)
                                (void) event_write(t, e, "enable", "0");
                }
                /* Under the lock, so that a tpd starting now does not make the instance anew between
                 * our letting go and our rmdir, and lose it to that rmdir. */
                lock = lock_instances();
                close_instance_files(t);
                if (instance_path(t->name, &path) >= 0 && rmdir(path) < 0 && errno != ENOENT)
                        log_warning_errno(negative_errno(), "Failed to remove tracefs instance '%s': %m",
                                          t->name);
                tracefs_instance_free(t->instance);
        }
        close_instance_files(t);
        for (size_t i = 0; i < t->n_events; i++)
                tracing_event_free(t->events[i]);
        free(t->events);
        strv_free(t->available);
        free(t->by_index);
        if (t->tep)
                tep_free(t->tep);
        free(t->name);
        free(t->clock);
        for (size_t i = 0; i < ELEMENTSOF(watched_files); i++)
                free(t->watched[i]);
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
        _cleanup_free_ char *available = NULL;
        char *w, *save = NULL, *copy;
        bool found = false;
        int r;

        /* An empty name would "match" everywhere: reject it before looking at the list. */
        if (!trace_clock_name_is_valid(clock))
                return -EINVAL;

        available = tracefs_instance_file_read(t->instance, "trace_clock", NULL);
        if (!available)
                return negative_errno();

        /* trace_clock lists "local [boot] mono …": accept only a listed name. */
        for (w = strtok_r(available, " []\n", &save); w && !found; w = strtok_r(NULL, " []\n", &save))
                found = streq(w, clock);
        if (!found)
                return -EINVAL;
        r = clock_write(t, clock);
        if (r < 0)
                return r;
        copy = strdup(clock);
        if (!copy)
                return -ENOMEM;
        free(t->clock);
        t->clock = copy;
        return 0;
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

static int watched_index(const char *file) {
        for (size_t i = 0; i < ELEMENTSOF(watched_files); i++)
                if (streq(watched_files[i], file))
                        return (int) i;
        return -1;
}

/* Writes an instance file tracing_check() watches, and makes value the one it expects there. */
static int set_watched(Tracing *t, const char *file, const char *value) {
        int i = watched_index(file);
        char *copy;
        int r;

        r = instance_write(t, file, value);
        if (r < 0)
                return r;
        copy = strdup(value);
        if (!copy)
                return -ENOMEM;
        free(t->watched[i]);
        t->watched[i] = copy;
        return 0;
}

int tracing_set_buffer_percent(Tracing *t, unsigned percent) {
        char buf[16];

        snprintf(buf, sizeof(buf), "%u", percent);
        return set_watched(t, "buffer_percent", buf);
}

int tracing_set_overwrite(Tracing *t, bool overwrite) {
        return set_watched(t, "options/overwrite", overwrite ? "1" : "0");
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
        qsort(distinct, n, sizeof(char *), cmp_str);
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
        if (tep_parse_event(t->tep, text, (unsigned long) size, e->system) != TEP_ERRNO__SUCCESS) {
                errno = EBADMSG;
                return NULL;
        }
        f = tep_find_event_by_name(t->tep, e->system, e->event);
        if (f) {
                e->format_text = TAKE_PTR(text);
                e->format_size = size > 0 ? (size_t) size : 0;
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
        r = event_write(t, e, "filter", copy ?: "0");
        if (r < 0) {
                /* The kernel drops the old filter when it rejects a new one (6.x): put it back. */
                if (ret_message)
                        *ret_message = tracefs_error_last(t->instance);
                if (event_write(t, e, "filter", e->filter ?: "0") < 0)
                        log_error_errno(negative_errno(), "Failed to restore the filter of '%s': %m",
                                        e->name);
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

const char *const tracing_meta_files[] = {
        "events/header_page", "events/header_event", "printk_formats", "saved_cmdlines", "trace_clock", NULL,
};

int tracing_read_meta(Tracing *t, size_t index, char **ret, size_t *ret_size) {
        const char *name = tracing_meta_files[index];
        int size = 0;
        char *text;

        /* The instance's clock; the rest is the machine's. */
        text = tracefs_instance_file_read(streq(name, "trace_clock") ? t->instance : NULL, name, &size);
        if (!text)
                return negative_errno();
        *ret = text;
        *ret_size = size > 0 ? (size_t) size : 0;
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

/* At most this many filter files are read per check, in turns, so that a check stays cheap with
 * many events held. The enable state of all of them comes from one read of set_event. */
#define CHECK_FILTERS_MAX 32
/* Changes named in one report; more are counted. */
#define CHECK_REPORT_MAX 8

typedef struct CheckReport {
        FILE *f;
        unsigned n;
} CheckReport;

_printf_(2, 3) static void report_add(CheckReport *rep, const char *format, ...) {
        va_list ap;

        if (rep->n++ >= CHECK_REPORT_MAX)
                return;
        if (rep->n > 1)
                fputs("; ", rep->f);
        va_start(ap, format);
        vfprintf(rep->f, format, ap);
        va_end(ap);
}

/* Text another process wrote to tracefs, for a log line and a record: escaped and cut short. */
static char *escape_dup(const char *s) {
        char buf[96];

        return strdup(escape_text(s, buf, sizeof(buf)));
}

/* The whole text of an instance file kept open, read from its start with pread(2), where a read by
 * path also costs an open and a close. Falls back to the path when the file is not open. */
static char *read_instance_file(Tracing *t, int fd, const char *file) {
        _cleanup_free_ char *buf = NULL;
        size_t len = 0, cap = 0;

        if (fd < 0)
                return tracefs_instance_file_read(t->instance, file, NULL);
        /* A seq_file (set_event, trace_clock) returns at most a page per read, so a short read is
         * not the end; a read of less than half a page is, since no line of these files is that
         * long. That spares the read that returns 0, which costs set_event another walk over every
         * event of the kernel. */
        for (;;) {
                ssize_t n;

                if (cap - len < 4096) {
                        char *b;
                        if (cap >= 16 * 1024 * 1024)
                                return NULL;
                        cap = MAX(cap * 2, (size_t) 8192);
                        b = realloc(buf, cap);
                        if (!b)
                                return NULL;
                        buf = b;
                }
                n = pread(fd, buf + len, cap - len - 1, (off_t) len);
                if (n < 0)
                        return NULL;
                len += (size_t) n;
                if (n < 2048)
                        break;
        }
        buf[len] = 0;
        return TAKE_PTR(buf);
}

static void check_file(Tracing *t, size_t i, CheckReport *rep) {
        _cleanup_free_ char *now = NULL, *esc = NULL;
        int r;

        if (!t->watched[i])
                return;
        now = strip_newline(read_instance_file(t, t->watched_fd[i], watched_files[i]));
        if (!now || streq(now, t->watched[i]))
                return;
        esc = escape_dup(now);
        r = instance_write(t, watched_files[i], t->watched[i]);
        if (r < 0) {
                report_add(rep, "%s was changed to '%s'; setting it back to '%s' failed: %s",
                           watched_files[i], strempty(esc), t->watched[i], strerror(-r));
                /* Said once: the kernel's value is what tpd has now. */
                free(t->watched[i]);
                t->watched[i] = TAKE_PTR(now);
        } else
                report_add(rep, "%s was changed to '%s', set back to '%s'", watched_files[i], strempty(esc),
                           t->watched[i]);
}

static void check_clock(Tracing *t, CheckReport *rep) {
        _cleanup_free_ char *text = NULL, *now = NULL, *esc = NULL;
        int r;

        if (!t->clock)
                return;
        text = read_instance_file(t, t->clock_fd, "trace_clock");
        now = clock_from_text(text);
        if (!now || streq(now, t->clock))
                return;
        esc = escape_dup(now);
        /* Setting the clock clears the ring buffer, both ways. */
        r = clock_write(t, t->clock);
        if (r < 0) {
                report_add(rep, "trace_clock was changed to '%s'; setting it back to '%s' failed: %s",
                           strempty(esc), t->clock, strerror(-r));
                free(t->clock);
                t->clock = TAKE_PTR(now);
        } else
                report_add(rep,
                           "trace_clock was changed to '%s' (which cleared the buffer), set back to '%s'",
                           strempty(esc), t->clock);
}

static void check_filter(Tracing *t, TracingEvent *e, CheckReport *rep) {
        _cleanup_free_ char *now = NULL, *esc = NULL;
        const char *want = e->filter ?: "none";
        int r;

        now = strip_newline(tracefs_event_file_read(t->instance, e->system, e->event, "filter", NULL));
        if (!now || streq(now, want))
                return;
        esc = escape_dup(now);
        r = event_write(t, e, "filter", e->filter ?: "0");
        if (r < 0)
                report_add(rep, "the filter of %s was changed to '%s'; restoring it failed: %s", e->name,
                           strempty(esc), strerror(-r));
        else if (e->filter)
                report_add(rep, "the filter of %s was changed to '%s', restored", e->name, strempty(esc));
        else
                report_add(rep, "a filter '%s' was set on %s, cleared", strempty(esc), e->name);
}

static void check_events(Tracing *t, CheckReport *rep) {
        _cleanup_free_ char *text = NULL;
        _cleanup_free_ char **lines = NULL;
        _cleanup_free_ bool *held = NULL;
        size_t n = 0, cap = 0;
        char *line, *save = NULL;
        int r;

        /* set_event lists the instance's enabled events, one "system:event" a line. */
        text = read_instance_file(t, t->hold_fd, "set_event");
        if (!text)
                return;
        for (line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
                if (n == cap) {
                        char **l;
                        cap = MAX(cap * 2, (size_t) 16);
                        l = reallocarray(lines, cap, sizeof(char *));
                        if (!l)
                                return;
                        lines = l;
                }
                lines[n++] = line;
        }
        held = calloc(MAX(n, (size_t) 1), sizeof(bool));
        if (!held)
                return;
        if (n > 0)
                qsort(lines, n, sizeof(char *), cmp_str);

        for (size_t i = 0; i < t->n_events; i++) {
                TracingEvent *e = t->events[i];
                char **found;

                if (!e->enabled || e->always_on)
                        continue;
                found = n > 0 ? bsearch(&e->name, lines, n, sizeof(char *), cmp_str) : NULL;
                if (found) {
                        held[found - lines] = true;
                        continue;
                }
                r = event_write(t, e, "enable", "1");
                if (r < 0) {
                        /* Gone with its module, say: status shows it off, and this is said once. The
                         * next reference that comes or goes tries again. */
                        report_add(rep, "%s was disabled; enabling it again failed: %s", e->name,
                                   strerror(-r));
                        e->enabled = false;
                } else
                        report_add(rep, "%s was disabled, re-enabled", e->name);
        }

        /* Enabled behind tpd's back: records of events tpd may not know, in every stream that
         * takes all events. The instance is tpd's: turn them off. */
        for (size_t i = 0; i < n; i++) {
                _cleanup_free_ char *system = NULL;
                const char *colon;

                if (held[i])
                        continue;
                if (!names_event_is_valid(lines[i])) {
                        _cleanup_free_ char *esc = escape_dup(lines[i]);
                        report_add(rep, "'%s' was enabled; not a name tpd can disable", strempty(esc));
                        continue;
                }
                colon = strchr(lines[i], ':');
                system = strndup(lines[i], (size_t) (colon - lines[i]));
                if (!system)
                        return;
                r = tracefs_event_file_write(t->instance, system, colon + 1, "enable", "0") < 0
                            ? negative_errno()
                            : 0;
                if (r < 0)
                        report_add(rep, "%s was enabled; disabling it failed: %s", lines[i], strerror(-r));
                else
                        report_add(rep, "%s was enabled, disabled", lines[i]);
        }
}

int tracing_check(Tracing *t, char **ret_report) {
        CheckReport rep = {};
        char *buf = NULL;
        size_t size = 0, checked = 0, k;

        rep.f = open_memstream(&buf, &size);
        if (!rep.f)
                return -ENOMEM;

        /* Settings before events, and tracing_on last: what is recorded once recording resumes
         * must be what tpd asked for. */
        check_clock(t, &rep);
        for (size_t i = 0; i < ELEMENTSOF(watched_files); i++)
                if (i != WATCHED_TRACING_ON)
                        check_file(t, i, &rep);
        for (k = 0; k < t->n_events && checked < CHECK_FILTERS_MAX; k++) {
                TracingEvent *e = t->events[(t->check_cursor + k) % t->n_events];
                if (e->always_on || (!e->enabled && !e->filter))
                        continue;
                check_filter(t, e, &rep);
                checked++;
        }
        /* The next check goes on where this one stopped. */
        if (t->n_events > 0)
                t->check_cursor = (t->check_cursor + k) % t->n_events;
        check_events(t, &rep);
        check_file(t, WATCHED_TRACING_ON, &rep);

        if (rep.n > CHECK_REPORT_MAX)
                fprintf(rep.f, "; and %u more changes", rep.n - CHECK_REPORT_MAX);
        if (fclose(rep.f) != 0) {
                free(buf);
                return -ENOMEM;
        }
        if (rep.n == 0) {
                free(buf);
                return 0;
        }
        *ret_report = buf;
        return (int) MIN(rep.n, (unsigned) INT_MAX);
}
