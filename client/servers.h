/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <stddef.h>

/*
 * The NATS servers of tpctl export. Their URLs may carry a user and password or a token
 * (nats://USER:PASSWORD@HOST:PORT), so they can come from a file instead of the command line, where
 * every user could read them in /proc/PID/cmdline, and every message shows them redacted.
 */

/* The largest servers file read. */
#define SERVERS_FILE_MAX (64U * 1024U)

/* Reads the URLs of a servers file: separated by commas, blanks or newlines; lines whose first
 * non-blank character is '#' are comments. Returns them joined by commas in *ret, or a negative
 * errno after printing why. */
int servers_read_file(const char *path, char **ret);

/* Copies text to buf (of size bytes, always terminated) with the user information of every URL in
 * it, "USER:PASSWORD@" or "TOKEN@", shown as "…@": for messages. */
void servers_redact(const char *text, char *buf, size_t size);

/* The same for one URL of a server list, which may lack its scheme (libnats reads
 * "USER:PASSWORD@HOST:PORT" as a nats:// URL). */
void servers_redact_url(const char *url, char *buf, size_t size);
