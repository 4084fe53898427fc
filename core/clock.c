/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <errno.h>
#include <string.h>

#include "core/clock.h"
#include "util.h"

bool trace_clock_name_is_valid(const char *name) {
        return *name && strlen(name) <= 32 &&
               strspn(name, "abcdefghijklmnopqrstuvwxyz0123456789-_") == strlen(name);
}

int trace_clock_id(const char *name, clockid_t *ret) {
        static const struct {
                const char *name;
                clockid_t id;
        } clocks[] = {
                { "boot", CLOCK_BOOTTIME },
                { "mono", CLOCK_MONOTONIC },
                { "mono_raw", CLOCK_MONOTONIC_RAW },
                { "tai", CLOCK_TAI },
        };

        for (size_t i = 0; name && i < ELEMENTSOF(clocks); i++)
                if (streq(name, clocks[i].name)) {
                        *ret = clocks[i].id;
                        return 0;
                }
        return -ENOENT;
}
