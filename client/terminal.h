/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <stdbool.h>

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
