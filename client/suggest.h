/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <stddef.h>

#include <json-c/json.h>

#define SUGGEST_MAX 3

/*
 * The names of events (the "events" of a ListEvents reply) nearest to name, best first, for "did you
 * mean": by edit distance to the whole name, or to the part after ':' when name has no system. Only
 * names close enough to be a likely typo (distance at most a third of name's length, at least 2).
 * Returns how many were stored in ret (pointers into events).
 */
size_t suggest_events(json_object *events, const char *name, const char *ret[SUGGEST_MAX]);

/* Edit distance (Levenshtein: insertions, deletions, substitutions) of a and b; strings longer
 * than 255 bytes count as far from everything. */
size_t suggest_distance(const char *a, const char *b);
