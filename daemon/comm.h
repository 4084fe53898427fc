/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <stdint.h>

/*
 * Command names of pids for the "comm" of records: /proc for running tasks when tpd runs in the
 * initial PID namespace, and the kernel's saved_cmdlines, which knows tasks that have exited and
 * is the only source from another namespace. Entries expire when the generation advances (every
 * flush interval while streams run), since a pid's name changes at exec and prctl, and pids are
 * reused.
 */

typedef struct CommCache CommCache;

int comm_cache_new(const char *saved_cmdlines_path, CommCache **ret);
CommCache *comm_cache_free(CommCache *c);
/* Forgets everything older than now: called periodically. */
void comm_cache_next_generation(CommCache *c);
/* The name of pid, or NULL when neither source knows it. */
const char *comm_cache_lookup(CommCache *c, int pid);
