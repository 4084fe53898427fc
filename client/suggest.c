/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * "Did you mean" for event names. ~2,300 names of ~30 bytes cost a few million steps of the
 * distance, a millisecond: cheap next to the ListEvents call that brings them.
 */

#include <string.h>

#include "suggest.h"
#include "util.h"

#define SUGGEST_NAME_MAX 255

size_t suggest_distance(const char *a, const char *b) {
        size_t la = strlen(a), lb = strlen(b);
        size_t row[SUGGEST_NAME_MAX + 1];

        if (la > SUGGEST_NAME_MAX || lb > SUGGEST_NAME_MAX)
                return SIZE_MAX;
        for (size_t j = 0; j <= lb; j++)
                row[j] = j;
        for (size_t i = 1; i <= la; i++) {
                size_t diagonal = row[0];

                row[0] = i;
                for (size_t j = 1; j <= lb; j++) {
                        size_t above = row[j];

                        row[j] = MIN(MIN(row[j] + 1, row[j - 1] + 1), diagonal + (a[i - 1] != b[j - 1]));
                        diagonal = above;
                }
        }
        return row[lb];
}

size_t suggest_events(json_object *events, const char *name, const char *ret[SUGGEST_MAX]) {
        size_t best[SUGGEST_MAX], n = 0, limit = MAX(strlen(name) / 3, (size_t) 2);
        bool bare = !strchr(name, ':');

        if (!json_object_is_type(events, json_type_array))
                return 0;
        for (size_t i = 0; i < json_object_array_length(events); i++) {
                const char *e = json_object_get_string(
                        json_object_object_get(json_object_array_get_idx(events, i), "name"));
                const char *colon;
                size_t d, k;

                if (!e)
                        continue;
                d = suggest_distance(name, e);
                /* "sched_switch" for "sched:sched_switch": the system was left out. */
                if (bare && (colon = strchr(e, ':')))
                        d = MIN(d, suggest_distance(name, colon + 1));
                if (d > limit || (n == SUGGEST_MAX && d >= best[n - 1]))
                        continue;

                /* Insert in order of distance; equal distances keep the list's (sorted) order. */
                k = n < SUGGEST_MAX ? n++ : n - 1;
                for (; k > 0 && best[k - 1] > d; k--) {
                        best[k] = best[k - 1];
                        ret[k] = ret[k - 1];
                }
                best[k] = d;
                ret[k] = e;
        }
        return n;
}
