/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Tracing control's instance: created (or reclaimed from a crashed tpd) and removed, held against
 * other tpds, its clock and buffer settings, and its per-CPU files. */
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>

#include <traceevent/event-parse.h>
#include <tracefs/tracefs.h>

#include "core/clock.h"
#include "log.h"
#include "tracing-internal.h"
#include "tracing.h"

const char *const tracing_watched_files[TRACING_N_WATCHED] = { "buffer_percent", "tracing_cpumask",
                                                               "options/overwrite", "tracing_on" };

DEFINE_TRIVIAL_CLEANUP_FUNC(struct tracefs_instance *, tracefs_instance_free);

int tracing_cmp_names(const void *a, const void *b) {
        return strcmp(*(char *const *) a, *(char *const *) b);
}

int tracing_file_write(Tracing *t, const char *file, const char *value) {
        return tracefs_instance_file_write(t->instance, file, value) < 0 ? negative_errno() : 0;
}

int tracing_clock_write(Tracing *t, const char *clock) {
        int r;

        if (t->clear_handler)
                t->clear_handler(t->clear_userdata, false);
        r = tracing_file_write(t, "trace_clock", clock);
        if (r >= 0 && t->clear_handler)
                t->clear_handler(t->clear_userdata, true);
        return r;
}

void tracing_set_clear_handler(Tracing *t, TracingClearHandler handler, void *userdata) {
        t->clear_handler = handler;
        t->clear_userdata = userdata;
}

int tracing_event_write(Tracing *t, const TracingEvent *e, const char *file, const char *value) {
        return tracefs_event_file_write(t->instance, e->system, e->event, file, value) < 0 ? negative_errno()
                                                                                           : 0;
}

/* libtraceevent's format parser keeps state in static variables shared by every tep handle (the
 * tokenizer's input in older releases, the flags of the field being parsed still): formats are parsed one
 * at a time in the whole process, decode workers included. */
static pthread_mutex_t parse_lock = PTHREAD_MUTEX_INITIALIZER;

static struct tep_handle *tep_new_local(const char *header, size_t size) {
        struct tep_handle *tep = tep_alloc();
        int r;

        if (!tep)
                return NULL;
        tep_set_long_size(tep, sizeof(long));
        tep_set_page_size(tep, (int) getpagesize());
        tep_set_file_bigendian(tep,
                               __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__ ? TEP_BIG_ENDIAN : TEP_LITTLE_ENDIAN);
        tep_set_local_bigendian(tep,
                                __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__ ? TEP_BIG_ENDIAN : TEP_LITTLE_ENDIAN);
        pthread_mutex_lock(&parse_lock);
        r = tep_parse_header_page(tep, (char *) header, (unsigned long) size, (int) sizeof(long));
        pthread_mutex_unlock(&parse_lock);
        if (r < 0) {
                tep_free(tep);
                errno = EBADMSG;
                return NULL;
        }
        return tep;
}

int tracing_parse_format(struct tep_handle *tep, const char *system, const char *text, size_t size) {
        enum tep_errno e;

        pthread_mutex_lock(&parse_lock);
        e = tep_parse_event(tep, text, (unsigned long) size, system);
        pthread_mutex_unlock(&parse_lock);
        return e == TEP_ERRNO__SUCCESS ? 0 : -EBADMSG;
}

static int setup_tep(Tracing *t) {
        int size = 0;

        t->header_page = tracefs_instance_file_read(NULL, "events/header_page", &size);
        if (!t->header_page)
                return log_error_errno(negative_errno(), "Failed to read events/header_page: %m");
        t->header_page_size = size > 0 ? (size_t) size : 0;
        t->tep = tep_new_local(t->header_page, t->header_page_size);
        if (!t->tep)
                return log_error_errno(negative_errno(), "Failed to parse events/header_page: %m");
        return 0;
}

int tracing_tep_copy(Tracing *t, struct tep_handle **ret) {
        struct tep_handle *tep = tep_new_local(t->header_page, t->header_page_size);

        if (!tep)
                return negative_errno();
        for (size_t i = 0; i < t->n_events; i++) {
                const TracingEvent *e = t->events[i];

                if (e->format_text &&
                    tracing_parse_format(tep, e->system, e->format_text, e->format_size) < 0) {
                        tep_free(tep);
                        return -EBADMSG;
                }
        }
        *ret = tep;
        return 0;
}

void tracing_set_format_handler(Tracing *t, TracingFormatHandler handler, void *userdata) {
        t->format_handler = handler;
        t->format_userdata = userdata;
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

char *tracing_strip_newline(char *s) {
        if (s)
                s[strcspn(s, "\n")] = 0;
        return s;
}

char *tracing_clock_from_text(const char *text) {
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
        for (size_t i = 0; i < TRACING_N_WATCHED; i++)
                t->watched_fd[i] = -1;
        t->name = strdup(name);
        if (!t->name)
                return -ENOMEM;

        r = create_instance(t);
        if (r < 0)
                return r;

        /* What a new instance starts with is what tpd keeps, until it sets something else. */
        clock = tracefs_instance_file_read(t->instance, "trace_clock", NULL);
        t->clock = tracing_clock_from_text(clock);
        t->clock_fd = tracefs_instance_file_open(t->instance, "trace_clock", O_RDONLY | O_CLOEXEC);
        for (size_t i = 0; i < TRACING_N_WATCHED; i++) {
                t->watched[i] = tracing_strip_newline(
                        tracefs_instance_file_read(t->instance, tracing_watched_files[i], NULL));
                t->watched_fd[i] = tracefs_instance_file_open(t->instance, tracing_watched_files[i],
                                                              O_RDONLY | O_CLOEXEC);
        }

        r = setup_tep(t);
        if (r < 0)
                return r;
        r = tracing_load_available(t);
        if (r < 0)
                return r;

        if (asprintf(&t->saved_cmdlines, "%s/saved_cmdlines", tracefs_tracing_dir()) < 0)
                return -ENOMEM;

        t->n_cpus = count_cpus(t);
        if (t->n_cpus == 0)
                return log_error_errno(-ENODEV, "Tracefs instance '%s' has no per-CPU buffers.", name);
        t->stats_fd = malloc(t->n_cpus * sizeof(int));
        if (!t->stats_fd)
                return -ENOMEM;
        for (unsigned cpu = 0; cpu < t->n_cpus; cpu++)
                t->stats_fd[cpu] = -1;

        /* Since 6.8 the sub-buffer size is configurable; before, it is the page size. */
        t->page_size = (size_t) getpagesize();
        if (tracefs_instance_file_read_number(t->instance, "buffer_subbuf_size_kb", &subbuf_kb) == 0 &&
            subbuf_kb > 0)
                t->page_size = (size_t) subbuf_kb * 1024;

        *ret = TAKE_PTR(t);
        return 0;
}

static void close_instance_files(Tracing *t) {
        for (unsigned cpu = 0; t->stats_fd && cpu < t->n_cpus; cpu++)
                t->stats_fd[cpu] = safe_close(t->stats_fd[cpu]);
        t->hold_fd = safe_close(t->hold_fd);
        t->clock_fd = safe_close(t->clock_fd);
        for (size_t i = 0; i < TRACING_N_WATCHED; i++)
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
                                (void) tracing_event_write(t, e, "enable", "0");
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
        free(t->header_page);
        free(t->name);
        free(t->clock);
        for (size_t i = 0; i < TRACING_N_WATCHED; i++)
                free(t->watched[i]);
        free(t->saved_cmdlines);
        free(t->stats_fd);
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
        r = tracing_clock_write(t, clock);
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
        /* The clock tpd set and tracing_check() keeps: no read of trace_clock, which the check
         * and every record tpd dates itself would otherwise cost. */
        char *c = t->clock ? strdup(t->clock) : tracefs_get_clock(t->instance);
        if (!c)
                return t->clock ? -ENOMEM : negative_errno();
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
        for (size_t i = 0; i < TRACING_N_WATCHED; i++)
                if (streq(tracing_watched_files[i], file))
                        return (int) i;
        return -1;
}

/* Writes an instance file tracing_check() watches, and makes what the kernel kept of value (read
 * back: it may store another) the one it expects there. */
static int set_watched(Tracing *t, const char *file, const char *value) {
        int i = watched_index(file);
        char *kept;
        int r;

        r = tracing_file_write(t, file, value);
        if (r < 0)
                return r;
        kept = tracing_strip_newline(tracing_read_instance_file(t, t->watched_fd[i], file));
        if (!kept)
                kept = strdup(value);
        if (!kept)
                return -ENOMEM;
        free(t->watched[i]);
        t->watched[i] = kept;
        return 0;
}

int tracing_set_buffer_percent(Tracing *t, unsigned percent) {
        char buf[16];
        int r;

        snprintf(buf, sizeof(buf), "%u", percent);
        r = set_watched(t, "buffer_percent", buf);
        if (r < 0)
                return r;
        /* Kernels before 6.2 keep 1 for 0. */
        return streq(t->watched[watched_index("buffer_percent")], buf) ? 0 : -ERANGE;
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
        char text[512], *line, *save = NULL;
        TracingCpuStats s = {};
        ssize_t n;

        if (cpu >= t->n_cpus)
                return -EINVAL;
        /* Read on every flush, for every CPU: one pread(2) of a file kept open, where a read by
         * path costs an open, two reads and a close. */
        if (t->stats_fd[cpu] < 0) {
                char file[64];
                int fd;

                snprintf(file, sizeof(file), "per_cpu/cpu%u/stats", cpu);
                fd = tracefs_instance_file_open(t->instance, file, O_RDONLY | O_CLOEXEC);
                if (fd < 0)
                        return negative_errno();
                t->stats_fd[cpu] = fd;
        }
        /* The kernel writes the whole text in one read: seven short lines. */
        n = pread(t->stats_fd[cpu], text, sizeof(text) - 1, 0);
        if (n < 0)
                return negative_errno();
        text[n] = 0;

        for (line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save))
                for (size_t i = 0; i < ELEMENTSOF(keys); i++)
                        if (strncmp(line, keys[i].key, strlen(keys[i].key)) == 0)
                                *(uint64_t *) ((char *) &s + keys[i].offset) =
                                        strtoull(line + strlen(keys[i].key), NULL, 10);
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
