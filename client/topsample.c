/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* What `tpctl top` shows, apart from how: samples of counts (topsample.h). */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "connection.h"
#include "core/cgroup.h"
#include "topsample.h"
#include "units.h"
#include "util.h"

void top_sample_free(TopSample *s) {
        if (!s)
                return;
        for (size_t i = 0; i < s->n_events; i++) {
                for (size_t j = 0; j < s->events[i].n_procs; j++)
                        free(s->events[i].procs[j].comm);
                free(s->events[i].procs);
                free(s->events[i].name);
        }
        free(s->events);
        free(s);
}

/* Text from tpd, for a terminal or a key=value line: only printable ASCII other than '=' and '\\'
 * passes; the rest becomes \xNN. Spaces pass here and are escaped when a line is printed. */
static char *top_escape(const char *s) {
        char *t = malloc(strlen(s) * 4 + 1), *p = t;

        if (!t)
                return NULL;
        for (; *s; s++) {
                unsigned char c = (unsigned char) *s;

                if (c >= ' ' && c < 0x7f && c != '=' && c != '\\')
                        *p++ = (char) c;
                else
                        p += sprintf(p, "\\x%02x", c);
        }
        *p = 0;
        return t;
}

int top_parse(json_object *params, TopSample **ret) {
        json_object *events = json_object_object_get(params, "events");
        TopSample *s = calloc(1, sizeof(TopSample));
        size_t n;

        if (!s)
                return -ENOMEM;
        s->usec = (uint64_t) MAX(reply_int(params, "usec", NULL), 0);
        s->other_records = (uint64_t) MAX(reply_int(params, "other_records", NULL), 0);
        s->other_lost = (uint64_t) MAX(reply_int(params, "other_lost", NULL), 0);
        s->overrun = (uint64_t) MAX(reply_int(params, "overrun", NULL), 0);
        s->dropped = (uint64_t) MAX(reply_int(params, "dropped", NULL), 0);
        n = json_object_is_type(events, json_type_array) ? json_object_array_length(events) : 0;
        s->events = calloc(n + 1, sizeof(TopEvent));
        if (!s->events)
                goto oom;
        for (size_t i = 0; i < n; i++) {
                json_object *o = json_object_array_get_idx(events, i), *name, *procs;
                TopEvent *e = &s->events[s->n_events++];
                size_t m;

                e->id = (int64_t) (uint64_t) MAX(reply_int(o, "id", NULL), 0);
                e->total = (uint64_t) MAX(reply_int(o, "records", NULL), 0);
                e->lost = (uint64_t) MAX(reply_int(o, "lost", NULL), 0);
                e->rate = NAN;
                name = json_object_object_get(o, "name");
                if (json_object_is_type(name, json_type_string))
                        e->name = top_escape(json_object_get_string(name));
                else if (asprintf(&e->name, "id:%" PRIi64, e->id) < 0)
                        e->name = NULL;
                if (!e->name)
                        goto oom;

                procs = json_object_object_get(o, "processes");
                m = json_object_is_type(procs, json_type_array) ? json_object_array_length(procs) : 0;
                e->procs = calloc(m + 1, sizeof(TopProc));
                if (!e->procs)
                        goto oom;
                for (size_t j = 0; j < m; j++) {
                        json_object *p = json_object_array_get_idx(procs, j),
                                    *comm = json_object_object_get(p, "comm");
                        TopProc *t = &e->procs[e->n_procs++];

                        t->pid = (int) json_object_get_int64(json_object_object_get(p, "pid"));
                        t->total = (uint64_t) MAX(reply_int(p, "records", NULL), 0);
                        t->lost = (uint64_t) MAX(reply_int(p, "lost", NULL), 0);
                        t->rate = NAN;
                        t->comm = top_escape(json_object_is_type(comm, json_type_string)
                                                     ? json_object_get_string(comm)
                                                     : "-");
                        if (!t->comm)
                                goto oom;
                }
                e->procs[e->n_procs++] = (TopProc){
                        .pid = -1,
                        .total = (uint64_t) MAX(reply_int(o, "other_records", NULL), 0),
                        .lost = (uint64_t) MAX(reply_int(o, "other_lost", NULL), 0),
                        .rate = NAN,
                };
        }
        *ret = s;
        return 0;
oom:
        top_sample_free(s);
        return -ENOMEM;
}

static const TopEvent *top_find_event(const TopSample *s, int64_t id) {
        for (size_t i = 0; i < s->n_events; i++)
                if (s->events[i].id == id)
                        return &s->events[i];
        return NULL;
}

static uint64_t top_delta(uint64_t now, uint64_t before) {
        /* A process whose slot tpd gave to another starts again from zero. */
        return now >= before ? now - before : now;
}

/* Rates of s against the sample before it. A process new in tpd's table counts from zero (its slot
 * was empty or reset); "other" takes what the event gained beyond its listed processes, so that a
 * process moved to "other" by tpd does not show as a burst. */
void top_rates(TopSample *s, const TopSample *prev) {
        double dt;

        if (!prev || s->usec <= prev->usec)
                return;
        dt = (double) (s->usec - prev->usec) / 1e6;
        s->interval = dt;
        s->rate = (double) top_delta(s->other_records, prev->other_records) / dt;
        for (size_t i = 0; i < s->n_events; i++) {
                TopEvent *e = &s->events[i];
                const TopEvent *p = top_find_event(prev, e->id);
                uint64_t d = top_delta(e->total, p ? p->total : 0), listed = 0;

                e->rate = (double) d / dt;
                s->rate += e->rate;
                for (size_t j = 0; j + 1 < e->n_procs; j++) {
                        TopProc *t = &e->procs[j];
                        uint64_t before = 0, dp;

                        for (size_t k = 0; p && k + 1 < p->n_procs; k++)
                                if (p->procs[k].pid == t->pid) {
                                        before = p->procs[k].total;
                                        break;
                                }
                        dp = top_delta(t->total, before);
                        listed += dp;
                        t->rate = (double) dp / dt;
                }
                e->procs[e->n_procs - 1].rate = d > listed ? (double) (d - listed) / dt : 0.0;
        }
}

static int top_compare_values(double ra, double rb, uint64_t ta, uint64_t tb, uint64_t la, uint64_t lb,
                              const char *na, const char *nb, TopSort sort) {
        /* Busiest first; the name breaks ties, so that equal rows keep still between refreshes. */
        switch (sort) {
        case TOP_SORT_RATE:
                if (!isnan(ra) && !isnan(rb) && ra != rb)
                        return ra > rb ? -1 : 1;
                /* equal rates: by total */
                __attribute__((fallthrough));
        case TOP_SORT_TOTAL:
                if (ta != tb)
                        return ta > tb ? -1 : 1;
                break;
        case TOP_SORT_LOST:
                if (la != lb)
                        return la > lb ? -1 : 1;
                if (ta != tb)
                        return ta > tb ? -1 : 1;
                break;
        case TOP_SORT_NAME:
                break;
        }
        return strcmp(na, nb);
}

static int top_compare_events(const void *a, const void *b, void *userdata) {
        const TopEvent *x = a, *y = b;

        return top_compare_values(x->rate, y->rate, x->total, y->total, x->lost, y->lost, x->name, y->name,
                                  *(TopSort *) userdata);
}

static int top_compare_procs(const void *a, const void *b, void *userdata) {
        const TopProc *x = a, *y = b;
        char px[16], py[16];
        int r;

        /* "other" last whatever the order. */
        if ((x->pid < 0) != (y->pid < 0))
                return x->pid < 0 ? 1 : -1;
        if (*(TopSort *) userdata == TOP_SORT_NAME) {
                r = strcmp(strempty(x->comm), strempty(y->comm));
                if (r != 0)
                        return r;
        }
        snprintf(px, sizeof(px), "%012d", x->pid);
        snprintf(py, sizeof(py), "%012d", y->pid);
        return top_compare_values(x->rate, y->rate, x->total, y->total, x->lost, y->lost, px, py,
                                  *(TopSort *) userdata);
}

void top_sort(TopSample *s, TopSort sort) {
        qsort_r(s->events, s->n_events, sizeof(TopEvent), top_compare_events, &sort);
        for (size_t i = 0; i < s->n_events; i++)
                qsort_r(s->events[i].procs, s->events[i].n_procs, sizeof(TopProc), top_compare_procs, &sort);
}

static const char *const sort_names[] = {
        [TOP_SORT_RATE] = "rate",
        [TOP_SORT_TOTAL] = "total",
        [TOP_SORT_LOST] = "lost",
        [TOP_SORT_NAME] = "name",
};

static const char *const by_names[] = {
        [TOP_BY_PID] = "pid",
        [TOP_BY_CGROUP] = "cgroup",
        [TOP_BY_UNIT] = "unit",
};

/* The index of s among n names, or -EINVAL. */
static int top_name_index(const char *const *names, size_t n, const char *s) {
        for (size_t i = 0; i < n; i++)
                if (streq(s, names[i]))
                        return (int) i;
        return -EINVAL;
}

const char *top_sort_name(TopSort sort) {
        return sort_names[sort];
}

int top_by_from_string(const char *s, TopBy *ret) {
        int i = top_name_index(by_names, ELEMENTSOF(by_names), s);

        if (i < 0)
                return i;
        *ret = (TopBy) i;
        return 0;
}

int top_sort_from_string(const char *s, TopSort *ret) {
        int i = top_name_index(sort_names, ELEMENTSOF(sort_names), s);

        if (i < 0)
                return i;
        *ret = (TopSort) i;
        return 0;
}

/* The groups of processes tpctl read while they ran: a process counted after it exited (its last
 * records were read late, or it was short) keeps the group it had. A pid read again is read anew:
 * it may be another process now. At most TOP_GROUPS_KEPT, the oldest going first. */
#define TOP_GROUPS_KEPT 4096U
static struct {
        int pid;
        char *name;
} groups_kept[TOP_GROUPS_KEPT];
static size_t groups_next;

static const char *top_group_kept(int pid, const char *name) {
        size_t slot = groups_next;

        for (size_t i = 0; i < TOP_GROUPS_KEPT; i++)
                if (groups_kept[i].name && groups_kept[i].pid == pid) {
                        if (!name)
                                return groups_kept[i].name;
                        slot = i;
                        break;
                }
        if (!name)
                return NULL;
        if (slot == groups_next)
                groups_next = (groups_next + 1) % TOP_GROUPS_KEPT;
        free(groups_kept[slot].name);
        groups_kept[slot].pid = pid;
        groups_kept[slot].name = strdup(name);
        return groups_kept[slot].name;
}

/* The group of process pid, a name to show (top_escape()d): its cgroup, or that cgroup's unit; "-"
 * for one tpctl never could read (gone before, or hidden by tpctl's PID namespace). */
static char *top_group_of(int pid, TopBy by) {
        char path[4096];
        const char *name = path, *kept;
        ssize_t len = pid == 0 ? 1 : unit_cgroup_of_pid(pid, path, sizeof(path));
        size_t n;

        /* The idle tasks: in the root cgroup, with no /proc entry. */
        if (pid == 0)
                strcpy(path, "/");
        if (len < 0) {
                kept = top_group_kept(pid, NULL);
                return top_escape(kept ?: "-");
        }
        n = (size_t) len;
        if (by == TOP_BY_UNIT)
                n = cgroup_unit(path, n, &name);
        kept = top_group_kept(pid, strndupa(name, n));
        return top_escape(kept ?: strndupa(name, n));
}

/* The processes of each event summed by their group: a sample of its own, for showing (rates are
 * taken between the samples by process, as tpd counts). */
/* A copy of s whose events have room for as many rows as s's, and none yet. */
static TopSample *top_sample_frame(const TopSample *s) {
        TopSample *c = calloc(1, sizeof(TopSample));

        if (!c)
                return NULL;
        *c = *s;
        c->events = calloc(s->n_events + 1, sizeof(TopEvent));
        c->n_events = c->events_cap = 0;
        if (!c->events)
                goto oom;
        for (size_t i = 0; i < s->n_events; i++) {
                const TopEvent *e = &s->events[i];
                TopEvent *ce = &c->events[c->n_events++];

                *ce = *e;
                ce->name = strdup(e->name);
                ce->procs = calloc(e->n_procs + 1, sizeof(TopProc));
                ce->n_procs = ce->procs_cap = 0;
                if (!ce->name || !ce->procs)
                        goto oom;
        }
        return c;
oom:
        top_sample_free(c);
        return NULL;
}

TopSample *top_group(const TopSample *s, TopBy by) {
        TopSample *g = top_sample_frame(s);

        if (!g)
                return NULL;
        g->by = by;
        for (size_t i = 0; i < s->n_events; i++) {
                const TopEvent *e = &s->events[i];
                TopEvent *ge = &g->events[i];

                for (size_t j = 0; j < e->n_procs; j++) {
                        const TopProc *t = &e->procs[j];
                        _cleanup_free_ char *name = t->pid < 0 ? NULL : top_group_of(t->pid, by);
                        TopProc *to = NULL;

                        if (t->pid >= 0 && !name)
                                goto oom;
                        for (size_t k = 0; name && k < ge->n_procs; k++)
                                if (ge->procs[k].pid >= 0 && streq(ge->procs[k].comm, name))
                                        to = &ge->procs[k];
                        if (!to) {
                                to = &ge->procs[ge->n_procs++];
                                *to = (TopProc){ .pid = t->pid < 0 ? -1 : 0,
                                                 .comm = TAKE_PTR(name),
                                                 .rate = t->rate };
                        } else
                                to->rate += t->rate; /* NAN stays NAN: the first sample */
                        to->total += t->total;
                        to->lost += t->lost;
                }
        }
        return g;
oom:
        top_sample_free(g);
        return NULL;
}

/* Processes counted one by one per event, at most: the others count in its "other" row. */
#define TOP_COMMAND_PROCS_MAX 1024U

/* A deep copy of s, for showing and for the next rates (the counts go on in s). */
TopSample *top_sample_copy(const TopSample *s) {
        TopSample *c = top_sample_frame(s);

        for (size_t i = 0; c && i < s->n_events; i++) {
                const TopEvent *e = &s->events[i];
                TopEvent *ce = &c->events[i];

                for (size_t j = 0; j < e->n_procs; j++) {
                        ce->procs[j] = e->procs[j];
                        ce->procs[j].comm = e->procs[j].comm ? strdup(e->procs[j].comm) : NULL;
                        ce->n_procs++;
                        if (e->procs[j].comm && !ce->procs[j].comm) {
                                top_sample_free(c);
                                return NULL;
                        }
                }
        }
        return c;
}

/* Counts one record of the command's stream: its event, process and name. */
int top_count(TopSample *s, const LineHead *h) {
        _cleanup_free_ char *name = strndup(h->name, h->name_len);
        TopEvent *e = NULL;
        TopProc *t = NULL;

        if (!name)
                return -ENOMEM;
        for (size_t i = 0; i < s->n_events && !e; i++)
                if (streq(s->events[i].name, name))
                        e = &s->events[i];
        if (!e) {
                if (ARRAY_RESERVE(s->events, s->events_cap, s->n_events + 1) < 0)
                        return -ENOMEM;
                e = &s->events[s->n_events];
                /* Every event's last row is "other". */
                *e = (TopEvent){ .name = top_escape(name), .id = (int64_t) s->n_events, .rate = NAN };
                if (!e->name || ARRAY_RESERVE(e->procs, e->procs_cap, 1) < 0) {
                        free(e->name);
                        free(e->procs);
                        return -ENOMEM;
                }
                e->procs[e->n_procs++] = (TopProc){ .pid = -1, .rate = NAN };
                s->n_events++;
        }
        e->total++;
        for (size_t j = 0; j + 1 < e->n_procs && !t; j++)
                if (e->procs[j].pid == (int) h->pid)
                        t = &e->procs[j];
        if (!t && e->n_procs <= TOP_COMMAND_PROCS_MAX) {
                char *comm = top_escape(h->comm ? strndupa(h->comm, h->comm_len) : "-");

                if (!comm || ARRAY_RESERVE(e->procs, e->procs_cap, e->n_procs + 1) < 0) {
                        free(comm);
                        return -ENOMEM;
                }
                e->procs[e->n_procs] = e->procs[e->n_procs - 1];
                t = &e->procs[e->n_procs - 1];
                *t = (TopProc){ .pid = (int) h->pid, .comm = comm, .rate = NAN };
                e->n_procs++;
        }
        if (!t)
                t = &e->procs[e->n_procs - 1];
        t->total++;
        return 0;
}

/* A loss of the command's stream: the kernel's, or the stream's own (not by event). */
void top_count_lost(TopSample *s, const LineHead *h) {
        if (h->cause && h->cause_len == 7 && memcmp(h->cause, "overrun", 7) == 0)
                s->overrun += h->n_lost;
        else if (h->cause && h->cause_len == 7 && memcmp(h->cause, "dropped", 7) == 0)
                s->dropped += h->n_lost;
        else
                s->other_lost += h->n_lost;
}
