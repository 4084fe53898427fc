/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <traceevent/event-parse.h>
#include <traceevent/event-utils.h>

#include "log.h"

static int log_max_level = LOG_INFO;

void log_set_max_level(int level) {
        log_max_level = level;
}

int log_get_max_level(void) {
        return log_max_level;
}

static void log_emit(int level, int error, const char *prefix, const char *format, va_list ap) {
        char buf[2048];
        int saved = errno;

        /* "%m" must mean the error we were handed, not whatever errno the caller left behind. */
        errno = error < 0 ? -error : error;
        vsnprintf(buf, sizeof(buf), format, ap);
        errno = saved;

        /* One write per line so that concurrent writers to the journal stream never interleave. */
        fprintf(stderr, "<%d>%s%s\n", level, strempty(prefix), buf);
}

int log_internal(int level, int error, const char *format, ...) {
        if (level <= log_max_level) {
                va_list ap;

                va_start(ap, format);
                log_emit(level, error, NULL, format, ap);
                va_end(ap);
        }
        return error > 0 ? -error : error;
}

/* libtracefs and libtraceevent both print through this weak symbol; overriding it sends their
 * messages to our log with a matching priority instead of bare lines on stderr. */
int tep_vprint(const char *name, enum tep_loglevel level, bool print_err, const char *fmt, va_list ap) {
        static const int map[] = {
                [TEP_LOG_CRITICAL] = LOG_CRIT, [TEP_LOG_ERROR] = LOG_ERR,   [TEP_LOG_WARNING] = LOG_WARNING,
                [TEP_LOG_INFO] = LOG_INFO,     [TEP_LOG_DEBUG] = LOG_DEBUG, [TEP_LOG_ALL] = LOG_DEBUG,
        };
        int prio = level < (int) ELEMENTSOF(map) && level > 0 ? map[level] : LOG_DEBUG;
        char prefix[64];
        char fmtbuf[1024];
        size_t n;

        if (prio > log_max_level)
                return 0;

        /* The libraries end their messages with a newline; ours adds one. */
        snprintf(fmtbuf, sizeof(fmtbuf), "%s", fmt);
        n = strlen(fmtbuf);
        while (n > 0 && fmtbuf[n - 1] == '\n')
                fmtbuf[--n] = 0;

        snprintf(prefix, sizeof(prefix), "%s: ", name ?: "tracing");
        log_emit(prio, print_err ? errno : 0, prefix, fmtbuf, ap);
        return 0;
}
