/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <stdlib.h>
#include <string.h>

#include "core/counters.h"
#include "util.h"

int counters_new(Counters **ret) {
        Counters *c = calloc(1, sizeof(Counters));

        if (!c)
                return -ENOMEM;
        *ret = c;
        return 0;
}

Counters *counters_free(Counters *c) {
        if (!c)
                return NULL;
        free(c->index);
        free(c->events);
        free(c);
        return NULL;
}

/* The event's entry, made on its first record; NULL beyond the bound (or without memory). */
static CounterEvent *counters_event(Counters *c, uint16_t id) {
        CounterEvent *e;

        if (_likely_(id < c->n_index && c->index[id] != 0))
                return &c->events[c->index[id] - 1];
        if (c->n_events >= COUNTERS_EVENTS_MAX)
                return NULL;
        if (id >= c->n_index) {
                /* Event ids are 16 bits: the index never exceeds 128 KiB. */
                size_t n = MIN(MAX((size_t) id + 1, c->n_index * 2), (size_t) UINT16_MAX + 1);
                uint16_t *index = reallocarray(c->index, n, sizeof(uint16_t));

                if (!index)
                        return NULL;
                memset(index + c->n_index, 0, (n - c->n_index) * sizeof(uint16_t));
                c->index = index;
                c->n_index = n;
        }
        if (c->n_events == c->cap) {
                size_t n = MIN(MAX(c->cap * 2, (size_t) 8), (size_t) COUNTERS_EVENTS_MAX);
                CounterEvent *events = reallocarray(c->events, n, sizeof(CounterEvent));

                if (!events)
                        return NULL;
                c->events = events;
                c->cap = n;
        }
        e = &c->events[c->n_events++];
        *e = (CounterEvent){ .id = id };
        c->index[id] = (uint16_t) c->n_events;
        return e;
}

/* The process's slot, or NULL when it has none; with insert, a free or idle slot is taken. */
static CounterPid *counters_pid(CounterEvent *e, int32_t pid, bool insert) {
        CounterPid *p;

        if (_likely_(e->n_pids > 0 && e->pids[e->last].pid == pid))
                return &e->pids[e->last];
        for (uint16_t i = 0; i < e->n_pids; i++)
                if (e->pids[i].pid == pid) {
                        e->last = i;
                        return &e->pids[i];
                }
        if (!insert)
                return NULL;
        if (e->n_pids < COUNTERS_PIDS)
                p = &e->pids[e->n_pids++];
        else {
                p = NULL;
                for (uint16_t i = 0; i < e->n_pids; i++)
                        if (e->pids[i].idle) {
                                p = &e->pids[i];
                                break;
                        }
                if (!p)
                        return NULL;
                /* The idle process's counts stay in the event's sum, under "other". */
                e->other_records += p->records;
                e->other_lost += p->lost;
        }
        *p = (CounterPid){ .pid = pid };
        e->last = (uint16_t) (p - e->pids);
        return p;
}

void counters_add(Counters *c, uint16_t id, int32_t pid, uint64_t n) {
        CounterEvent *e = counters_event(c, id);
        CounterPid *p;

        if (!e) {
                c->other_records += n;
                return;
        }
        e->records += n;
        p = counters_pid(e, pid, true);
        if (p)
                p->records += n;
        else
                e->other_records += n;
}

void counters_add_lost(Counters *c, uint16_t id, int32_t pid, uint64_t n) {
        CounterEvent *e = counters_event(c, id);
        CounterPid *p;

        if (!e) {
                c->other_lost += n;
                return;
        }
        e->lost += n;
        p = counters_pid(e, pid, false);
        if (p)
                p->lost += n;
        else
                e->other_lost += n;
}

void counters_age(Counters *c) {
        for (size_t i = 0; i < c->n_events; i++) {
                CounterEvent *e = &c->events[i];

                for (uint16_t j = 0; j < e->n_pids; j++) {
                        e->pids[j].idle = e->pids[j].records == e->pids[j].aged;
                        e->pids[j].aged = e->pids[j].records;
                }
        }
}
