/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <stddef.h>

/*
 * The stream copier: moves tpd's NDJSON from the socket to stdout without looking at it, inside the
 * kernel (splice) where stdout allows, with read()/write() where it does not. head is what arrived
 * with the reply to Stream and goes out first.
 *
 * Returns 0 when tpd closed the stream, -EPIPE when stdout's reader went away, or another negative
 * errno.
 */
int copy_stream(int sock, int out, const char *head, size_t head_len);
