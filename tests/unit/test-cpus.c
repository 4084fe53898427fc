/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The kernel's CPU lists, as in /sys/devices/system/cpu/online. */
#include "cpus.h"
#include "tpd-test.h"

static void check(const char *text, unsigned n, int count, const char *expected) {
        bool mask[16];
        char got[17] = {};
        int r = cpus_parse_list(text, mask, n);

        if (r != count)
                TEST_FAIL("'%s' (n=%u): %d, expected %d", text, n, r, count);
        for (unsigned i = 0; i < n; i++)
                got[i] = mask[i] ? '1' : '0';
        if (strcmp(got, expected) != 0)
                TEST_FAIL("'%s' (n=%u): mask %s, expected %s", text, n, got, expected);
}

int main(void) {
        bool mask[4];

        check("0-1\n", 2, 2, "11");
        check("0\n", 2, 1, "10");
        check("1\n", 2, 1, "01");
        check("\n", 2, 0, "00");
        check("", 2, 0, "00");
        check("0,2-3,5\n", 8, 4, "10110100");
        check("0-15\n", 4, 4, "1111"); /* CPUs beyond the instance's are ignored */
        check("4-7\n", 4, 0, "0000");
        check("1,1,0-1\n", 2, 2, "11"); /* counted once */
        check("0-4294967295\n", 3, 3, "111");

        check("1-0\n", 4, -EINVAL, "0000");
        check("a\n", 4, -EINVAL, "0000");
        check("0-\n", 4, -EINVAL, "0000");
        check("-1\n", 4, -EINVAL, "0000");
        check("0 1\n", 4, -EINVAL, "0000");
        check("0\n1\n", 4, -EINVAL, "0000");
        check("0-99999999999\n", 4, -EINVAL, "0000");

        ASSERT(cpus_read_list("/nonexistent/online", mask, 4) == -ENOENT);
        /* The real file, where there is one: at least one CPU runs this test. */
        if (access(CPUS_ONLINE_PATH, R_OK) == 0)
                ASSERT(cpus_read_list(CPUS_ONLINE_PATH, mask, 4) >= 1);
        return 0;
}
