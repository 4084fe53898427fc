/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "options.h"
#include "topsample.h"

/*
 * `tpctl top`: tpd's per-event and per-process counters (GetCounters), as rates, every delay. On a
 * terminal a full-screen table with keys; otherwise one block of key=value lines per refresh.
 */

typedef struct TopOptions {
        const char *socket_path;
        uint64_t iterations; /* refreshes before exiting; 0: until q, a signal or a closed stdout */
        uint64_t delay_usec;
        TopSort sort;
        TopBy by;
} TopOptions;

/* Returns tpctl's exit status. */
int top_run(const TopOptions *o);

/* -n, -d, --sort (--by is shared: options.h). */
extern const OptionTable top_option_table;

/* Returns the exit status. */
int top_verb(const CommonOptions *c, char **args, size_t n);
