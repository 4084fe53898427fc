/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The kernel's per-CPU counters summed over the clears of the buffer. */
#include "cpustats.h"
#include "tpd-test.h"

static CpuStats sample(CpuAccount *a, uint64_t entries, uint64_t overrun, uint64_t dropped, uint64_t read,
                       bool cleared) {
        CpuStats now = { .entries = entries, .overrun = overrun, .dropped = dropped, .read = read }, ret;

        ASSERT(cpu_account_sample(a, &now, &ret) == cleared);
        ASSERT_U64_EQ(ret.entries, entries);
        return ret;
}

/* Counters that only grow are passed on as they are. */
static void test_growth(void) {
        CpuAccount a = {};
        CpuStats s;

        s = sample(&a, 10, 0, 0, 0, false);
        ASSERT_U64_EQ(s.overrun, 0);
        s = sample(&a, 5, 100, 3, 40, false);
        ASSERT_U64_EQ(s.overrun, 100);
        ASSERT_U64_EQ(s.dropped, 3);
        ASSERT_U64_EQ(s.read, 40);
        /* Entries go down as records are read: no clear. */
        s = sample(&a, 0, 100, 3, 45, false);
        ASSERT_U64_EQ(s.read, 45);
        ASSERT_U64_EQ(a.clears, 0);
}

/* A clear seen by any counter going back: the last sample closes the life before. */
static void test_seen_clear(void) {
        CpuAccount a = {};
        CpuStats s;

        (void) sample(&a, 7, 1000, 0, 500, false);
        /* Overrun past its old value but read below: still a clear. */
        s = sample(&a, 2, 1500, 0, 20, true);
        ASSERT_U64_EQ(s.overrun, 2500);
        ASSERT_U64_EQ(s.read, 520);
        ASSERT_U64_EQ(s.entries, 2);
        /* The new life goes on from there, the entries of the old one not counted as lost: they
         * may have been read before the clear. */
        s = sample(&a, 0, 1600, 0, 30, false);
        ASSERT_U64_EQ(s.overrun, 2600);
        ASSERT_U64_EQ(s.read, 530);
        /* Dropped events alone going back (overwrite off). */
        (void) sample(&a, 0, 1600, 9, 30, false);
        s = sample(&a, 0, 1600, 4, 30, true);
        ASSERT_U64_EQ(s.dropped, 13);
        ASSERT_U64_EQ(s.overrun, 4200);
        ASSERT_U64_EQ(a.clears, 2);
}

/* A clear the caller made: what the buffer held then is lost, counted as overrun. */
static void test_own_clear(void) {
        CpuAccount a = {};
        CpuStats after = { .entries = 1 }, s;

        (void) sample(&a, 12, 300, 0, 80, false);
        cpu_account_cleared(&a, &after);
        ASSERT_U64_EQ(a.clears, 1);
        s = sample(&a, 1, 0, 0, 0, false);
        ASSERT_U64_EQ(s.overrun, 312);
        ASSERT_U64_EQ(s.read, 80);
        s = sample(&a, 0, 50, 0, 7, false);
        ASSERT_U64_EQ(s.overrun, 362);
        ASSERT_U64_EQ(s.read, 87);

        /* Without a reading after the clear: the new life starts from zero. */
        cpu_account_cleared(&a, NULL);
        s = sample(&a, 0, 5, 0, 1, false);
        ASSERT_U64_EQ(s.overrun, 367);
        ASSERT_U64_EQ(s.read, 88);

        /* Before any sample: nothing to close but the count of lives. */
        a = (CpuAccount){};
        cpu_account_cleared(&a, NULL);
        s = sample(&a, 3, 4, 0, 5, false);
        ASSERT_U64_EQ(s.overrun, 4);
        ASSERT_U64_EQ(s.read, 5);
}

int main(void) {
        test_growth();
        test_seen_clear();
        test_own_clear();
        return 0;
}
