/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Streams whose records carry their task's cgroup ("with": ["cgroup"]): the history of each task's
 * cgroup (core/cgroup-history.h), seeded from the cgroup v2 hierarchy at the first such stream and
 * kept by the lineage's forks, exits and moves (daemon/lineage.h), which hands them over in time
 * order before the records they precede are routed.
 */
#include <errno.h>
#include <string.h>

#include "cgroups.h"
#include "core/cgroup.h"
#include "core/clock.h"
#include "core/encode.h"
#include "log.h"
#include "manager.h"

/* Tasks whose cgroup tpd keeps at most (about 100 bytes each): past this a record of a task not
 * known carries no "cgroup". */
#define ATTRIBUTION_TASKS_MAX 65536U
/* A task that exited is forgotten this long (trace clock) after its exit: its last records (its
 * switch out) come within microseconds. */
#define ATTRIBUTION_EXIT_GRACE_NS (1000ULL * 1000 * 1000)
/* Children read from /proc at their fork, at most, between two flushes: a storm of forks costs the
 * loop a bounded time, its children past this taking their parent's cgroup. */
#define ATTRIBUTION_FORK_READS_MAX 256U
/* Exited tasks are looked for at most this often. */
#define ATTRIBUTION_EXPIRE_USEC (1000ULL * 1000)

/* The index of path (len bytes) in the history, which keeps each path as the JSON text records
 * carry (a string, quoted and escaped): made once per path, copied into each record. "" (no JSON)
 * marks a task whose cgroup could not be read. */
static int attribution_path(CgroupHistory *h, const char *path, size_t len, uint32_t *ret) {
        _cleanup_(jsonbuf_done) JsonBuf json = {};
        int r;

        if (len == 0)
                return cgroup_history_path(h, "", 0, ret);
        r = json_append_string(&json, path, len);
        if (r < 0)
                return r;
        return cgroup_history_path(h, json.data, json.len, ret);
}

typedef struct AttributionSeed {
        CgroupHistory *h;
        uint32_t path;
        char *last; /* the raw path of path, whose threads come together */
} AttributionSeed;

static bool attribution_seed_thread(void *userdata, int tid, const char *path, size_t len) {
        AttributionSeed *s = userdata;

        if (!s->last || !streq(s->last, path)) {
                free(s->last);
                s->last = strndup(path, len);
                if (!s->last || attribution_path(s->h, path, len, &s->path) < 0)
                        return false;
        }
        return cgroup_history_set(s->h, tid, 0, s->path) >= 0;
}

int manager_attribution_start(Manager *m) {
        _cleanup_free_ char *mount = NULL;
        unsigned budget = ATTRIBUTION_TASKS_MAX;
        AttributionSeed seed = {};
        int r;

        if (m->attribution.n > 0) {
                m->attribution.n++;
                return 0;
        }
        r = cgroup_history_new(ATTRIBUTION_TASKS_MAX, &m->attribution.history);
        if (r < 0)
                return r;
        /* The moves first: one after the tasks are read is in the lineage. */
        r = manager_follow_start(m);
        if (r < 0) {
                m->attribution.history = cgroup_history_free(m->attribution.history);
                return r;
        }
        m->attribution.n = 1;
        /* Where tpd sees pids and cgroup paths as the records and /proc/PID/cgroup name them. In
         * another namespace a task is read from /proc when its first record comes. */
        m->attribution.proc_ok = pid_namespace_is_initial();
        m->attribution.paths_ok = cgroups_namespace_is_initial();
        if (!m->attribution.proc_ok || !m->attribution.paths_ok || cgroups_mount(&mount) < 0)
                return 0;
        seed.h = m->attribution.history;
        cgroups_threads(mount, "/", attribution_seed_thread, &seed, &budget);
        free(seed.last);
        log_debug("Cgroups of %zu tasks read, in %zu cgroups.", cgroup_history_tasks(seed.h),
                  cgroup_history_paths(seed.h));
        return 0;
}

void manager_attribution_stop(Manager *m) {
        if (m->attribution.n == 0 || --m->attribution.n > 0)
                return;
        m->attribution.history = cgroup_history_free(m->attribution.history);
        manager_follow_stop(m);
}

/* Sets pid in the cgroup of path (len bytes; "" for one that could not be read) from ts on. */
static void attribution_set(Manager *m, int32_t pid, uint64_t ts, const char *path, size_t len) {
        uint32_t i;

        if (attribution_path(m->attribution.history, path, len, &i) >= 0)
                (void) cgroup_history_set(m->attribution.history, pid, ts, i);
}

/* A task not known yet (it was not in the tree read at the start, or tpd reads no paths of its own
 * there): its cgroup now, from /proc. One that cannot be read is known as "" until a second after
 * now, so that its records do not each read /proc again. */
static void attribution_learn(Manager *m, int32_t pid, uint64_t ts) {
        char path[CGROUP_PATH_MAX];
        ssize_t len;

        /* No room: not a read of /proc for each record. */
        if (cgroup_history_tasks(m->attribution.history) >= ATTRIBUTION_TASKS_MAX)
                return;
        len = m->attribution.proc_ok ? cgroups_of_task(pid, path, sizeof(path)) : -ESRCH;
        attribution_set(m, pid, 0, path, len < 0 ? 0 : (size_t) len);
        if (len < 0)
                cgroup_history_exit(m->attribution.history, pid, ts);
}

const char *manager_attribution_at(Manager *m, int pid, uint64_t ts, size_t *ret_len) {
        CgroupHistory *h = m->attribution.history;
        const char *s;
        uint32_t i;
        int r;

        if (!h)
                return NULL;
        /* The idle tasks: in the root cgroup, and no /proc entry to say so. */
        if (pid == 0) {
                *ret_len = 3;
                return "\"/\"";
        }
        r = cgroup_history_at(h, pid, ts, &i);
        if (r == -ENOENT) {
                attribution_learn(m, pid, ts);
                r = cgroup_history_at(h, pid, ts, &i);
        }
        if (r < 0)
                return NULL;
        s = cgroup_history_path_of(h, i, ret_len);
        return *ret_len > 0 ? s : NULL;
}

void manager_attribution_fork(Manager *m, const LineageChange *c) {
        char path[CGROUP_PATH_MAX];
        ssize_t len = -ESRCH;
        uint32_t i;

        /* The parent's cgroup at the fork, unless the child was put in another (clone3()'s
         * CLONE_INTO_CGROUP, as service managers start services), which only /proc tells. */
        if (m->attribution.proc_ok && m->attribution.fork_reads < ATTRIBUTION_FORK_READS_MAX) {
                m->attribution.fork_reads++;
                len = cgroups_of_task(c->pid, path, sizeof(path));
        }
        if (len >= 0) {
                attribution_set(m, c->pid, c->ts, path, (size_t) len);
                return;
        }
        if (cgroup_history_at(m->attribution.history, c->parent, c->ts, &i) >= 0)
                (void) cgroup_history_set(m->attribution.history, c->pid, c->ts, i);
}

void manager_attribution_exit(Manager *m, const LineageChange *c) {
        cgroup_history_exit(m->attribution.history, c->pid, c->ts);
}

void manager_attribution_move(Manager *m, const LineageChange *c, const int32_t *tids, size_t n) {
        char path[CGROUP_PATH_MAX];
        const char *p = c->path;
        ssize_t len = (ssize_t) strlen(c->path);

        /* In another cgroup namespace the kernel's path is not the one /proc/PID/cgroup shows here. */
        if (!m->attribution.paths_ok) {
                len = cgroups_of_task(c->pid, path, sizeof(path));
                if (len < 0)
                        return;
                p = path;
        }
        for (size_t k = 0; k < n; k++)
                attribution_set(m, tids[k], c->ts, p, (size_t) len);
}

void manager_attribution_expire(Manager *m, uint64_t watermark) {
        uint64_t now = now_usec(CLOCK_MONOTONIC);

        m->attribution.fork_reads = 0;
        if (!m->attribution.history || watermark == UINT64_MAX || watermark <= ATTRIBUTION_EXIT_GRACE_NS ||
            now - m->attribution.expired_usec < ATTRIBUTION_EXPIRE_USEC)
                return;
        m->attribution.expired_usec = now;
        cgroup_history_expire(m->attribution.history, watermark - ATTRIBUTION_EXIT_GRACE_NS);
}
