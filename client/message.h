/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <stdbool.h>

#include "core/escape.h"
#include "util.h"

/*
 * tpctl's messages: "tpctl: MESSAGE" on stderr. Unlike tpd's log there are no priorities: a
 * command-line tool talks to a person or a script, not to the journal.
 */

#define EXIT_USAGE 2

/* -q: no hints under errors, no informational messages. */
extern bool log_quiet;

/* While set, nothing is printed at all (lookups made only to improve a message). */
extern bool log_muted;

/* Prints the message, with %m naming -r; returns r so callers can `return log_error_errno(…);`. */
int log_error_errno(int r, const char *format, ...) _printf_(2, 3);
#define log_error(...) log_error_errno(0, __VA_ARGS__)
#define log_oom() log_error_errno(-ENOMEM, "out of memory")

/* What to do about the error just printed: one line on stderr, without the "tpctl: " prefix. Not
 * with -q. */
void log_hint(const char *format, ...) _printf_(1, 2);

/* A usage error: the message and a pointer to --help. Returns -EINVAL. */
int log_usage(const char *format, ...) _printf_(1, 2);
/* For commands: usage errors print a hint and end with status 2. */
#define usage_error(...) (log_usage(__VA_ARGS__), EXIT_USAGE)
