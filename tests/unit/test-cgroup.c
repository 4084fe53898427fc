/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Cgroup paths, a follow set whose tasks come and go as they move between cgroups, and the history
 * of each task's cgroup that records are attributed by. */
#include <string.h>

#include "core/cgroup-history.h"
#include "core/cgroup.h"
#include "core/follow.h"
#include "tpd-test.h"

static void test_valid(void) {
        char long_path[CGROUP_PATH_MAX + 2];

        ASSERT(cgroup_path_valid("/"));
        ASSERT(cgroup_path_valid("/system.slice/ssh.service"));
        ASSERT(cgroup_path_valid("/a/.b/..c"));
        ASSERT(!cgroup_path_valid(""));
        ASSERT(!cgroup_path_valid("system.slice"));
        ASSERT(!cgroup_path_valid("/a/"));
        ASSERT(!cgroup_path_valid("//a"));
        ASSERT(!cgroup_path_valid("/a//b"));
        ASSERT(!cgroup_path_valid("/a/./b"));
        ASSERT(!cgroup_path_valid("/a/.."));
        ASSERT(!cgroup_path_valid("/../etc"));
        ASSERT(!cgroup_path_valid("/a\nb"));
        memset(long_path, 'a', sizeof(long_path) - 1);
        long_path[0] = '/';
        long_path[sizeof(long_path) - 1] = '\0';
        ASSERT(!cgroup_path_valid(long_path));
}

static bool in(const char *path, const char *root) {
        return cgroup_in_subtree(path, strlen(path), root);
}

static void test_subtree(void) {
        ASSERT(in("/a", "/a"));
        ASSERT(in("/a/b/c", "/a"));
        ASSERT(!in("/ab", "/a"));
        ASSERT(!in("/", "/a"));
        ASSERT(in("/", "/"));
        ASSERT(in("/x/y", "/"));
        ASSERT(!in("/a/b", "/a/b/c"));
        ASSERT(!cgroup_in_subtree("", 0, "/"));
}

static void test_v2_line(void) {
        static const char hybrid[] = "9:name=systemd:/user.slice\n4:memory:/m\n0::/user.slice/x.scope\n";
        static const char v1_only[] = "4:memory:/m\n1:cpu:/\n";
        const char *p;
        size_t n;

        ASSERT(cgroup_v2_line(hybrid, strlen(hybrid), &p, &n));
        ASSERT_INT_EQ(n, strlen("/user.slice/x.scope"));
        ASSERT(memcmp(p, "/user.slice/x.scope", n) == 0);
        ASSERT(cgroup_v2_line("0::/", 4, &p, &n));
        ASSERT(n == 1 && p[0] == '/');
        ASSERT(!cgroup_v2_line(v1_only, strlen(v1_only), &p, &n));
        /* A line cut short is not one. */
        ASSERT(!cgroup_v2_line("0:", 2, &p, &n));
}

static const char *unit(const char *path) {
        static char buf[256];
        const char *u;
        size_t n = cgroup_unit(path, strlen(path), &u);

        ASSERT(n < sizeof(buf));
        memcpy(buf, u, n);
        buf[n] = '\0';
        return buf;
}

static void test_unit(void) {
        ASSERT_STR_EQ(unit("/system.slice/ssh.service"), "ssh.service");
        ASSERT_STR_EQ(unit("/user.slice/user-1000.slice/session-2.scope"), "session-2.scope");
        ASSERT_STR_EQ(unit("/user.slice/user-1000.slice/user@1000.service/app.slice/x.service"),
                      "x.service");
        /* Below a unit, in cgroups of its own (a service's delegated subtree, a container's). */
        ASSERT_STR_EQ(unit("/machine.slice/docker-0a1b.scope/init"), "docker-0a1b.scope");
        ASSERT_STR_EQ(unit("/system.slice"), "system.slice");
        ASSERT_STR_EQ(unit("/init.scope"), "init.scope");
        ASSERT_STR_EQ(unit("/"), "-.slice");
        ASSERT_STR_EQ(unit("/mine/a"), "-.slice");
        ASSERT_STR_EQ(unit("/.service"), "-.slice"); /* a suffix alone names nothing */
        ASSERT_STR_EQ(unit(""), "-.slice");
}

static void test_ids(void) {
        uint64_t ids[] = { 40, 7, 1000, 12 };

        cgroup_ids_sort(ids, 4);
        ASSERT(ids[0] == 7 && ids[3] == 1000);
        ASSERT(cgroup_ids_contain(ids, 4, 12));
        ASSERT(cgroup_ids_contain(ids, 4, 1000));
        ASSERT(!cgroup_ids_contain(ids, 4, 13));
        ASSERT(!cgroup_ids_contain(NULL, 0, 7));
}

/* A task moved in is a member from its move, one moved out no longer; its children inherit. */
static void test_join_leave(void) {
        Follow *f = NULL;

        ASSERT_INT_EQ(follow_new(3, &f), 0);
        f->start = 100;
        ASSERT_INT_EQ(follow_join(f, 7, 50), 0); /* before the start: the seed tells it */
        ASSERT(!follow_matches(f, 7, 60));
        ASSERT_INT_EQ(follow_join(f, 7, 200), 0);
        ASSERT(!follow_matches(f, 7, 199));
        ASSERT(follow_matches(f, 7, 200));
        ASSERT_INT_EQ(follow_join(f, 7, 250), 0); /* moved within the subtree */
        ASSERT_INT_EQ(f->n, 1);
        follow_fork(f, 7, 8, 300);
        ASSERT(follow_matches(f, 8, 300));
        follow_leave(f, 7, 400);
        ASSERT(follow_matches(f, 7, 399));
        ASSERT(!follow_matches(f, 7, 400));
        ASSERT(follow_matches(f, 8, 500)); /* its child stays where it was */
        /* Back in: a member again from then on, not in between. */
        ASSERT_INT_EQ(follow_join(f, 7, 600), 0);
        ASSERT(!follow_matches(f, 7, 500));
        ASSERT(follow_matches(f, 7, 600));
        /* The bound: the left entry made room; then none is left. */
        ASSERT_INT_EQ(follow_join(f, 9, 700), 0);
        ASSERT_INT_EQ(follow_join(f, 10, 800), -ENOSPC);
        ASSERT_U64_EQ(f->refused, 1);
        follow_leave(f, 11, 900); /* never a member: nothing */
        ASSERT_INT_EQ(f->n, 3);
        follow_free(f);
}

static uint32_t path(CgroupHistory *h, const char *s) {
        uint32_t i = UINT32_MAX;

        ASSERT_INT_EQ(cgroup_history_path(h, s, strlen(s), &i), 0);
        return i;
}

/* pid's cgroup at ts, as a string ("-ENOENT", "-ERANGE" when there is none). */
static const char *at(CgroupHistory *h, int32_t pid, uint64_t ts) {
        static char buf[256];
        uint32_t i;
        size_t len;
        const char *s;
        int r = cgroup_history_at(h, pid, ts, &i);

        if (r == -ENOENT)
                return "-ENOENT";
        if (r == -ERANGE)
                return "-ERANGE";
        ASSERT_INT_EQ(r, 0);
        s = cgroup_history_path_of(h, i, &len);
        ASSERT(len < sizeof(buf));
        memcpy(buf, s, len);
        buf[len] = '\0';
        return buf;
}

static void test_history(void) {
        CgroupHistory *h;
        uint32_t a, b;

        ASSERT_INT_EQ(cgroup_history_new(3, &h), 0);
        a = path(h, "/a");
        ASSERT_INT_EQ(path(h, "/a"), a); /* once each */
        ASSERT_INT_EQ(cgroup_history_set(h, 10, 0, a), 0);
        b = path(h, "/b");
        ASSERT(b != a);
        /* A move at 100: the records before it keep /a, however late they are read. */
        ASSERT_INT_EQ(cgroup_history_set(h, 10, 100, b), 0);
        ASSERT_STR_EQ(at(h, 10, 99), "/a");
        ASSERT_STR_EQ(at(h, 10, 100), "/b");
        ASSERT_STR_EQ(at(h, 11, 100), "-ENOENT");
        /* A fork's child is known from its fork only. */
        ASSERT_INT_EQ(cgroup_history_set(h, 11, 50, a), 0);
        ASSERT_STR_EQ(at(h, 11, 49), "-ERANGE");
        ASSERT_STR_EQ(at(h, 11, 50), "/a");
        /* Changes told out of order still go in time order. */
        ASSERT_INT_EQ(cgroup_history_set(h, 11, 300, b), 0);
        ASSERT_INT_EQ(cgroup_history_set(h, 11, 200, path(h, "/c")), 0);
        ASSERT_STR_EQ(at(h, 11, 250), "/c");
        ASSERT_STR_EQ(at(h, 11, 300), "/b");
        /* At most CGROUP_HISTORY_STEPS changes: the oldest go, and one older than all is ignored. */
        ASSERT_INT_EQ(cgroup_history_set(h, 11, 400, a), 0);
        ASSERT_INT_EQ(cgroup_history_set(h, 11, 500, b), 0);
        ASSERT_STR_EQ(at(h, 11, 60), "-ERANGE");
        ASSERT_STR_EQ(at(h, 11, 200), "/c");
        ASSERT_INT_EQ(cgroup_history_set(h, 11, 10, a), 0);
        ASSERT_STR_EQ(at(h, 11, 10), "-ERANGE");
        /* The same time twice: the last word holds. */
        ASSERT_INT_EQ(cgroup_history_set(h, 10, 100, a), 0);
        ASSERT_STR_EQ(at(h, 10, 100), "/a");
        ASSERT_INT_EQ(cgroup_history_paths(h), 3);
        /* The bound: a third task, then none. */
        ASSERT_INT_EQ(cgroup_history_set(h, 12, 0, b), 0);
        ASSERT_INT_EQ(cgroup_history_set(h, 13, 0, b), -ENOSPC);
        /* Exits: forgotten only once before the time expire() is given, and then room is made. */
        cgroup_history_exit(h, 11, 600);
        cgroup_history_exit(h, 12, 700);
        cgroup_history_expire(h, 650);
        ASSERT_STR_EQ(at(h, 11, 600), "-ENOENT");
        ASSERT_STR_EQ(at(h, 12, 700), "/b");
        ASSERT_INT_EQ(cgroup_history_tasks(h), 2);
        /* /c was only 11's: gone with it. */
        ASSERT_INT_EQ(cgroup_history_paths(h), 2);
        ASSERT_INT_EQ(cgroup_history_set(h, 13, 0, b), 0);
        /* A pid given to another task while the exit waits: alive again, its old steps kept for
         * the last records of the task before. */
        cgroup_history_exit(h, 10, 800);
        ASSERT_INT_EQ(cgroup_history_set(h, 10, 900, b), 0);
        cgroup_history_expire(h, 1000);
        ASSERT_STR_EQ(at(h, 10, 850), "/a");
        ASSERT_STR_EQ(at(h, 10, 900), "/b");
        cgroup_history_free(h);
}

/* Many tasks: the table grows, and removals (which move entries back along their probe) lose none. */
static void test_history_many(void) {
        CgroupHistory *h;
        uint32_t a, b;

        ASSERT_INT_EQ(cgroup_history_new(100000, &h), 0);
        a = path(h, "/a");
        for (int32_t pid = 1; pid <= 20000; pid++)
                ASSERT_INT_EQ(cgroup_history_set(h, pid, 0, a), 0);
        b = path(h, "/b");
        for (int32_t pid = 1; pid <= 20000; pid += 2) {
                ASSERT_INT_EQ(cgroup_history_set(h, pid + 1, 10, b), 0);
                cgroup_history_exit(h, pid, 5);
        }
        cgroup_history_expire(h, 6);
        ASSERT_INT_EQ(cgroup_history_tasks(h), 10000);
        for (int32_t pid = 1; pid <= 20000; pid++)
                ASSERT_STR_EQ(at(h, pid, 10), pid % 2 ? "-ENOENT" : "/b");
        cgroup_history_free(h);
}

int main(void) {
        test_valid();
        test_subtree();
        test_v2_line();
        test_unit();
        test_ids();
        test_join_leave();
        test_history();
        test_history_many();
        return 0;
}
