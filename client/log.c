/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <stdarg.h>
#include <stdio.h>

#include "log.h"

int log_error_errno(int r, const char *format, ...) {
        va_list ap;

        fputs("tpctl: ", stderr);
        errno = r < 0 ? -r : r;
        va_start(ap, format);
        vfprintf(stderr, format, ap);
        va_end(ap);
        fputc('\n', stderr);
        return r;
}

int log_usage(const char *format, ...) {
        va_list ap;

        fputs("tpctl: ", stderr);
        va_start(ap, format);
        vfprintf(stderr, format, ap);
        va_end(ap);
        fputs("\nSee 'tpctl --help'.\n", stderr);
        return -EINVAL;
}
