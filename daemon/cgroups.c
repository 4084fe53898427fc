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

/* Visits the directory dir_fd and the cgroups below it, down to depth levels, while visit returns
 * true. */
static bool cgroups_walk(int dir_fd, unsigned depth, bool (*visit)(int dir_fd, void *userdata),
                         void *userdata) {
        struct dirent *de;
        bool more;
        DIR *d;
        int fd;

        more = visit(dir_fd, userdata);
        if (!more || depth == 0)
                return more;
        fd = openat(dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        d = fd >= 0 ? fdopendir(fd) : NULL;
        if (!d) {
                if (fd >= 0)
                        close(fd);
                return more;
        }
        while (more && (de = readdir(d))) {
                int child;

                if (de->d_type != DT_DIR || de->d_name[0] == '.')
                        continue;
                child = openat(dirfd(d), de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                if (child < 0)
                        continue;
                more = cgroups_walk(child, depth - 1, visit, userdata);
                close(child);
        }
        closedir(d);
        return more;
}

/* The path below the mount, opened as a directory: an fd, or a negative errno. */
static int cgroups_open(const char *mount, const char *path) {
        _cleanup_free_ char *dir = NULL;
        int fd;

        if (asprintf(&dir, "%s%s", mount, path) < 0)
                return -ENOMEM;
        fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        return fd < 0 ? -errno : fd;
}

typedef struct CgroupSeed {
        Follow *f;
        unsigned *budget;
} CgroupSeed;

static bool cgroups_seed_dir(int dir_fd, void *userdata) {
        CgroupSeed *s = userdata;
        int fd = openat(dir_fd, "cgroup.threads", O_RDONLY | O_CLOEXEC);
        FILE *threads = fd >= 0 ? fdopen(fd, "re") : NULL;
        int tid;

        if (fd >= 0 && !threads)
                close(fd);
        while (threads && *s->budget > 0 && fscanf(threads, "%d", &tid) == 1)
                if (follow_add_root(s->f, tid) >= 0)
                        (*s->budget)--;
        if (threads)
                fclose(threads);
        return *s->budget > 0;
}

void cgroups_seed(const char *mount, const char *path, Follow *f, unsigned *budget) {
        CgroupSeed seed = { .f = f, .budget = budget };
        int fd = cgroups_open(mount, path);

        if (fd < 0)
                return;
        (void) cgroups_walk(fd, CGROUPS_SEED_DEPTH, cgroups_seed_dir, &seed);
        close(fd);
}

typedef struct CgroupIds {
        uint64_t *ids;
        size_t n, cap;
} CgroupIds;

static bool cgroups_ids_dir(int dir_fd, void *userdata) {
        CgroupIds *c = userdata;
        struct stat st;

        if (c->n >= CGROUPS_IDS_MAX)
                return false;
        if (fstat(dir_fd, &st) < 0)
                return true;
        if (c->n == c->cap) {
                size_t cap = c->cap ? c->cap * 2 : 16;
                uint64_t *ids = reallocarray(c->ids, cap, sizeof(uint64_t));

                if (!ids)
                        return false;
                c->ids = ids;
                c->cap = cap;
        }
        c->ids[c->n++] = (uint64_t) st.st_ino;
        return true;
}

int cgroups_subtree_ids(const char *mount, const char *path, uint64_t **ret, size_t *ret_n) {
        CgroupIds c = {};
        int fd = cgroups_open(mount, path);

        if (fd < 0)
                return fd;
        (void) cgroups_walk(fd, CGROUPS_SEED_DEPTH, cgroups_ids_dir, &c);
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
