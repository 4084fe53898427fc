/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <stdarg.h>
#include <stdio.h>

#include "message.h"
#include "terminal.h"

bool log_quiet;
bool log_muted;

int log_error_errno(int r, const char *format, ...) {
        va_list ap;

        if (log_muted)
                return r;
        fprintf(stderr, "%stpctl: ", terminal_color(STDERR_FILENO, ANSI_RED));
        errno = r < 0 ? -r : r;
        va_start(ap, format);
        vfprintf(stderr, format, ap);
        va_end(ap);
        fprintf(stderr, "%s\n", terminal_color(STDERR_FILENO, ANSI_NORMAL));
        return r;
}

void log_hint(const char *format, ...) {
        va_list ap;

        if (log_muted || log_quiet)
                return;
        va_start(ap, format);
        vfprintf(stderr, format, ap);
        va_end(ap);
        fputc('\n', stderr);
}

int log_usage(const char *format, ...) {
        va_list ap;

        if (log_muted)
                return -EINVAL;
        fputs("tpctl: ", stderr);
        va_start(ap, format);
        vfprintf(stderr, format, ap);
        va_end(ap);
        fputs("\nSee 'tpctl --help'.\n", stderr);
        return -EINVAL;
}
