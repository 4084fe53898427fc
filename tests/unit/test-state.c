/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The state file: pins with their owners and the filter's setter survive a save and a load; a file
 * written before pins had owners loads as root's pins.
 */

#include <stdlib.h>

#include "state.h"
#include "tpd-test.h"

static char dir[] = "/tmp/tpd-test-state-XXXXXX";

static void write_file(const char *path, const char *text) {
        FILE *f = fopen(path, "we");
        ASSERT(f);
        ASSERT(fputs(text, f) >= 0);
        ASSERT(fclose(f) == 0);
}

static void test_round_trip(const char *path) {
        uid_t uids0[] = { 0, 1001 }, uids1[] = { 1002 };
        char ev0[] = "sched:sched_switch", ev1[] = "syscalls:sys_enter_getppid", f0[] = "prev_pid > 1";
        StatePin pins[] = {
                { .event = ev0, .filter = f0, .filter_uid = 1001, .uids = uids0, .n_uids = 2 },
                { .event = ev1, .uids = uids1, .n_uids = 1 },
        };
        StatePin *got = NULL;
        size_t n = 0;

        ASSERT_INT_EQ(state_save(path, pins, 2), 0);
        ASSERT_INT_EQ(state_load(path, &got, &n), 0);
        ASSERT_INT_EQ(n, 2);
        ASSERT_STR_EQ(got[0].event, ev0);
        ASSERT_STR_EQ(got[0].filter, f0);
        ASSERT_INT_EQ(got[0].filter_uid, 1001);
        ASSERT_INT_EQ(got[0].n_uids, 2);
        ASSERT_INT_EQ(got[0].uids[0], 0);
        ASSERT_INT_EQ(got[0].uids[1], 1001);
        ASSERT_STR_EQ(got[1].event, ev1);
        ASSERT(!got[1].filter);
        ASSERT_INT_EQ(got[1].n_uids, 1);
        ASSERT_INT_EQ(got[1].uids[0], 1002);
        state_pins_free(got, n);
}

static void test_old_format(const char *path) {
        StatePin *got = NULL;
        size_t n = 0;

        /* As tpd wrote it before pins had owners. */
        write_file(path,
                   "{\"version\":1,\"pins\":[{\"event\":\"sched:sched_switch\",\"filter\":\"prev_pid > 1\"},"
                   "{\"event\":\"sched:sched_wakeup\"}]}\n");
        ASSERT_INT_EQ(state_load(path, &got, &n), 0);
        ASSERT_INT_EQ(n, 2);
        for (size_t i = 0; i < n; i++) {
                ASSERT_INT_EQ(got[i].n_uids, 1);
                ASSERT_INT_EQ(got[i].uids[0], 0);
                ASSERT_INT_EQ(got[i].filter_uid, 0);
        }
        ASSERT_STR_EQ(got[0].filter, "prev_pid > 1");
        state_pins_free(got, n);
}

static void test_bad_uids(const char *path) {
        StatePin *got = NULL;
        size_t n = 0;

        /* Values that are not uids are dropped, not turned into root. */
        write_file(path, "{\"pins\":[{\"event\":\"sched:sched_switch\",\"uids\":[-1,\"0\",5000000000,7]},"
                         "{\"event\":\"sched:sched_wakeup\",\"uids\":[]}]}\n");
        ASSERT_INT_EQ(state_load(path, &got, &n), 0);
        ASSERT_INT_EQ(n, 2);
        ASSERT_INT_EQ(got[0].n_uids, 1);
        ASSERT_INT_EQ(got[0].uids[0], 7);
        ASSERT_INT_EQ(got[1].n_uids, 0);
        state_pins_free(got, n);
}

int main(void) {
        char path[sizeof(dir) + 32];

        ASSERT(mkdtemp(dir));
        snprintf(path, sizeof(path), "%s/tpd.json", dir);
        test_round_trip(path);
        test_old_format(path);
        test_bad_uids(path);
        (void) unlink(path);
        (void) rmdir(dir);
        return 0;
}
