/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Streams that follow pids or select a cgroup's tasks, and those whose records carry their task's
 * cgroup (attributing.c): tpd's own hold of
 * sched:sched_process_fork, sched:sched_process_exit and cgroup:cgroup_attach_task, the reads of
 * every CPU that make a watermark, and the routing of the pages it allows (daemon/lineage.h says
 * why).
 */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <traceevent/event-parse.h>

#include "cgroups.h"
#include "core/cgroup.h"
#include "core/clock.h"
#include "log.h"
#include "manager.h"
#include "peer.h"

/* Pages one read of a CPU takes at most: more than its buffer holds unless its writers outpace
 * the read, which must end all the same. */
#define FOLLOW_READ_PAGES_MAX 16384U
/* Pages a batch's or the flush timer's read of a CPU takes at most: 1 MiB of 4 KiB pages, the
 * records the streams get from one CPU at once. */
#define FOLLOW_READ_PAGES_BATCH 256U
/* Past this many bytes waiting, pages are routed without waiting for the watermark: a CPU whose
 * writers outpace every read must not make tpd's memory grow. Its followers may then miss the
 * first records of a child. */
#define FOLLOW_QUEUED_MAX (64U * 1024U * 1024U)
/* Generations of descendants that exist at a stream's start taken from /proc: a chain of forks
 * deeper than this is not walked (the set's bound holds anyway). */
#define FOLLOW_SEED_DEPTH 64U
/* Tasks whose children are read at a stream's start, at most: three reads of /proc each, within
 * the loop's bound however many pids the call names (pid 1 names the whole system). */
#define FOLLOW_SEED_TASKS_MAX 2048U
/* Threads of a cgroup's subtree taken at a stream's start, at most: one read of cgroup.threads per
 * cgroup, each line a thread (a cgroup may hold more than the set's bound anyway). */
#define FOLLOW_CGROUP_SEED_MAX 16384U
/* Threads of a moved process that move with it, at most: a process with more keeps the others
 * where they were for its streams of cgroups. */
#define FOLLOW_MOVE_THREADS_MAX 1024U

static int follow_field(struct tep_event *format, const char *name, bool common, size_t *ret) {
        struct tep_format_field *f =
                common ? tep_find_common_field(format, name) : tep_find_field(format, name);

        if (!f || f->size != 4 || f->offset < 0)
                return -EPROTO;
        *ret = (size_t) f->offset;
        return 0;
}

/* The events go off unless another wants them; their ids stay, for the records still to be read. */
static void follow_release(Manager *m) {
        if (!m->follow.held)
                return;
        (void) tracing_event_hold(m->tracing, m->follow.fork, false);
        (void) tracing_event_hold(m->tracing, m->follow.exit, false);
        if (m->follow.attach)
                (void) tracing_event_hold(m->tracing, m->follow.attach, false);
        m->follow.held = false;
}

/* Moves between cgroups, for streams of a cgroup's tasks: where its fields are, and the hold. A
 * kernel without the event has streams of pids only. */
static int follow_setup_moves(Manager *m) {
        Lineage *l = &m->lineage;
        struct tep_format_field *path, *id;
        TracingEvent *attach;
        int r;

        l->attach_id = UINT_MAX;
        m->follow.attach = NULL;
        if (tracing_event_get(m->tracing, "cgroup:cgroup_attach_task", &attach) < 0)
                return 0;
        path = tep_find_field(attach->format, "dst_path");
        id = tep_find_field(attach->format, "dst_id");
        if (!path || !(path->flags & TEP_FIELD_IS_DYNAMIC) || path->size != 4 || path->offset < 0 || !id ||
            id->size != 8 || id->offset < 0 ||
            follow_field(attach->format, "dst_root", false, &l->attach_root_offset) < 0 ||
            follow_field(attach->format, "pid", false, &l->attach_pid_offset) < 0)
                return 0;
        r = tracing_event_hold(m->tracing, attach, true);
        if (r < 0)
                return r;
        l->attach_path_offset = (size_t) path->offset;
        l->attach_cgroup_offset = (size_t) id->offset;
        l->attach_id = (unsigned) attach->format->id;
        m->follow.attach = attach;
        return 0;
}

static void follow_flush(Manager *m, bool whole, size_t max_pages);

/* After a batch: what is whole goes on, the page that crosses the watermark waits for the next. */
static int follow_on_defer(sd_event_source *s, void *userdata) {
        follow_flush(userdata, false, FOLLOW_READ_PAGES_BATCH);
        return 0;
}

static int follow_setup(Manager *m) {
        Lineage *l = &m->lineage;
        _cleanup_free_ char *clock = NULL;
        TracingEvent *fork, *exit;
        int r;

        r = tracing_event_get(m->tracing, "sched:sched_process_fork", &fork);
        if (r < 0)
                return r;
        r = tracing_event_get(m->tracing, "sched:sched_process_exit", &exit);
        if (r < 0)
                return r;
        if (follow_field(fork->format, "parent_pid", false, &l->parent_offset) < 0 ||
            follow_field(fork->format, "child_pid", false, &l->child_offset) < 0 ||
            follow_field(exit->format, "common_pid", true, &l->pid_offset) < 0)
                return -EPROTO;
        r = lineage_init(l, m->n_cpus);
        if (r < 0)
                return r;
        if (!m->follow.read_upto) {
                m->follow.read_upto = calloc(m->n_cpus, sizeof(uint64_t));
                if (!m->follow.read_upto)
                        return -ENOMEM;
        }
        memset(m->follow.read_upto, 0, m->n_cpus * sizeof(uint64_t));
        if (!m->follow.defer) {
                r = sd_event_add_defer(m->event, &m->follow.defer, follow_on_defer, m);
                if (r < 0)
                        return r;
                (void) sd_event_source_set_enabled(m->follow.defer, SD_EVENT_OFF);
        }
        r = tracing_event_hold(m->tracing, fork, true);
        if (r < 0)
                return r;
        r = tracing_event_hold(m->tracing, exit, true);
        if (r >= 0) {
                r = follow_setup_moves(m);
                if (r < 0)
                        (void) tracing_event_hold(m->tracing, exit, false);
        }
        if (r < 0) {
                (void) tracing_event_hold(m->tracing, fork, false);
                return r;
        }
        m->follow.fork = fork;
        m->follow.exit = exit;
        m->follow.held = true;
        l->fork_id = (unsigned) fork->format->id;
        l->exit_id = (unsigned) exit->format->id;
        m->follow.have_clock =
                tracing_get_clock(m->tracing, &clock) >= 0 && trace_clock_id(clock, &m->follow.clock) >= 0;
        return 0;
}

int manager_follow_start(Manager *m) {
        int r;

        if (m->follow.n == 0) {
                r = follow_setup(m);
                if (r < 0)
                        return r;
        }
        m->follow.n++;
        return 0;
}

/* The queues' memory, once nothing waits and nobody follows. */
static void follow_trim(Manager *m) {
        if (m->follow.n == 0 && m->lineage.queued == 0 && !m->follow.busy)
                lineage_trim(&m->lineage);
}

/* The tasks of pid and its descendants as /proc shows them now, down to depth generations: they
 * were forked before the stream's start, when no fork was read for it. */
static void follow_seed_pid(Follow *f, int pid, unsigned depth, unsigned *budget) {
        char path[64];
        struct dirent *de;
        DIR *tasks;

        if (*budget == 0)
                return;
        (void) snprintf(path, sizeof(path), "/proc/%d/task", pid);
        tasks = opendir(path);
        if (!tasks)
                return;
        while ((de = readdir(tasks))) {
                FILE *children;
                int tid, child;

                if (*budget == 0)
                        break;
                if (sscanf(de->d_name, "%d", &tid) != 1 || follow_add_root(f, tid) < 0 || depth == 0)
                        continue;
                (*budget)--;
                (void) snprintf(path, sizeof(path), "/proc/%d/task/%d/children", pid, tid);
                children = fopen(path, "re");
                if (!children)
                        continue;
                while (fscanf(children, "%d", &child) == 1)
                        follow_seed_pid(f, child, depth - 1, budget);
                fclose(children);
        }
        closedir(tasks);
}

static bool follow_seed_thread(void *userdata, int tid, const char *path, size_t len) {
        return follow_add_root(userdata, tid) >= 0;
}

void manager_follow_seed(Manager *m, Selection *sel) {
        Follow *f = sel->follow;
        size_t n = f->n;
        unsigned budget = FOLLOW_SEED_TASKS_MAX;

        /* Before /proc or the cgroup is read: a child forked or a task moved after this is the
         * records'. */
        f->start = m->follow.have_clock ? now_nsec(m->follow.clock) : 0;
        if (sel->cgroup) {
                if (!m->follow.cgroup_mount && cgroups_mount(&m->follow.cgroup_mount) < 0)
                        return;
                (void) cgroups_subtree_ids(m->follow.cgroup_mount, sel->cgroup, &sel->cgroup_ids,
                                           &sel->n_cgroup_ids);
                /* In another PID namespace cgroup.threads lists its pids, not the records'. */
                if (!pid_namespace_is_initial())
                        return;
                /* Threads, not tasks whose children are read: a cgroup may hold many more. */
                budget = FOLLOW_CGROUP_SEED_MAX;
                cgroups_threads(m->follow.cgroup_mount, sel->cgroup, follow_seed_thread, f, &budget);
                return;
        }
        /* In another PID namespace /proc's pids are not the records'. */
        if (!pid_namespace_is_initial())
                return;
        for (size_t i = 0; i < n; i++)
                follow_seed_pid(f, f->entries[i].pid, FOLLOW_SEED_DEPTH, &budget);
}

void manager_follow_stop(Manager *m) {
        if (m->follow.n == 0 || --m->follow.n > 0)
                return;
        /* The last one: the events go off now, and what the kernel wrote of them before is read
         * and stripped on the loop's next turn (manager_follow_flush()), not here, inside a call or
         * a peer's end. */
        follow_release(m);
        m->follow.draining = true;
        (void) sd_event_source_set_enabled(m->follow.defer, SD_EVENT_ONESHOT);
}

void manager_follow_done(Manager *m) {
        sd_event_source_disable_unref(m->follow.defer);
        free(m->follow.cgroup_mount);
        free(m->follow.read_upto);
        lineage_done(&m->lineage);
}

void manager_follow_pages(Manager *m, unsigned cpu, const void *pages, size_t n_pages, size_t page_size) {
        if (lineage_enqueue(&m->lineage, cpu, pages, n_pages, page_size) < 0) {
                log_debug("CPU %u: no memory to hold pages for the forks of other CPUs; routed now.", cpu);
                manager_take_pages(m, cpu, pages, n_pages, page_size);
                return;
        }
        /* Not from here: this runs inside a reader's read, and every reader is read again. */
        if (!m->follow.reading && m->follow.defer)
                (void) sd_event_source_set_enabled(m->follow.defer, SD_EVENT_ONESHOT);
}

static bool follow_known_cgroup(const Selection *sel, uint64_t id) {
        return cgroup_ids_contain(sel->cgroup_ids, sel->n_cgroup_ids, id);
}

/* Whether a move goes into the stream's subtree: by path where tpd sees paths as the kernel
 * writes them, else by the cgroup's id, the subtree's ids read again for one made since. */
static bool follow_move_into(Manager *m, Selection *sel, const LineageChange *c, bool path_ok) {
        if (path_ok)
                return cgroup_in_subtree(c->path, strlen(c->path), sel->cgroup);
        if (follow_known_cgroup(sel, c->id))
                return true;
        if (m->follow.cgroup_mount)
                (void) cgroups_subtree_ids(m->follow.cgroup_mount, sel->cgroup, &sel->cgroup_ids,
                                           &sel->n_cgroup_ids);
        return follow_known_cgroup(sel, c->id);
}

static bool follow_any_cgroup(Manager *m) {
        for (Peer *p = m->peers; p; p = p->next)
                if (p->stream && p->stream->selection.follow && p->stream->selection.cgroup)
                        return true;
        return false;
}

/* A task moved (with its threads, as the kernel moves a process written to cgroup.procs) into
 * path or out of the subtree: for each stream of a cgroup, and the tasks' cgroups of records. */
static void follow_move(Manager *m, const LineageChange *c) {
        bool path_ok = cgroups_namespace_is_initial(), streams = follow_any_cgroup(m);
        int32_t tids[FOLLOW_MOVE_THREADS_MAX];
        size_t n = 0;
        char dir[64];
        struct dirent *de;
        DIR *tasks;

        if (!c->path || (!streams && !m->attribution.history))
                return;
        /* Its threads now: those it had at the move, unless some were born or gone since. */
        tids[n++] = c->pid;
        (void) snprintf(dir, sizeof(dir), "/proc/%d/task", (int) c->pid);
        tasks = pid_namespace_is_initial() ? opendir(dir) : NULL;
        while (tasks && n < FOLLOW_MOVE_THREADS_MAX && (de = readdir(tasks))) {
                int tid;

                if (sscanf(de->d_name, "%d", &tid) == 1 && tid != c->pid)
                        tids[n++] = tid;
        }
        if (tasks)
                closedir(tasks);
        if (m->attribution.history)
                manager_attribution_move(m, c, tids, n);
        for (Peer *p = m->peers; streams && p; p = p->next) {
                Selection *sel = p->stream ? &p->stream->selection : NULL;
                bool in;

                if (!sel || !sel->follow || !sel->cgroup)
                        continue;
                in = follow_move_into(m, sel, c, path_ok);
                for (size_t i = 0; i < n; i++)
                        if (in)
                                (void) follow_join(sel->follow, tids[i], c->ts);
                        else
                                follow_leave(sel->follow, tids[i], c->ts);
        }
}

/* A fork whose parent a stream of a cgroup does not select may still put the child in its
 * cgroup (clone3()'s CLONE_INTO_CGROUP, as service managers start services): the child's cgroup
 * is read then, once. */
static void follow_fork_into(Manager *m, const LineageChange *c) {
        char path[CGROUP_PATH_MAX];
        ssize_t len = 0;

        for (Peer *p = m->peers; p; p = p->next) {
                const Selection *sel = p->stream ? &p->stream->selection : NULL;

                if (!sel || !sel->follow || !sel->cgroup || follow_matches(sel->follow, c->parent, c->ts))
                        continue;
                if (len == 0)
                        len = pid_namespace_is_initial() ? cgroups_of_task(c->pid, path, sizeof(path)) : -1;
                if (len < 0)
                        return;
                if (cgroup_in_subtree(path, (size_t) len, sel->cgroup))
                        (void) follow_join(sel->follow, c->pid, c->ts);
        }
}

static void follow_hand_over(void *userdata, const LineageChange *c) {
        Manager *m = userdata;

        if (c->parent == LINEAGE_ATTACH) {
                follow_move(m, c);
                return;
        }
        if (m->attribution.history) {
                if (c->parent >= 0)
                        manager_attribution_fork(m, c);
                else
                        manager_attribution_exit(m, c);
        }
        for (Peer *p = m->peers; p; p = p->next) {
                Follow *f = p->stream ? p->stream->selection.follow : NULL;

                if (!f)
                        continue;
                if (c->parent >= 0)
                        follow_fork(f, c->parent, c->pid, c->ts);
                else
                        follow_exit(f, c->pid, c->ts);
        }
        if (c->parent >= 0)
                follow_fork_into(m, c);
}

static void follow_route(void *userdata, unsigned cpu, const void *pages, size_t n_pages, size_t page_size) {
        manager_take_pages(userdata, cpu, pages, n_pages, page_size);
}

/* Reads cpu for a watermark: read_upto[cpu] gets the time up to which every record of it was read.
 * A CPU whose read fails (logged) holds nothing that could be read: only one whose writers outpace
 * the read holds the watermark back. After a batch, a CPU whose full pages came is read up to
 * their last record: reading the page the kernel is still writing, again after every batch, would
 * cut a busy CPU's records into many small pages. */
static void follow_read(Manager *m, unsigned cpu, bool whole, size_t max_pages, uint64_t now) {
        Reader *r = m->readers[cpu];
        size_t page_size = tracing_page_size(m->tracing);
        uint64_t upto;
        int k;

        if (!whole) {
                k = reader_drain_full(r, max_pages);
                if (k < 0)
                        return;
                lineage_scan(&m->lineage, page_size);
                if (lineage_read_upto(&m->lineage, cpu, page_size, &upto)) {
                        m->follow.read_upto[cpu] = MAX(m->follow.read_upto[cpu], upto);
                        return;
                }
        }
        k = reader_drain_all(r, max_pages);
        lineage_scan(&m->lineage, page_size);
        /* At the end of the buffer (or none could be read) everything written before now was;
         * after max_pages, what the pages read hold. */
        if (k != 0)
                m->follow.read_upto[cpu] = now;
        else if (lineage_read_upto(&m->lineage, cpu, page_size, &upto))
                m->follow.read_upto[cpu] = MAX(m->follow.read_upto[cpu], upto);
}

/* whole: every record before the watermark goes out, the page that crosses it split (a sync, a
 * flush, the last reads); else whole pages only, which costs nothing more per page. Each CPU is
 * read up to max_pages: to the end for a sync or the last reads, else a batch, so that a read does
 * not chase writers that outpace it and then hand the streams its pages all at once. */
static void follow_flush(Manager *m, bool whole, size_t max_pages) {
        Lineage *l = &m->lineage;
        /* Without a clock the system reads, the reads alone order the pages. */
        uint64_t now = m->follow.have_clock ? now_nsec(m->follow.clock) : UINT64_MAX, watermark = UINT64_MAX;
        size_t page_size = tracing_page_size(m->tracing);

        if (m->follow.busy)
                return;
        /* Their records are nobody's unless a pin or a stream wants them; once the last follower
         * ended, those still read are tpd's all the same. Before any page is scanned. */
        l->hide_fork = m->follow.fork && !tracing_event_wanted(m->follow.fork);
        l->hide_exit = m->follow.exit && !tracing_event_wanted(m->follow.exit);
        l->hide_attach = m->follow.attach && !tracing_event_wanted(m->follow.attach);
        /* While one follows, and once more after the last one ended (every page goes out then). */
        if (m->follow.n > 0 || m->follow.draining) {
                m->follow.reading = true;
                /* Once the last follower ended, every fork record goes: none may reach a stream. */
                if (m->follow.draining)
                        max_pages = FOLLOW_READ_PAGES_MAX;
                for (unsigned c = 0; c < m->n_cpus; c++)
                        if (m->readers[c])
                                follow_read(m, c, whole, max_pages, now);
                m->follow.reading = false;
                m->follow.reads++;
                for (unsigned c = 0; m->follow.n > 0 && c < m->n_cpus; c++)
                        if (m->readers[c])
                                watermark = MIN(watermark, m->follow.read_upto[c]);
                m->follow.draining = false;
        }
        if (l->queued > FOLLOW_QUEUED_MAX) {
                static bool warned;

                if (!warned)
                        log_warning("Pages waiting for the forks of other CPUs passed %u MiB: routed "
                                    "without them; a following stream may miss a child's first records.",
                                    FOLLOW_QUEUED_MAX >> 20);
                warned = true;
                watermark = UINT64_MAX;
        }
        lineage_scan(l, page_size);
        lineage_apply(l, watermark, follow_hand_over, m);
        m->follow.busy = true;
        lineage_route(l, watermark, whole, page_size, follow_route, m);
        m->follow.busy = false;
        manager_attribution_expire(m, watermark);
        /* What waits goes out with the next flush at the latest: a quiet tpd's timer sleeps. */
        if (l->queued > 0 && m->quiet)
                manager_quiet_leave(m);
        follow_trim(m);
}

void manager_follow_tick(Manager *m) {
        follow_flush(m, true, FOLLOW_READ_PAGES_BATCH);
}

void manager_follow_flush(Manager *m) {
        follow_flush(m, true, FOLLOW_READ_PAGES_MAX);
}
