/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cgroups.h"
#include "core/cgroup.h"
#include "util.h"

/* Levels of a subtree walked at most: deeper cgroups are not seeded (the set's bound holds
 * anyway). */
#define CGROUPS_SEED_DEPTH 32U

int cgroups_mount(char **ret) {
        FILE *f = fopen("/proc/self/mountinfo", "re");
        char *line = NULL;
        size_t cap = 0;
        int r = -ENOENT;

        if (!f)
                return -errno;
        /* "36 25 0:30 / /sys/fs/cgroup/unified rw,… - cgroup2 cgroup2 rw": the fifth field, where
         * the type after " - " is cgroup2. Mount points with spaces are octal-escaped. */
        while (r == -ENOENT && getline(&line, &cap, f) > 0) {
                char point[4096], type[64];
                const char *dash = strstr(line, " - ");

                if (!dash || sscanf(dash, " - %63s", type) != 1 || !streq(type, "cgroup2") ||
                    sscanf(line, "%*s %*s %*s %*s %4095s", point) != 1 || strchr(point, '\\'))
                        continue;
                *ret = strdup(point);
                r = *ret ? 0 : -ENOMEM;
        }
        free(line);
        fclose(f);
        return r;
}

static void cgroups_seed_dir(int dir_fd, unsigned depth, Follow *f, unsigned *budget) {
        int fd = openat(dir_fd, "cgroup.threads", O_RDONLY | O_CLOEXEC);
        struct dirent *de;
        DIR *d;

        if (fd >= 0) {
                FILE *threads = fdopen(fd, "re");
                int tid;

                if (!threads)
                        close(fd);
                while (threads && *budget > 0 && fscanf(threads, "%d", &tid) == 1)
                        if (follow_add_root(f, tid) >= 0)
                                (*budget)--;
                if (threads)
                        fclose(threads);
        }
        if (depth == 0 || *budget == 0)
                return;
        fd = openat(dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        d = fd >= 0 ? fdopendir(fd) : NULL;
        if (!d) {
                if (fd >= 0)
                        close(fd);
                return;
        }
        while (*budget > 0 && (de = readdir(d))) {
                int child;

                if (de->d_type != DT_DIR || de->d_name[0] == '.')
                        continue;
                child = openat(dirfd(d), de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                if (child < 0)
                        continue;
                cgroups_seed_dir(child, depth - 1, f, budget);
                close(child);
        }
        closedir(d);
}

void cgroups_seed(const char *mount, const char *path, Follow *f, unsigned *budget) {
        _cleanup_free_ char *dir = NULL;
        int fd;

        if (asprintf(&dir, "%s%s", mount, path) < 0)
                return;
        fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0)
                return;
        cgroups_seed_dir(fd, CGROUPS_SEED_DEPTH, f, budget);
        close(fd);
}

typedef struct CgroupIds {
        uint64_t *ids;
        size_t n, cap;
} CgroupIds;

static void cgroups_ids_dir(int dir_fd, unsigned depth, CgroupIds *c) {
        struct stat st;
        struct dirent *de;
        DIR *d;
        int fd;

        if (c->n >= CGROUPS_IDS_MAX || fstat(dir_fd, &st) < 0)
                return;
        if (c->n == c->cap) {
                size_t cap = c->cap ? c->cap * 2 : 16;
                uint64_t *ids = reallocarray(c->ids, cap, sizeof(uint64_t));

                if (!ids)
                        return;
                c->ids = ids;
                c->cap = cap;
        }
        c->ids[c->n++] = (uint64_t) st.st_ino;
        if (depth == 0)
                return;
        fd = openat(dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        d = fd >= 0 ? fdopendir(fd) : NULL;
        if (!d) {
                if (fd >= 0)
                        close(fd);
                return;
        }
        while (c->n < CGROUPS_IDS_MAX && (de = readdir(d))) {
                int child;

                if (de->d_type != DT_DIR || de->d_name[0] == '.')
                        continue;
                child = openat(dirfd(d), de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                if (child < 0)
                        continue;
                cgroups_ids_dir(child, depth - 1, c);
                close(child);
        }
        closedir(d);
}

int cgroups_subtree_ids(const char *mount, const char *path, uint64_t **ret, size_t *ret_n) {
        _cleanup_free_ char *dir = NULL;
        CgroupIds c = {};
        int fd;

        if (asprintf(&dir, "%s%s", mount, path) < 0)
                return -ENOMEM;
        fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        cgroups_ids_dir(fd, CGROUPS_SEED_DEPTH, &c);
        close(fd);
        cgroup_ids_sort(c.ids, c.n);
        free(*ret);
        *ret = c.ids;
        *ret_n = c.n;
        return 0;
}

bool cgroups_namespace_is_initial(void) {
        struct stat st;

        return stat("/proc/self/ns/cgroup", &st) == 0 && st.st_ino == 0xEFFFFFFBU;
}

ssize_t cgroups_of_task(pid_t pid, char *buf, size_t size) {
        char path[64], text[8192];
        const char *p;
        size_t len;
        ssize_t n;
        int fd;

        (void) snprintf(path, sizeof(path), "/proc/%d/cgroup", (int) pid);
        fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return errno == ENOENT ? -ESRCH : -errno;
        n = read(fd, text, sizeof(text));
        close(fd);
        if (n < 0)
                return -errno;
        if (!cgroup_v2_line(text, (size_t) n, &p, &len))
                return -ENOENT;
        if (len >= size)
                return -ENAMETOOLONG;
        memcpy(buf, p, len);
        buf[len] = '\0';
        return (ssize_t) len;
}
