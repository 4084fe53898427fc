/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Cgroup paths, and a follow set whose tasks come and go as they move between cgroups. */
#include <string.h>

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

int main(void) {
        test_valid();
        test_subtree();
        test_v2_line();
        test_ids();
        test_join_leave();
        return 0;
}
