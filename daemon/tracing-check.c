/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* tracing_check(): the instance compared with what tpd set, and put back where another process
 * changed it. */
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <tracefs/tracefs.h>

#include "core/escape.h"
#include "core/names.h"
#include "tracing-internal.h"
#include "tracing.h"

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

char *tracing_read_instance_file(Tracing *t, int fd, const char *file) {
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
        now = tracing_strip_newline(
                tracing_read_instance_file(t, t->watched_fd[i], tracing_watched_files[i]));
        if (!now || streq(now, t->watched[i]))
                return;
        esc = escape_dup(now);
        r = tracing_file_write(t, tracing_watched_files[i], t->watched[i]);
        if (r < 0) {
                report_add(rep, "%s was changed to '%s'; setting it back to '%s' failed: %s",
                           tracing_watched_files[i], strempty(esc), t->watched[i], strerror(-r));
                /* Said once: the kernel's value is what tpd has now. */
                free(t->watched[i]);
                t->watched[i] = TAKE_PTR(now);
        } else
                report_add(rep, "%s was changed to '%s', set back to '%s'", tracing_watched_files[i],
                           strempty(esc), t->watched[i]);
}

static void check_clock(Tracing *t, CheckReport *rep) {
        _cleanup_free_ char *text = NULL, *now = NULL, *esc = NULL;
        int r;

        if (!t->clock)
                return;
        text = tracing_read_instance_file(t, t->clock_fd, "trace_clock");
        now = tracing_clock_from_text(text);
        if (!now || streq(now, t->clock))
                return;
        esc = escape_dup(now);
        /* Setting the clock clears the ring buffer, both ways. */
        r = tracing_clock_write(t, t->clock);
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

        now = tracing_strip_newline(
                tracefs_event_file_read(t->instance, e->system, e->event, "filter", NULL));
        if (!now || streq(now, want))
                return;
        esc = escape_dup(now);
        r = tracing_event_write(t, e, "filter", e->filter ?: "0");
        if (r < 0)
                report_add(rep, "the filter of %s was changed to '%s'; restoring it failed: %s", e->name,
                           strempty(esc), strerror(-r));
        else if (e->filter)
                report_add(rep, "the filter of %s was changed to '%s', restored", e->name, strempty(esc));
        else
                report_add(rep, "a filter '%s' was set on %s, cleared", strempty(esc), e->name);
}

/* The stacktrace trigger of an event whose stacks streams want: removed behind tpd's back, set
 * again (the trigger file lists "stacktrace:unlimited" while it is set). */
static void check_trigger(Tracing *t, TracingEvent *e, CheckReport *rep) {
        _cleanup_free_ char *now =
                tracefs_event_file_read(t->instance, e->system, e->event, "trigger", NULL);
        int r;

        if (!now || strncmp(now, "stacktrace", 10) == 0 || strstr(now, "\nstacktrace"))
                return;
        r = tracing_event_write(t, e, "trigger", "stacktrace");
        if (r < 0)
                report_add(rep, "the stacktrace trigger of %s was removed; setting it again failed: %s",
                           e->name, strerror(-r));
        else
                report_add(rep, "the stacktrace trigger of %s was removed, set again", e->name);
}

static void check_events(Tracing *t, CheckReport *rep) {
        _cleanup_free_ char *text = NULL;
        _cleanup_free_ char **lines = NULL;
        _cleanup_free_ bool *held = NULL;
        size_t n = 0, cap = 0;
        char *line, *save = NULL;
        int r;

        /* set_event lists the instance's enabled events, one "system:event" a line. */
        text = tracing_read_instance_file(t, t->hold_fd, "set_event");
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
                qsort(lines, n, sizeof(char *), tracing_cmp_names);

        for (size_t i = 0; i < t->n_events; i++) {
                TracingEvent *e = t->events[i];
                char **found;

                if (!e->enabled || e->always_on)
                        continue;
                found = n > 0 ? bsearch(&e->name, lines, n, sizeof(char *), tracing_cmp_names) : NULL;
                if (found) {
                        held[found - lines] = true;
                        continue;
                }
                r = tracing_event_write(t, e, "enable", "1");
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
        for (size_t i = 0; i < TRACING_N_WATCHED; i++)
                if (i != WATCHED_TRACING_ON)
                        check_file(t, i, &rep);
        for (k = 0; k < t->n_events && checked < CHECK_FILTERS_MAX; k++) {
                TracingEvent *e = t->events[(t->check_cursor + k) % t->n_events];
                if (e->always_on || (!e->enabled && !e->filter))
                        continue;
                check_filter(t, e, &rep);
                if (e->stacked)
                        check_trigger(t, e, &rep);
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
