/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <syslog.h>

#include "util.h"

/*
 * Logs go to stderr, each line prefixed with "<N>" (the syslog priority) which journald turns into
 * the record's priority. Nothing is logged on the per-record path.
 */

void log_set_max_level(int level);
int log_get_max_level(void);

/* Logs at the given priority; when error is non-zero, "%m" expands to its strerror. Returns error
 * (as a negative errno) so that callers can write `return log_error_errno(r, "...: %m");`. */
int log_internal(int level, int error, const char *format, ...) _printf_(3, 4);

/* Untrusted text (client strings, filters, the state file) made safe for one log line: backslashes,
 * quotes, control bytes and every byte outside printable ASCII become \\, \', \" and \xNN, so that
 * no "\n<0>" can forge a journal line and no terminal escape reaches a console. Cut with "..." to fit
 * size (at least 8). NULL prints as "(null)". Returns buf. */
const char *log_escape(const char *s, char *buf, size_t size);

/* Room for log_escape() of a filter: shown up to about 1 KiB. */
#define LOG_ESCAPE_MAX 1024U

#define log_full_errno(level, error, ...) log_internal((level), (error), __VA_ARGS__)
#define log_debug(...) log_internal(LOG_DEBUG, 0, __VA_ARGS__)
#define log_info(...) log_internal(LOG_INFO, 0, __VA_ARGS__)
#define log_notice(...) log_internal(LOG_NOTICE, 0, __VA_ARGS__)
#define log_warning(...) log_internal(LOG_WARNING, 0, __VA_ARGS__)
#define log_error(...) log_internal(LOG_ERR, 0, __VA_ARGS__)
#define log_debug_errno(e, ...) log_internal(LOG_DEBUG, (e), __VA_ARGS__)
#define log_info_errno(e, ...) log_internal(LOG_INFO, (e), __VA_ARGS__)
#define log_warning_errno(e, ...) log_internal(LOG_WARNING, (e), __VA_ARGS__)
#define log_error_errno(e, ...) log_internal(LOG_ERR, (e), __VA_ARGS__)
