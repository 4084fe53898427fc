/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <stdlib.h>
#include <string.h>

#include "core/cgroup.h"
#include "util.h"

bool cgroup_path_valid(const char *s) {
        size_t n = strnlen(s, CGROUP_PATH_MAX);

        if (n == 0 || n >= CGROUP_PATH_MAX || s[0] != '/')
                return false;
        if (n == 1)
                return true;
        for (size_t i = 0; i < n; i++) {
                unsigned char c = (unsigned char) s[i];
                size_t len;

                if (c < 0x20 || c == 0x7f)
                        return false;
                if (c != '/')
                        continue;
                /* The component after this '/'. */
                len = strcspn(s + i + 1, "/");
                if (len == 0 || (len == 1 && s[i + 1] == '.') ||
                    (len == 2 && s[i + 1] == '.' && s[i + 2] == '.'))
                        return false;
        }
        return true;
}

bool cgroup_in_subtree(const char *path, size_t len, const char *root) {
        size_t n = strlen(root);

        if (n == 1 && root[0] == '/')
                return len > 0 && path[0] == '/';
        return len >= n && memcmp(path, root, n) == 0 && (len == n || path[n] == '/');
}

static int id_cmp(const void *a, const void *b) {
        uint64_t x = *(const uint64_t *) a, y = *(const uint64_t *) b;

        return x < y ? -1 : x > y;
}

void cgroup_ids_sort(uint64_t *ids, size_t n) {
        if (n > 1)
                qsort(ids, n, sizeof(uint64_t), id_cmp);
}

bool cgroup_ids_contain(const uint64_t *ids, size_t n, uint64_t id) {
        return n > 0 && bsearch(&id, ids, n, sizeof(uint64_t), id_cmp) != NULL;
}

bool cgroup_v2_line(const char *text, size_t n, const char **ret, size_t *ret_len) {
        const char *p = text, *end = text + n;

        while (p < end) {
                const char *nl = memchr(p, '\n', (size_t) (end - p));
                size_t len = nl ? (size_t) (nl - p) : (size_t) (end - p);

                if (len >= 3 && memcmp(p, "0::", 3) == 0) {
                        *ret = p + 3;
                        *ret_len = len - 3;
                        return true;
                }
                p += len + 1;
        }
        return false;
}

/* The suffixes of the unit types that have a cgroup (systemd.unit(5)). */
static bool cgroup_is_unit(const char *name, size_t len) {
        static const char *const suffixes[] = {
                ".service", ".scope", ".slice", ".socket", ".mount", ".swap"
        };

        for (size_t i = 0; i < ELEMENTSOF(suffixes); i++) {
                size_t n = strlen(suffixes[i]);

                if (len > n && memcmp(name + len - n, suffixes[i], n) == 0)
                        return true;
        }
        return false;
}

size_t cgroup_unit(const char *path, size_t len, const char **ret) {
        const char *end = path + len;

        /* From the leaf up: the first component that names a unit. */
        while (end > path) {
                const char *start = end;

                while (start > path && start[-1] != '/')
                        start--;
                if (cgroup_is_unit(start, (size_t) (end - start))) {
                        *ret = start;
                        return (size_t) (end - start);
                }
                end = start > path ? start - 1 : path;
        }
        *ret = "-.slice";
        return strlen("-.slice");
}
