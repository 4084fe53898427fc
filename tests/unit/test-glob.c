/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * tpd matches event globs with its own compiled matcher (tracing-events.c), not fnmatch(): it must
 * agree with fnmatch(pattern, name, 0) on every pattern it accepts. Checked on fixed cases and on every
 * pattern of up to five symbols over an alphabet that exercises stars, sets, negation, ranges,
 * literal ']' and unterminated '[' (about a million pairs).
 */
#include <fnmatch.h>

#include "core/names.h"
#include "tpd-test.h"

static const char *const names[] = {
        "sched:sched_switch",
        "sched:sched_wakeup",
        "syscalls:sys_enter_getppid",
        "a:b",
        "ab:ba",
        "a_b:a-b",
        "b:a",
        "ftrace:print",
        "x:",
        ":x",
        "a",
        "",
        "aa:bb",
        "a]:b",
        "a[:b",
        "ba:ab",
};

static void check(const char *pattern, const char *name) {
        int r = glob_match_text(pattern, name);
        int want = fnmatch(pattern, name, 0) == 0;

        if (r == -EINVAL)
                return; /* not accepted: never compared */
        if (r != want)
                TEST_FAIL("pattern '%s' name '%s': tpd says %d, fnmatch %d", pattern, name, r, want);
}

int main(void) {
        static const char alphabet[] = "ab:*?[]!-";
        const size_t k = sizeof(alphabet) - 1;
        char pattern[8];
        size_t combos = 1, checked = 0;

        /* Fixed cases. */
        ASSERT_INT_EQ(glob_match_text("*:*", "sched:sched_switch"), 1);
        ASSERT_INT_EQ(glob_match_text("sched:*", "sched:sched_switch"), 1);
        ASSERT_INT_EQ(glob_match_text("sched:*", "schedx:a"), 0);
        ASSERT_INT_EQ(glob_match_text("*[!a]:[!b]*", "sched:sched_switch"), 1);
        ASSERT_INT_EQ(glob_match_text("s?hed:sched_[s-w]*", "sched:sched_wakeup"), 1);
        ASSERT_INT_EQ(glob_match_text("[[:alpha:]]*", "a"), -EINVAL); /* classes: not supported */
        ASSERT_INT_EQ(glob_match_text("a/b", "a/b"), -EINVAL);
        ASSERT_INT_EQ(glob_match_text("", ""), -EINVAL);

        /* Every pattern of 1 to 5 symbols. */
        for (size_t len = 1; len <= 5; len++) {
                combos *= k;
                for (size_t c = 0; c < combos; c++) {
                        size_t v = c;
                        for (size_t i = 0; i < len; i++) {
                                pattern[i] = alphabet[v % k];
                                v /= k;
                        }
                        pattern[len] = 0;
                        for (size_t j = 0; j < sizeof(names) / sizeof(names[0]); j++) {
                                check(pattern, names[j]);
                                checked++;
                        }
                }
        }
        printf("%zu pattern/name pairs agree with fnmatch\n", checked);
        return 0;
}
