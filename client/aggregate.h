/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <stddef.h>

#include "options.h"

/*
 * `tpctl hist`, `count` and `latency`: one Aggregate call with "more", tpd's snapshots shown as
 * they come (histogram.c draws them) until the final one, SIGINT or SIGTERM, which end with the
 * last one received and status 0, as bpftrace ends.
 */

/* --field, --linear, --key, --interval. */
extern const OptionTable aggregate_option_table;

/* The shared options they take. */
#define AGGREGATE_OPTIONS                                                                            \
        (OPTION_PID | OPTION_CPU | OPTION_FILTER | OPTION_DURATION | OPTION_FOLLOW | OPTION_CGROUP | \
         OPTION_BY)

/* Each returns the exit status. */
int hist_verb(const CommonOptions *c, char **args, size_t n);
int count_verb(const CommonOptions *c, char **args, size_t n);
int latency_verb(const CommonOptions *c, char **args, size_t n);
