/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The pids a stream follows: roots, forks in any order of reading, pid reuse, exits, the bound. */
#include "core/follow.h"
#include "tpd-test.h"

static Follow *new_follow(size_t max) {
        Follow *f = NULL;

        ASSERT_INT_EQ(follow_new(max, &f), 0);
        return f;
}

/* A root is followed at any time; its children from their fork on, and theirs. */
static void test_tree(void) {
        Follow *f = new_follow(16);

        ASSERT_INT_EQ(follow_add_root(f, 100), 0);
        ASSERT(follow_matches(f, 100, 0));
        ASSERT(follow_matches(f, 100, UINT64_MAX - 1));
        ASSERT(!follow_matches(f, 101, 50));

        follow_fork(f, 100, 101, 1000);
        follow_fork(f, 101, 102, 2000);
        follow_fork(f, 7, 103, 2500); /* another task's child */
        ASSERT(!follow_matches(f, 101, 999));
        ASSERT(follow_matches(f, 101, 1000));
        ASSERT(follow_matches(f, 102, 2001));
        ASSERT(!follow_matches(f, 102, 1999));
        ASSERT(!follow_matches(f, 103, 3000));
        ASSERT_INT_EQ(f->live, 3);
        /* The same fork seen twice changes nothing. */
        follow_fork(f, 100, 101, 1000);
        ASSERT_INT_EQ(f->n, 3);
        follow_free(f);
}

/* A grandchild's fork handed over before its parent's is not followed: the caller sorts them. */
static void test_order(void) {
        Follow *f = new_follow(16);

        ASSERT_INT_EQ(follow_add_root(f, 1), 0);
        follow_fork(f, 2, 3, 200);
        follow_fork(f, 1, 2, 100);
        ASSERT(follow_matches(f, 2, 150));
        ASSERT(!follow_matches(f, 3, 250));
        follow_free(f);
}

/* An exit keeps the last records of the task (its switch out); a new task with the pid is
 * another's, unless a followed parent forked it. */
static void test_exit_and_reuse(void) {
        Follow *f = new_follow(16);

        ASSERT_INT_EQ(follow_add_root(f, 10), 0);
        follow_fork(f, 10, 11, 100);
        follow_exit(f, 11, 500);
        ASSERT_INT_EQ(f->live, 1);
        ASSERT(follow_matches(f, 11, 501)); /* the switch out after the exit */
        /* Pid 11 given to a child of an unfollowed task. */
        follow_fork(f, 99, 11, 900);
        ASSERT(follow_matches(f, 11, 899));
        ASSERT(!follow_matches(f, 11, 900));
        ASSERT(!follow_matches(f, 11, 5000));
        /* And again, to a child of the root: followed from then on. */
        follow_fork(f, 10, 11, 7000);
        ASSERT(!follow_matches(f, 11, 6999));
        ASSERT(follow_matches(f, 11, 7000));
        ASSERT_INT_EQ(f->live, 2);
        follow_free(f);
}

/* Forks and exits read late from before the following began are the past: the root's own fork
 * does not end its entry, and a child seen then comes from /proc or not at all. */
static void test_start(void) {
        Follow *f = new_follow(16);

        ASSERT_INT_EQ(follow_add_root(f, 50), 0);
        f->start = 5000;
        follow_fork(f, 1, 50, 4000); /* the root's birth */
        follow_fork(f, 50, 51, 4500);
        follow_exit(f, 50, 4900);
        ASSERT(follow_matches(f, 50, 6000));
        ASSERT(!follow_matches(f, 51, 6000));
        ASSERT_INT_EQ(f->live, 1);
        /* From the start on, as ever. */
        follow_fork(f, 50, 51, 5000);
        ASSERT(follow_matches(f, 51, 5000));
        follow_fork(f, 1, 50, 8000); /* the root's pid given to another task */
        ASSERT(!follow_matches(f, 50, 8000));
        follow_free(f);
}

/* At the bound, exited entries make room, oldest exit first; without any, a child is refused. */
static void test_bound(void) {
        Follow *f = new_follow(3);

        ASSERT_INT_EQ(follow_add_root(f, 1), 0);
        follow_fork(f, 1, 2, 10);
        follow_fork(f, 1, 3, 20);
        follow_fork(f, 1, 4, 30);
        ASSERT_U64_EQ(f->refused, 1);
        ASSERT(!follow_matches(f, 4, 40));
        follow_exit(f, 3, 50);
        follow_exit(f, 2, 60);
        follow_fork(f, 1, 5, 70);
        ASSERT_U64_EQ(f->refused, 1);
        ASSERT(follow_matches(f, 5, 70));
        ASSERT(!follow_matches(f, 3, 55)); /* dropped: its exit was the oldest */
        ASSERT(follow_matches(f, 2, 65));
        ASSERT_INT_EQ(f->n, 3);
        /* Roots obey the bound too: one more takes the last exited entry's place, then none. */
        ASSERT_INT_EQ(follow_add_root(f, 9), 0);
        ASSERT(!follow_matches(f, 2, 65));
        ASSERT_INT_EQ(follow_add_root(f, 8), -ENOSPC);
        follow_free(f);
}

int main(void) {
        test_tree();
        test_order();
        test_exit_and_reuse();
        test_start();
        test_bound();
        return 0;
}
