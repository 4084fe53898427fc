/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cgroup-history.h"
#include "util.h"

/* Slots of the task table at first: it doubles while more than half are used. */
#define HISTORY_SLOTS_MIN 1024U

typedef struct HistoryStep {
        uint64_t since;
        uint32_t path;
} HistoryStep;

typedef struct HistoryTask {
        int32_t pid;
        bool used;
        uint8_t n;        /* steps, oldest first */
        uint64_t exit_ts; /* 0: alive */
        HistoryStep steps[CGROUP_HISTORY_STEPS];
} HistoryTask;

typedef struct HistoryPath {
        char *s;
        size_t len;
        uint32_t refs; /* steps naming it */
} HistoryPath;

struct CgroupHistory {
        HistoryTask *slots; /* open addressing, linear probing, by a keyed hash of the pid */
        unsigned bits;
        size_t n, max;
        uint64_t key;
        HistoryPath *paths;
        size_t n_paths, paths_cap; /* slots in use (some may be free again: s NULL) */
        size_t live_paths;
};

int cgroup_history_new(size_t max_tasks, CgroupHistory **ret) {
        CgroupHistory *h = calloc(1, sizeof(CgroupHistory));

        if (!h)
                return -ENOMEM;
        h->bits = (unsigned) __builtin_ctz(HISTORY_SLOTS_MIN);
        h->slots = calloc(HISTORY_SLOTS_MIN, sizeof(HistoryTask));
        if (!h->slots) {
                free(h);
                return -ENOMEM;
        }
        h->max = max_tasks;
        h->key = hash_key_new();
        *ret = h;
        return 0;
}

CgroupHistory *cgroup_history_free(CgroupHistory *h) {
        if (!h)
                return NULL;
        for (size_t i = 0; i < h->n_paths; i++)
                free(h->paths[i].s);
        free(h->paths);
        free(h->slots);
        free(h);
        return NULL;
}

static size_t history_slots(const CgroupHistory *h) {
        return (size_t) 1 << h->bits;
}

/* The slot of pid, or where it would go. */
static size_t history_find(const CgroupHistory *h, int32_t pid) {
        size_t mask = history_slots(h) - 1, i = hash_bucket(h->key, (uint32_t) pid, h->bits);

        while (h->slots[i].used && h->slots[i].pid != pid)
                i = (i + 1) & mask;
        return i;
}

static void path_unref(CgroupHistory *h, uint32_t path) {
        HistoryPath *p = &h->paths[path];

        if (--p->refs > 0)
                return;
        p->s = mfree(p->s);
        p->len = 0;
        h->live_paths--;
}

/* Paths no step names: the index cgroup_history_path() gave was valid until its next call. */
static void paths_sweep(CgroupHistory *h) {
        for (size_t i = 0; i < h->n_paths; i++)
                if (h->paths[i].s && h->paths[i].refs == 0) {
                        h->paths[i].s = mfree(h->paths[i].s);
                        h->live_paths--;
                }
}

int cgroup_history_path(CgroupHistory *h, const char *path, size_t len, uint32_t *ret) {
        size_t slot = SIZE_MAX;
        char *s;

        /* Few distinct cgroups, and a path is looked up at a move or a seed, not per record. */
        for (size_t i = 0; i < h->n_paths; i++) {
                const HistoryPath *p = &h->paths[i];

                if (!p->s) {
                        if (slot == SIZE_MAX)
                                slot = i;
                } else if (p->len == len && memcmp(p->s, path, len) == 0) {
                        *ret = (uint32_t) i;
                        return 0;
                }
        }
        if (slot == SIZE_MAX && h->n_paths >= CGROUP_HISTORY_PATHS_MAX) {
                paths_sweep(h);
                for (size_t i = 0; slot == SIZE_MAX && i < h->n_paths; i++)
                        if (!h->paths[i].s)
                                slot = i;
                if (slot == SIZE_MAX)
                        return -ENOSPC;
        }
        if (slot == SIZE_MAX) {
                if (ARRAY_RESERVE(h->paths, h->paths_cap, h->n_paths + 1) < 0)
                        return -ENOMEM;
                slot = h->n_paths++;
                h->paths[slot] = (HistoryPath){};
        }
        s = strndup(path, len);
        if (!s)
                return -ENOMEM;
        /* No step names it yet: kept until a sweep, for the set that follows. */
        h->paths[slot] = (HistoryPath){ .s = s, .len = len };
        h->live_paths++;
        *ret = (uint32_t) slot;
        return 0;
}

static int history_grow(CgroupHistory *h) {
        size_t old = history_slots(h);
        HistoryTask *slots = h->slots, *n = calloc(old * 2, sizeof(HistoryTask));

        if (!n)
                return -ENOMEM;
        h->slots = n;
        h->bits++;
        for (size_t i = 0; i < old; i++)
                if (slots[i].used)
                        h->slots[history_find(h, slots[i].pid)] = slots[i];
        free(slots);
        return 0;
}

int cgroup_history_set(CgroupHistory *h, int32_t pid, uint64_t ts, uint32_t path) {
        HistoryTask *t;
        size_t i;
        unsigned k;

        if (path >= h->n_paths || !h->paths[path].s)
                return -EINVAL;
        i = history_find(h, pid);
        if (!h->slots[i].used) {
                if (h->n >= h->max)
                        return -ENOSPC;
                if ((h->n + 1) * 2 > history_slots(h)) {
                        int r = history_grow(h);

                        if (r < 0)
                                return r;
                        i = history_find(h, pid);
                }
                h->slots[i] = (HistoryTask){ .pid = pid, .used = true };
                h->n++;
        }
        t = &h->slots[i];
        t->exit_ts = 0;
        /* Steps stay in time order: a change older than the newest goes before it. */
        for (k = t->n; k > 0 && t->steps[k - 1].since > ts; k--)
                ;
        if (k > 0 && t->steps[k - 1].since == ts) {
                uint32_t was = t->steps[k - 1].path;

                h->paths[path].refs++;
                path_unref(h, was);
                t->steps[k - 1].path = path;
                return 0;
        }
        if (t->n == CGROUP_HISTORY_STEPS) {
                /* The oldest goes: the records before the next one were long decided. */
                if (k == 0)
                        return 0;
                path_unref(h, t->steps[0].path);
                memmove(&t->steps[0], &t->steps[1], (t->n - 1) * sizeof(HistoryStep));
                t->n--;
                k--;
        }
        memmove(&t->steps[k + 1], &t->steps[k], (t->n - k) * sizeof(HistoryStep));
        t->steps[k] = (HistoryStep){ .since = ts, .path = path };
        t->n++;
        h->paths[path].refs++;
        return 0;
}

int cgroup_history_at(const CgroupHistory *h, int32_t pid, uint64_t ts, uint32_t *ret) {
        const HistoryTask *t = &h->slots[history_find(h, pid)];

        if (!t->used)
                return -ENOENT;
        for (unsigned k = t->n; k > 0; k--)
                if (t->steps[k - 1].since <= ts) {
                        *ret = t->steps[k - 1].path;
                        return 0;
                }
        return -ERANGE;
}

const char *cgroup_history_path_of(const CgroupHistory *h, uint32_t path, size_t *ret_len) {
        *ret_len = h->paths[path].len;
        return h->paths[path].s;
}

void cgroup_history_exit(CgroupHistory *h, int32_t pid, uint64_t ts) {
        HistoryTask *t = &h->slots[history_find(h, pid)];

        if (t->used)
                t->exit_ts = MAX(ts, 1);
}

/* Empties slot i, moving back the entries after it that probed past it (linear probing's
 * deletion without tombstones). */
static void history_remove(CgroupHistory *h, size_t i) {
        size_t mask = history_slots(h) - 1, j = i;

        for (unsigned k = 0; k < h->slots[i].n; k++)
                path_unref(h, h->slots[i].steps[k].path);
        h->slots[i].used = false;
        h->n--;
        for (;;) {
                size_t home;

                j = (j + 1) & mask;
                if (!h->slots[j].used)
                        break;
                home = hash_bucket(h->key, (uint32_t) h->slots[j].pid, h->bits);
                /* Stays when its home lies cyclically in (i, j]. */
                if (i <= j ? (i < home && home <= j) : (i < home || home <= j))
                        continue;
                h->slots[i] = h->slots[j];
                h->slots[j].used = false;
                i = j;
        }
}

void cgroup_history_expire(CgroupHistory *h, uint64_t before) {
        for (size_t i = 0; i < history_slots(h);) {
                const HistoryTask *t = &h->slots[i];

                /* A removal may move a later entry into slot i: look at it again. */
                if (t->used && t->exit_ts > 0 && t->exit_ts < before)
                        history_remove(h, i);
                else
                        i++;
        }
}

size_t cgroup_history_tasks(const CgroupHistory *h) {
        return h->n;
}

size_t cgroup_history_paths(const CgroupHistory *h) {
        return h->live_paths;
}
