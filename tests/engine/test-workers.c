/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * DecodeWorkers=auto's choice (workers_wanted()): the loop decodes while one core's 60 % is
 * enough; beyond, as many workers as keep each at most 60 % busy, never more than there are; the
 * loop takes the decoding back only after 5 checks in a row under 25 % of a core, and fewer workers
 * likewise only after 5 checks in a row that wanted fewer. More come at once.
 */
#include "../unit/tpd-test.h"
#include "workers.h"

#define SECOND 1000000000ULL
#define PERCENT (SECOND / 100)

static void test_loop_keeps_what_it_can(void) {
        unsigned fewer = 0;

        ASSERT_INT_EQ(workers_wanted(0, 4, 0, SECOND, &fewer), 0);
        ASSERT_INT_EQ(workers_wanted(0, 4, 59 * PERCENT, SECOND, &fewer), 0);
        ASSERT_INT_EQ(workers_wanted(0, 4, 60 * PERCENT, SECOND, &fewer), 0);
        /* Past 60 % of a core: two threads at most 60 % each. */
        ASSERT_INT_EQ(workers_wanted(0, 4, 61 * PERCENT, SECOND, &fewer), 2);
        ASSERT_INT_EQ(fewer, 0);
        /* More than one core can do (the loop shares its core with the streams). */
        ASSERT_INT_EQ(workers_wanted(0, 4, 150 * PERCENT, SECOND, &fewer), 3);
        ASSERT_INT_EQ(workers_wanted(0, 2, 150 * PERCENT, SECOND, &fewer), 2);
        ASSERT_INT_EQ(workers_wanted(0, 1, 150 * PERCENT, SECOND, &fewer), 1);
        /* The interval scales the share: 0.7 s busy of 2 s is 35 %. */
        ASSERT_INT_EQ(workers_wanted(0, 4, 70 * PERCENT, 2 * SECOND, &fewer), 0);
}

static void test_more_at_once(void) {
        unsigned fewer = 3;

        ASSERT_INT_EQ(workers_wanted(1, 4, 200 * PERCENT, SECOND, &fewer), 4);
        ASSERT_INT_EQ(fewer, 0);
        ASSERT_INT_EQ(workers_wanted(2, 4, 100 * PERCENT, SECOND, &fewer), 2);
}

static void test_fewer_after_a_while(void) {
        unsigned fewer = 0;

        /* 3 workers, the load falls to one worker's 50 %: 4 checks keep 3, the fifth gives 1. */
        for (unsigned i = 1; i < WORKERS_FEWER_CHECKS; i++) {
                ASSERT_INT_EQ(workers_wanted(3, 4, 50 * PERCENT, SECOND, &fewer), 3);
                ASSERT_INT_EQ(fewer, i);
        }
        ASSERT_INT_EQ(workers_wanted(3, 4, 50 * PERCENT, SECOND, &fewer), 1);
        ASSERT_INT_EQ(fewer, 0);

        /* A busy second between resets the count. */
        ASSERT_INT_EQ(workers_wanted(1, 4, 10 * PERCENT, SECOND, &fewer), 1);
        ASSERT_INT_EQ(workers_wanted(1, 4, 10 * PERCENT, SECOND, &fewer), 1);
        ASSERT_INT_EQ(fewer, 2);
        ASSERT_INT_EQ(workers_wanted(1, 4, 55 * PERCENT, SECOND, &fewer), 1);
        ASSERT_INT_EQ(fewer, 0);

        /* Between 25 % and 60 % one worker stays: the loop takes back only what is light. */
        for (unsigned i = 0; i < 2 * WORKERS_FEWER_CHECKS; i++)
                ASSERT_INT_EQ(workers_wanted(1, 4, 30 * PERCENT, SECOND, &fewer), 1);
        for (unsigned i = 1; i < WORKERS_FEWER_CHECKS; i++)
                ASSERT_INT_EQ(workers_wanted(1, 4, 24 * PERCENT, SECOND, &fewer), 1);
        ASSERT_INT_EQ(workers_wanted(1, 4, 24 * PERCENT, SECOND, &fewer), 0);
}

static void test_no_interval(void) {
        unsigned fewer = 0;

        /* No time passed: keep what is in use. */
        ASSERT_INT_EQ(workers_wanted(2, 4, SECOND, 0, &fewer), 2);
        ASSERT_INT_EQ(workers_wanted(0, 4, SECOND, 0, &fewer), 0);
}

int main(void) {
        test_loop_keeps_what_it_can();
        test_more_at_once();
        test_fewer_after_a_while();
        test_no_interval();
        return 0;
}
