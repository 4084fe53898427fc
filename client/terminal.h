/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <stdbool.h>
#include <stddef.h>

/*
 * What tpctl does differently for a person at a terminal, decided as systemd's tools decide it:
 * colour and a pager only when the output is a terminal, and never against the user's environment.
 */

#define ANSI_RED "\x1B[0;1;31m"
#define ANSI_YELLOW "\x1B[0;1;33m"
#define ANSI_GREEN "\x1B[0;1;32m"
#define ANSI_NORMAL "\x1B[0m"

/* Whether text written to fd (1 or 2) may carry colour: $NO_COLOR (set, not empty) turns it off;
 * $SYSTEMD_COLORS, a boolean (or 16, 256, 24bit), decides next, also for a pipe; then $TERM=dumb
 * turns it off; else colour when fd is a terminal. */
bool terminal_colors(int fd);

/* Colour code for fd, or "" when fd gets no colour. */
const char *terminal_color(int fd, const char *ansi);

/*
 * Sends stdout through a pager, if stdout is a terminal and no_pager is false: $SYSTEMD_PAGER,
 * else $PAGER (run by /bin/sh; empty or "cat": no pager), else pager, less, more, with
 * $LESS=$SYSTEMD_LESS or "FRSXMK". Returns whether a pager was started. Call pager_close() before
 * exiting: it flushes stdout and waits for the pager, so the prompt does not come back under it.
 */
bool pager_open(bool no_pager);

/* Returns 0 if no pager ran, 1 once it ended, negative errno if output was lost for another reason
 * than the pager quitting early. stdout is closed afterwards. */
int pager_close(void);

/*
 * JSON text from a file or a peer, made safe for a terminal without changing what it means: DEL
 * and the C1 controls (U+0080 to U+009F in UTF-8, which some terminals obey as ESC sequences) can
 * only stand inside strings of valid JSON and become "\u00XX" there. C0 controls but '\n' become a
 * space: valid JSON has them only as whitespace between tokens (json-c also takes them inside
 * strings: refuse such text before, or its strings change).
 *
 * terminal_json_safe() is the length of the longest start of s that needs nothing;
 * terminal_json_escape() writes the replacement of the character at s (n > 0 bytes left) into
 * out (room for 6 bytes) and returns its length, with *ret_used the bytes of s it replaces.
 */
size_t terminal_json_safe(const char *s, size_t n);
size_t terminal_json_escape(const char *s, size_t n, char out[static 6], size_t *ret_used);
