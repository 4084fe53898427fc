/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "comm.h"
#include "core/clock.h"
#include "util.h"

/*
 * The cache is set-associative: COMM_SETS sets of COMM_WAYS entries, least recently used out
 * first. A set is picked by a keyed hash of the pid (hash_bucket()), the key drawn at each start,
 * so a user cannot steer pids into one set: pids that agree modulo any power of two (what forking
 * until a pid comes round again gives) land in sets as if at random. A direct-mapped table indexed by
 * pid % N let two processes whose pids agree modulo N evict each other on every record when they
 * ping-pong on one CPU, and turned each record into a /proc read.
 *
 * Even without conflicts, a name serves only records written until its lookup, so every pid costs
 * one /proc read per batch that follows its lookup: a crowd of tasks each switching once per batch
 * could still make a read of most records. Reads are budgeted so that the cost per record stays
 * flat: COMM_PROC_BURST per generation, plus one per COMM_PROC_COST lookups. The burst is wide
 * enough for honest loads: a reader woken for every page of a busy CPU makes a few hundred batches
 * per generation, each refreshing the names of the pids on it. Past the budget a lookup is
 * answered with the name the pid's entry had at its last read, not cached anew, so the next lookup
 * with budget reads /proc.
 */
#define COMM_LEN 16
#define COMM_SET_BITS 10U
#define COMM_SETS (1U << COMM_SET_BITS)
#define COMM_WAYS COMM_CACHE_WAYS
#define COMM_PROC_COST COMM_CACHE_PROC_COST   /* lookups that earn one /proc read */
#define COMM_PROC_BURST COMM_CACHE_PROC_BURST /* /proc reads at once, and per generation */
#define COMM_SAVED_GENERATIONS 10U

typedef struct CommEntry {
        uint32_t generation;
        bool known;
        bool timed;     /* valid for records up to until_ts, in any generation */
        bool from_proc; /* the name was read from the running task itself */
        uint64_t until_ts;
        char comm[COMM_LEN];
} CommEntry;

/* The pids of a set apart from their entries: a lookup compares them in one cache line. */
typedef struct CommSet {
        int32_t pid[COMM_WAYS]; /* -1: empty */
        uint32_t used[COMM_WAYS];
        CommEntry entry[COMM_WAYS];
} CommSet;

typedef struct SavedComm {
        int pid;
        char comm[COMM_LEN];
} SavedComm;

struct CommCache {
        char *saved_path;
        uint32_t generation;       /* starts at 1: a zeroed entry is never current */
        uint32_t saved_generation; /* 0: never read */
        bool proc_first;
        clockid_t clock;   /* the system clock of the trace clock; -1: none */
        uint64_t saved_ts; /* trace clock time of the last saved_cmdlines read */
        SavedComm *saved;
        size_t n_saved;
        uint64_t key;         /* of the set hash */
        uint32_t tick;        /* of the last use, for LRU within a set */
        uint32_t proc_credit; /* in lookups; a /proc read costs COMM_PROC_COST */
        CommCacheStats stats;
        CommSet sets[COMM_SETS];
};

static void comm_cache_clear(CommCache *c) {
        for (size_t i = 0; i < COMM_SETS; i++) {
                memset(&c->sets[i], 0, sizeof(CommSet));
                for (size_t w = 0; w < COMM_WAYS; w++)
                        c->sets[i].pid[w] = -1;
        }
}

unsigned comm_cache_set_of(const CommCache *c, int pid) {
        return hash_bucket(c->key, (uint32_t) pid, COMM_SET_BITS);
}

int comm_cache_new(const char *saved_cmdlines_path, CommCache **ret) {
        CommCache *c = calloc(1, sizeof(CommCache));

        if (!c)
                return -ENOMEM;
        c->saved_path = saved_cmdlines_path ? strdup(saved_cmdlines_path) : NULL;
        if (saved_cmdlines_path && !c->saved_path) {
                free(c);
                return -ENOMEM;
        }
        c->generation = 1;
        c->clock = -1;
        c->proc_credit = COMM_PROC_BURST * COMM_PROC_COST;
        c->key = hash_key_new();
        comm_cache_clear(c);
        c->proc_first = pid_namespace_is_initial();
        *ret = c;
        return 0;
}

CommCache *comm_cache_free(CommCache *c) {
        if (!c)
                return NULL;
        free(c->saved);
        free(c->saved_path);
        free(c);
        return NULL;
}

void comm_cache_set_clock(CommCache *c, const char *name) {
        if (trace_clock_id(name, &c->clock) < 0)
                c->clock = -1;
        /* Times taken on the old clock mean nothing on the new one. */
        comm_cache_clear(c);
        c->saved_ts = 0;
}

/* Now on the trace clock, or UINT64_MAX when it has no system counterpart. */
static uint64_t comm_now(const CommCache *c) {
        return c->clock < 0 ? UINT64_MAX : now_nsec(c->clock);
}

void comm_cache_next_generation(CommCache *c) {
        if (++c->generation == 0)
                c->generation = 1;
        c->proc_credit = COMM_PROC_BURST * COMM_PROC_COST;
}

void comm_cache_get_stats(const CommCache *c, CommCacheStats *ret) {
        *ret = c->stats;
}

/* Names are cached for one generation (a flush interval), so that a rename (exec, prctl) shows
 * soon; the big saved_cmdlines table is reread at most every COMM_SAVED_GENERATIONS. */
static bool saved_is_old(const CommCache *c) {
        return c->saved_generation == 0 || c->generation - c->saved_generation >= COMM_SAVED_GENERATIONS;
}

static int cmp_saved(const void *a, const void *b) {
        const SavedComm *x = a, *y = b;
        return (x->pid > y->pid) - (x->pid < y->pid);
}

/* saved_cmdlines holds thousands of entries on 6.x kernels: reading it costs far more than a
 * record, so it is read only when old (see saved_is_old(), comm_from_saved() and comm_of_gone()). */
static void load_saved_now(CommCache *c) {
        _cleanup_free_ SavedComm *l = NULL;
        size_t n = 0, cap = 0;
        char line[64];
        FILE *f;

        if (!c->saved_path)
                return;
        c->saved_generation = c->generation;
        c->saved_ts = comm_now(c);

        f = fopen(c->saved_path, "re");
        if (!f)
                return;
        while (fgets(line, sizeof(line), f)) {
                char *end, *name;
                long pid = strtol(line, &end, 10);

                if (end == line || *end != ' ')
                        continue;
                name = end + 1;
                name[strcspn(name, "\n")] = 0;
                if (n == cap) {
                        SavedComm *nl;
                        cap = MAX(cap * 2, (size_t) 128);
                        nl = reallocarray(l, cap, sizeof(SavedComm));
                        if (!nl)
                                break;
                        l = nl;
                }
                l[n].pid = (int) pid;
                snprintf(l[n].comm, COMM_LEN, "%s", name);
                n++;
        }
        fclose(f);

        qsort(l, n, sizeof(SavedComm), cmp_saved);
        free(c->saved);
        c->saved = TAKE_PTR(l);
        c->n_saved = n;
}

static void load_saved(CommCache *c) {
        if (saved_is_old(c))
                load_saved_now(c);
}

void comm_cache_reread(CommCache *c) {
        /* As a flush tick does: the names cached so far, misses included, are looked up again, with
         * the /proc reads of a generation (a name cached past the budget may be an earlier task's
         * of the pid), against the table as it is now. */
        comm_cache_next_generation(c);
        load_saved_now(c);
}

static bool lookup_proc(int pid, char comm[COMM_LEN]) {
        char path[32];
        ssize_t n;
        int fd;

        snprintf(path, sizeof(path), "/proc/%d/comm", pid);
        fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return false;
        n = read(fd, comm, COMM_LEN - 1);
        close(fd);
        if (n <= 0)
                return false;
        comm[n] = 0;
        comm[strcspn(comm, "\n")] = 0;
        return true;
}

static SavedComm *find_saved(CommCache *c, int pid) {
        SavedComm key = { .pid = pid };

        return c->n_saved > 0 ? bsearch(&key, c->saved, c->n_saved, sizeof(SavedComm), cmp_saved) : NULL;
}

/* The entry of pid in its set, marked as just used; NULL when the set holds none. */
static CommEntry *comm_set_find(CommCache *c, CommSet *set, int pid) {
        for (unsigned way = 0; way < COMM_WAYS; way++)
                if (set->pid[way] == pid) {
                        set->used[way] = ++c->tick;
                        return &set->entry[way];
                }
        return NULL;
}

/* A new entry for pid, without a name: an empty way, else the least recently used (ages count
 * modulo 2^32). */
static CommEntry *comm_set_add(CommCache *c, CommSet *set, int pid) {
        unsigned victim = 0;

        for (unsigned way = 0; way < COMM_WAYS; way++) {
                if (set->pid[way] < 0) {
                        victim = way;
                        break;
                }
                if (c->tick - set->used[way] > c->tick - set->used[victim])
                        victim = way;
        }
        set->pid[victim] = pid;
        set->used[victim] = ++c->tick;
        set->entry[victim].known = false;
        return &set->entry[victim];
}

/* Outside the initial PID namespace, the name of pid from the kernel's table, which lasts a
 * generation. */
static const char *comm_from_saved(CommCache *c, CommEntry *e, int pid) {
        SavedComm *s;

        e->until_ts = UINT64_MAX;
        e->timed = false;
        load_saved(c);
        s = find_saved(c, pid);
        if (s && !streq(s->comm, "<...>")) {
                memcpy(e->comm, s->comm, COMM_LEN);
                return e->comm;
        }
        e->known = false;
        return NULL;
}

/* The task is gone. The table names it as of its last switch before it was read: a read older
 * than the record may predate a rename (exec, prctl), or the task itself. The table is thousands
 * of lines, so it is reread no more often than before (COMM_SAVED_GENERATIONS), when it cannot
 * answer; a reread is newer than every record of the tasks gone by then. */
static const char *comm_of_gone(CommCache *c, CommEntry *e, int pid, uint64_t ts) {
        SavedComm *s = find_saved(c, pid);

        if ((!s || ts > c->saved_ts) && saved_is_old(c)) {
                load_saved(c);
                s = find_saved(c, pid);
        }
        if (s && ts <= c->saved_ts && !streq(s->comm, "<...>")) {
                memcpy(e->comm, s->comm, COMM_LEN);
                return e->comm;
        }

        e->until_ts = UINT64_MAX;
        e->timed = false;
        /* Unknown, or maybe renamed after the last read: no name rather than a stale one, until
         * the table may be reread. */
        e->known = false;
        return NULL;
}

const char *comm_cache_lookup(CommCache *c, int pid, uint64_t ts) {
        char prev[COMM_LEN] = "";
        CommEntry *e;
        CommSet *set;
        uint64_t now;
        bool had;

        if (pid < 0)
                return NULL;
        c->proc_credit = MIN(c->proc_credit + 1, COMM_PROC_BURST * COMM_PROC_COST);
        set = &c->sets[comm_cache_set_of(c, pid)];
        e = comm_set_find(c, set, pid);

        /* A name looked up at until_ts holds for records written until then: a record written
         * later may follow a rename (exec, prctl) or be another task's that reuses the pid. This
         * does not depend on the flush timer, which a busy loop may hold off for seconds. Without
         * a system clock for the trace clock, entries last one generation. */
        if (_likely_(e && ts <= e->until_ts && (e->timed || e->generation == c->generation)))
                return e->known ? e->comm : NULL;

        /* Past the budget, a name the pid had at its last lookup serves, though older than the
         * record. A pid without one is read all the same: the kernel's table may name an earlier
         * task of the pid, and a miss without an entry needs a new pid or more pids than a set
         * holds, which no user can aim at one set. */
        if (e && e->known && c->proc_first && pid != 0 && c->proc_credit < COMM_PROC_COST) {
                c->stats.proc_deferred++;
                return e->comm;
        }

        if (!e)
                e = comm_set_add(c, set, pid);

        /* The name this entry had for the pid, for a task found gone below. */
        had = e->known && e->from_proc;
        if (had)
                memcpy(prev, e->comm, COMM_LEN);
        now = comm_now(c);
        e->generation = c->generation;
        e->known = true;
        e->until_ts = now;
        e->timed = now != UINT64_MAX;

        /* pid 0 is each CPU's idle task; the kernel's own text output calls it <idle>. */
        if (pid == 0) {
                e->until_ts = UINT64_MAX;
                e->timed = true;
                snprintf(e->comm, COMM_LEN, "<idle>");
                return e->comm;
        }

        /* In the initial PID namespace /proc is the live truth for running tasks, and costs one
         * small read; the kernel's table is a snapshot that may name an earlier task of a reused
         * pid, so it serves for tasks that are gone. Elsewhere /proc would name other processes
         * (records carry initial-namespace pids): the table is the only source, reread when it
         * is COMM_SAVED_GENERATIONS old, and its names last a generation. */
        e->from_proc = false;
        if (!c->proc_first)
                return comm_from_saved(c, e, pid);
        c->proc_credit -= MIN(c->proc_credit, COMM_PROC_COST);
        c->stats.proc_reads++;
        if (lookup_proc(pid, e->comm)) {
                e->from_proc = true;
                return e->comm;
        }

        /* The task exited since its name was read from /proc: its records up to its exit carry
         * that name, which the task itself gave. The kernel's table may name it as of an older
         * switch (before an exec) or not at all. A new task of the same pid would be found in /proc
         * first. Valid for this generation. */
        if (had) {
                memcpy(e->comm, prev, COMM_LEN);
                e->from_proc = true;
                e->until_ts = UINT64_MAX;
                e->timed = false;
                return e->comm;
        }
        return comm_of_gone(c, e, pid, ts);
}
