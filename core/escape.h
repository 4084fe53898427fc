/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <stddef.h>

/* Untrusted text (a peer's strings, filters, the state file, a capture's names) made safe for one
 * line of a log or a message: backslashes, quotes, control bytes and every byte outside printable
 * ASCII become \\, \', \" and \xNN, so that no "\n<0>" can forge a journal line and no terminal
 * escape reaches a console. Cut with "..." to fit size (at least 8). NULL prints as "(null)".
 * Returns buf. tpd's log and tpctl's messages both use it. */
const char *escape_text(const char *s, char *buf, size_t size);

/* Room for escape_text() of a filter: shown up to about 1 KiB. */
#define ESCAPE_TEXT_MAX 1024U
