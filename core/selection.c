/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <traceevent/event-parse.h>

#include "core/decode.h"
#include "core/filter.h"
#include "core/selection.h"
#include "util.h"

void selection_done(Selection *sel) {
        if (sel->filter)
                tep_filter_free(sel->filter);
        free(sel->events);
        free(sel->pids);
        follow_free(sel->follow);
        free(sel->cgroup);
        free(sel->cgroup_ids);
        free(sel->cpus);
        *sel = (Selection){};
}

static int bitmap_set(uint8_t **map, size_t *bits, unsigned i) {
        if (i >= *bits) {
                size_t n = ((size_t) i / 8 + 1) * 2;
                uint8_t *m = realloc(*map, n);
                if (!m)
                        return -ENOMEM;
                memset(m + *bits / 8, 0, n - *bits / 8);
                *map = m;
                *bits = n * 8;
        }
        (*map)[i / 8] |= (uint8_t) (1U << (i % 8));
        return 0;
}

int selection_select_event(Selection *sel, unsigned id) {
        return bitmap_set(&sel->events, &sel->events_bits, id);
}

int selection_select_cpu(Selection *sel, unsigned cpu) {
        return bitmap_set(&sel->cpus, &sel->cpus_bits, cpu);
}

int selection_select_pid(Selection *sel, int32_t pid) {
        int32_t *p = reallocarray(sel->pids, sel->n_pids + 1, sizeof(int32_t));
        if (!p)
                return -ENOMEM;
        sel->pids = p;
        sel->pids[sel->n_pids++] = pid;
        return 0;
}

/* A stream cannot apply the filter to e: why, naming the event. */
static int filter_refused(SelectionError *err, size_t index, const struct tep_event *e, const char *why) {
        *err = (SelectionError){ .failure = SELECTION_FILTER_STREAM, .event = index };
        if (asprintf(&err->message, "%s:%s: %s", e->system, e->name, strempty(why)) < 0) {
                err->message = NULL;
                return -ENOMEM;
        }
        return 0;
}

/* Adds e's canonical filter text. On -EINVAL *ret_why is libtraceevent's reason. */
static int filter_add(struct tep_event_filter *f, const struct tep_event *e, const char *canonical,
                      char **ret_why) {
        _cleanup_free_ char *text = NULL;
        enum tep_errno err;
        char buf[256];

        /* libtraceevent names events "system/event" in filter text. */
        if (asprintf(&text, "%s/%s:%s", e->system, e->name, canonical) < 0)
                return -ENOMEM;
        err = tep_filter_add_filter_str(f, text);
        if (err == TEP_ERRNO__SUCCESS)
                return 0;
        tep_filter_strerror(f, err, buf, sizeof(buf));
        *ret_why = strdup(buf);
        return *ret_why ? -EINVAL : -ENOMEM;
}

int selection_set_filter(Selection *sel, struct tep_handle *tep, const char *filter,
                         struct tep_event *const *events, size_t n_events, bool named,
                         SelectionError *ret_error) {
        SelectionError failed = { .failure = SELECTION_FILTER_NONE, .event = SIZE_MAX };
        struct tep_event_filter *f;
        size_t first = SIZE_MAX;
        bool refused = false;
        int r = 0;

        f = tep_filter_alloc(tep);
        if (!f)
                return -ENOMEM;
        for (size_t i = 0; i < n_events && r >= 0; i++) {
                _cleanup_free_ char *canonical = NULL, *why = NULL;

                /* libtraceevent 1.7's filter parser crashes on some malformed text and reads quotes
                 * and precedence its own way: it only ever sees tpd's canonical text. */
                r = filter_canonicalize_stream(events[i], filter, &canonical, &why);
                if (r == -EINVAL && !named) {
                        r = 0; /* it makes no sense for this event: its records do not pass */
                        continue;
                }
                if (r == -EINVAL) {
                        /* Refused by the kernel's grammar: said before what a stream cannot do. */
                        free(failed.message);
                        failed = (SelectionError){ .failure = SELECTION_FILTER_INVALID,
                                                   .event = i,
                                                   .message = TAKE_PTR(why) };
                        break;
                }
                if (r == -ENOMEM)
                        break;
                if (first == SIZE_MAX)
                        first = i;
                if (refused) {
                        r = 0; /* only the kernel grammar's refusal of a later event comes first */
                        continue;
                }
                if (r == 0)
                        r = filter_add(f, events[i], canonical, &why);
                if (r == -EINVAL || r == -EOPNOTSUPP) {
                        r = filter_refused(&failed, first, events[i], why);
                        refused = true;
                }
        }
        if (r >= 0 && (failed.failure == SELECTION_FILTER_INVALID || refused || first == SIZE_MAX))
                r = -EINVAL;
        if (r < 0) {
                tep_filter_free(f);
                if (r == -EINVAL && ret_error)
                        *ret_error = failed;
                else
                        free(failed.message);
                return r;
        }
        if (sel->filter)
                tep_filter_free(sel->filter);
        sel->filter = f;
        return 0;
}

int selection_build(Selection *sel, const SelectionSpec *spec, SelectionError *ret_error) {
        bool named = spec->n_events > 0;
        int r = 0;

        sel->print = spec->print;
        for (size_t i = 0; i < spec->n_events && r >= 0; i++)
                r = selection_select_event(sel, (unsigned) spec->events[i]->id);
        for (size_t i = 0; i < spec->n_pids && r >= 0; i++)
                r = selection_select_pid(sel, (int32_t) spec->pids[i]);
        if (r >= 0 && spec->follow_max > 0 && (spec->n_pids > 0 || spec->cgroup))
                r = follow_new(spec->follow_max, &sel->follow);
        if (r >= 0 && sel->follow && spec->cgroup) {
                sel->cgroup = strdup(spec->cgroup);
                r = sel->cgroup ? 0 : -ENOMEM;
        }
        for (size_t i = 0; sel->follow && i < sel->n_pids && r >= 0; i++)
                r = follow_add_root(sel->follow, sel->pids[i]);
        for (size_t i = 0; i < spec->n_cpus && r >= 0; i++)
                r = selection_select_cpu(sel, (unsigned) spec->cpus[i]);
        if (r < 0 || !spec->filter)
                return r;
        return selection_set_filter(sel, spec->tep, spec->filter, named ? spec->events : spec->others,
                                    named ? spec->n_events : spec->n_others, named, ret_error);
}

bool selection_matches(const Selection *sel, Decoder *d, const Record *r) {
        if (!selection_has_cpu(sel, r->cpu))
                return false;
        /* Records of an event id without a format concern the streams that would have got them:
         * those that select that id, or every event (of the record's pid). A filter is set for
         * known events only, so nothing unknown passes it. */
        if (r->kind == TPD_LOST_UNKNOWN && sel->filter)
                return false;
        /* Other losses concern every event of the CPU: whoever watches it must hear of them. */
        if (r->kind != RECORD_EVENT && r->kind != TPD_LOST_UNKNOWN)
                return true;
        if (!selection_has_event(sel, r->event_id))
                return false;
        if (sel->follow) {
                if (!follow_matches(sel->follow, r->pid, r->ts))
                        return false;
        } else if (sel->n_pids > 0) {
                bool found = false;
                for (size_t i = 0; i < sel->n_pids; i++)
                        if (sel->pids[i] == r->pid) {
                                found = true;
                                break;
                        }
                if (!found)
                        return false;
        }
        if (sel->filter && r->kind == RECORD_EVENT) {
                struct tep_record rec = {
                        .ts = r->ts,
                        .data = d ? decoder_padded_raw(d, r) : (void *) r->raw,
                        .size = (int) (d ? MIN(r->raw_size, DECODER_PADDED_MAX) : r->raw_size),
                        .record_size = (int) (d ? MIN(r->raw_size, DECODER_PADDED_MAX) : r->raw_size),
                        .cpu = (int) r->cpu,
                };
                /* FILTER_NOT_FOUND: an event the filter was not set for; it does not pass. */
                return tep_filter_match(sel->filter, &rec) == TEP_ERRNO__FILTER_MATCH;
        }
        return true;
}
