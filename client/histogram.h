/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include <json-c/json.h>

/*
 * An Aggregate snapshot as text, as bpftrace prints its maps: of a hist or a latency, per group a
 * header "@[KEY]:", a line per bucket with a bar scaled to the group's largest and a line of
 * quantiles; of a count, a table of keys by count. What tpd missed ends it on a line of its own.
 * Pure: nothing but the snapshot and the layout goes in, so that it can be tested on fixed text.
 */

/* How the buckets were asked for, which the snapshot does not repeat: log2 unless linear. */
typedef struct HistogramLayout {
        bool linear;
        int64_t min, max, step;
} HistogramLayout;

/* Writes snapshot (an Aggregate reply's parameters) to f. A reply of another shape prints what it
 * has: a member missing or of the wrong type is skipped, never a crash. */
void histogram_render(FILE *f, json_object *snapshot, const HistogramLayout *layout);
