/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>

#include "cpus.h"
#include "util.h"

static int parse_cpu(const char **p, unsigned long *ret) {
        char *end;
        unsigned long v;

        if (**p < '0' || **p > '9')
                return -EINVAL;
        errno = 0;
        v = strtoul(*p, &end, 10);
        if (errno != 0 || v > UINT32_MAX)
                return -EINVAL;
        *p = end;
        *ret = v;
        return 0;
}

int cpus_parse_list(const char *text, bool *mask, unsigned n) {
        const char *p = text;
        int count = 0;

        for (unsigned i = 0; i < n; i++)
                mask[i] = false;

        /* An empty list (only a newline) is valid: the "offline" file of a machine with all CPUs up. */
        while (*p && *p != '\n') {
                unsigned long first, last;

                if (parse_cpu(&p, &first) < 0)
                        goto invalid;
                last = first;
                if (*p == '-') {
                        p++;
                        if (parse_cpu(&p, &last) < 0 || last < first)
                                goto invalid;
                }
                for (unsigned long cpu = first; cpu <= last && cpu < n; cpu++)
                        if (!mask[cpu]) {
                                mask[cpu] = true;
                                count++;
                        }
                if (*p == ',')
                        p++;
                else if (*p && *p != '\n')
                        goto invalid;
        }
        if (*p == '\n' && p[1])
                goto invalid;
        return count;

invalid:
        for (unsigned i = 0; i < n; i++)
                mask[i] = false;
        return -EINVAL;
}

int cpus_read_list(const char *path, bool *mask, unsigned n) {
        _cleanup_close_ int fd = -1;
        char buf[4096];
        size_t len = 0;

        fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return negative_errno();
        /* sysfs hands out the whole list in one read; loop anyway, a short read is allowed. */
        for (;;) {
                ssize_t k = read(fd, buf + len, sizeof(buf) - 1 - len);
                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        return negative_errno();
                }
                if (k == 0)
                        break;
                len += (size_t) k;
                if (len == sizeof(buf) - 1)
                        return -E2BIG;
        }
        buf[len] = 0;
        return cpus_parse_list(buf, mask, n);
}
