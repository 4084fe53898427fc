/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The limit settings of [Clients] (MaxGlobEvents=, MaxCallEvents=, MaxEnabledEvents=) and Clock=:
 * values in range are taken, a later assignment wins, anything else is refused with file and line.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "tpd-test.h"

static char dir[] = "/tmp/tpd-test-config-limits-XXXXXX";

static int parse(const char *text, Config *c) {
        char path[512];
        FILE *f;
        int r;

        snprintf(path, sizeof(path), "%s/tpd.conf", dir);
        f = fopen(path, "we");
        ASSERT(f);
        ASSERT(fputs(text, f) >= 0);
        ASSERT(fclose(f) == 0);
        ASSERT_INT_EQ(config_init(c), 0);
        r = config_parse_file(path, c);
        (void) unlink(path);
        return r;
}

int main(void) {
        static const char *const bad[] = {
                "[Clients]\nMaxGlobEvents=0\n", "[Clients]\nMaxGlobEvents=-1\n",
                "[Clients]\nMaxGlobEvents=x\n", "[Clients]\nMaxCallEvents=4097\n",
                "[Clients]\nMaxCallEvents=\n",  "[Clients]\nMaxEnabledEvents=65537\n",
                "[Tracing]\nClock=\n",          "[Tracing]\nClock=Boot\n",
                "[Tracing]\nClock=b o o t\n",   "[Tracing]\nClock=../boot\n",
        };
        Config c;

        ASSERT(mkdtemp(dir));

        ASSERT_INT_EQ(parse("[Clients]\nMaxGlobEvents=10\nMaxCallEvents=20\nMaxEnabledEvents=0\n", &c), 0);
        ASSERT_INT_EQ(c.max_glob_events, 10);
        ASSERT_INT_EQ(c.max_call_events, 20);
        ASSERT_INT_EQ(c.max_enabled_events, 0);
        config_done(&c);

        ASSERT_INT_EQ(parse("[Clients]\nMaxGlobEvents=10\nMaxGlobEvents=3000\n", &c), 0);
        ASSERT_INT_EQ(c.max_glob_events, 3000);
        ASSERT_INT_EQ(c.max_call_events, 32);
        ASSERT_INT_EQ(c.max_enabled_events, 1024);
        config_done(&c);

        ASSERT_INT_EQ(parse("[Tracing]\nClock=x86-tsc\n", &c), 0);
        ASSERT(c.clock && strcmp(c.clock, "x86-tsc") == 0);
        config_done(&c);

        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                int r = parse(bad[i], &c);
                if (r != -EINVAL)
                        TEST_FAIL("'%s' gave %d, expected -EINVAL", bad[i], r);
                config_done(&c);
        }

        ASSERT(rmdir(dir) == 0);
        return 0;
}
