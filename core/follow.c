/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/follow.h"
#include "util.h"

int follow_new(size_t max, Follow **ret) {
        Follow *f = calloc(1, sizeof(Follow));

        if (!f)
                return -ENOMEM;
        f->max = max;
        *ret = f;
        return 0;
}

Follow *follow_free(Follow *f) {
        if (f) {
                free(f->entries);
                free(f);
        }
        return NULL;
}

/* The index of pid's first entry, or where it would go. */
static size_t follow_find(const Follow *f, int32_t pid) {
        size_t lo = 0, hi = f->n;

        while (lo < hi) {
                size_t mid = lo + (hi - lo) / 2;

                if (f->entries[mid].pid < pid)
                        lo = mid + 1;
                else
                        hi = mid;
        }
        return lo;
}

/* Entries of exited tasks, oldest exit first, make room: their pids no longer write records,
 * except for the switch out that follows an exit at once. Returns whether one was dropped. */
static bool follow_drop_exited(Follow *f) {
        size_t oldest = SIZE_MAX;

        for (size_t i = 0; i < f->n; i++)
                if ((f->entries[i].exited || f->entries[i].until != FOLLOW_FOREVER) &&
                    (oldest == SIZE_MAX || f->entries[i].exit_ts < f->entries[oldest].exit_ts))
                        oldest = i;
        if (oldest == SIZE_MAX)
                return false;
        memmove(f->entries + oldest, f->entries + oldest + 1, (f->n - oldest - 1) * sizeof(FollowEntry));
        f->n--;
        return true;
}

static int follow_insert(Follow *f, int32_t pid, uint64_t since) {
        size_t i;

        if (f->n >= f->max && !follow_drop_exited(f))
                return -ENOSPC;
        if (ARRAY_RESERVE(f->entries, f->cap, f->n + 1) < 0)
                return -ENOMEM;
        /* After pid's entries: they began earlier. */
        i = follow_find(f, pid);
        while (i < f->n && f->entries[i].pid == pid)
                i++;
        memmove(f->entries + i + 1, f->entries + i, (f->n - i) * sizeof(FollowEntry));
        f->entries[i] = (FollowEntry){ .pid = pid, .since = since, .until = FOLLOW_FOREVER };
        f->n++;
        f->live++;
        return 0;
}

int follow_add_root(Follow *f, int32_t pid) {
        if (follow_matches(f, pid, 0))
                return 0;
        return follow_insert(f, pid, 0);
}

bool follow_matches(const Follow *f, int32_t pid, uint64_t ts) {
        for (size_t i = follow_find(f, pid); i < f->n && f->entries[i].pid == pid; i++)
                if (f->entries[i].since <= ts && ts < f->entries[i].until)
                        return true;
        return false;
}

/* pid's entry that has not ended, if any. */
static FollowEntry *follow_open(Follow *f, int32_t pid) {
        for (size_t i = follow_find(f, pid); i < f->n && f->entries[i].pid == pid; i++)
                if (f->entries[i].until == FOLLOW_FOREVER)
                        return f->entries + i;
        return NULL;
}

static void follow_end(Follow *f, FollowEntry *e, uint64_t ts) {
        if (!e->exited && f->live > 0)
                f->live--;
        e->until = ts;
        if (!e->exited)
                e->exit_ts = ts;
        e->exited = true;
}

void follow_fork(Follow *f, int32_t parent, int32_t child, uint64_t ts) {
        FollowEntry *old;

        if (ts < f->start)
                return;
        old = follow_open(f, child);
        /* The pid was another task's: that task's entry ends here (a fork's records come after
         * it, in the order the kernel wrote them). */
        if (old && old->since < ts)
                follow_end(f, old, ts);
        else if (old)
                return; /* the same fork seen twice */
        if (!follow_matches(f, parent, ts))
                return;
        if (follow_insert(f, child, ts) < 0)
                f->refused++;
}

int follow_join(Follow *f, int32_t pid, uint64_t ts) {
        int r;

        if (ts < f->start || follow_open(f, pid))
                return 0;
        r = follow_insert(f, pid, ts);
        if (r == -ENOSPC)
                f->refused++;
        return r;
}

void follow_leave(Follow *f, int32_t pid, uint64_t ts) {
        FollowEntry *e = ts < f->start ? NULL : follow_open(f, pid);

        if (e && e->since <= ts)
                follow_end(f, e, ts);
}

void follow_exit(Follow *f, int32_t pid, uint64_t ts) {
        FollowEntry *e = ts < f->start ? NULL : follow_open(f, pid);

        if (!e || e->exited || e->since > ts)
                return;
        e->exited = true;
        e->exit_ts = ts;
        if (f->live > 0)
                f->live--;
}
