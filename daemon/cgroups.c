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

/* A walk of a subtree: path (a buffer of CGROUP_PATH_MAX) holds the path of the directory
 * visited. */
typedef bool (*CgroupsVisitFn)(int dir_fd, const char *path, size_t len, void *userdata);

/* Visits the directory dir_fd, whose path is the len bytes of path, and the cgroups below it, down
 * to depth levels, while visit returns true. */
static bool cgroups_walk(int dir_fd, char *path, size_t len, unsigned depth, CgroupsVisitFn visit,
                         void *userdata) {
        struct dirent *de;
        bool more;
        DIR *d;
        int fd;

        path[len] = '\0';
        more = visit(dir_fd, path, len, userdata);
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
                /* "/name" below the root, "/a/name" below "/a". */
                size_t sep = len > 1, name = strlen(de->d_name);
                int child;

                if (de->d_type != DT_DIR || de->d_name[0] == '.' || len + sep + name >= CGROUP_PATH_MAX)
                        continue;
                child = openat(dirfd(d), de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                if (child < 0)
                        continue;
                if (sep)
                        path[len] = '/';
                memcpy(path + len + sep, de->d_name, name);
                more = cgroups_walk(child, path, len + sep + name, depth - 1, visit, userdata);
                path[len] = '\0';
                close(child);
        }
        closedir(d);
        return more;
}

/* Walks the subtree at path (valid, cgroup_path_valid()) below the mount. */
static void cgroups_walk_subtree(const char *mount, const char *path, CgroupsVisitFn visit, void *userdata) {
        _cleanup_free_ char *dir = NULL, *buf = NULL;
        size_t len = strlen(path);
        int fd;

        if (len >= CGROUP_PATH_MAX || asprintf(&dir, "%s%s", mount, path) < 0)
                return;
        buf = malloc(CGROUP_PATH_MAX);
        fd = buf ? open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
        if (fd < 0)
                return;
        memcpy(buf, path, len);
        (void) cgroups_walk(fd, buf, len, CGROUPS_SEED_DEPTH, visit, userdata);
        close(fd);
}

typedef struct CgroupThreads {
        CgroupsThreadFn fn;
        void *userdata;
        unsigned *budget;
} CgroupThreads;

static bool cgroups_threads_dir(int dir_fd, const char *path, size_t len, void *userdata) {
        CgroupThreads *c = userdata;
        int fd = openat(dir_fd, "cgroup.threads", O_RDONLY | O_CLOEXEC);
        FILE *threads = fd >= 0 ? fdopen(fd, "re") : NULL;
        int tid;

        if (fd >= 0 && !threads)
                close(fd);
        while (threads && *c->budget > 0 && fscanf(threads, "%d", &tid) == 1)
                if (c->fn(c->userdata, tid, path, len))
                        (*c->budget)--;
        if (threads)
                fclose(threads);
        return *c->budget > 0;
}

void cgroups_threads(const char *mount, const char *path, CgroupsThreadFn fn, void *userdata,
                     unsigned *budget) {
        CgroupThreads c = { .fn = fn, .userdata = userdata, .budget = budget };

        if (*budget > 0)
                cgroups_walk_subtree(mount, path, cgroups_threads_dir, &c);
}

typedef struct CgroupIds {
        uint64_t *ids;
        size_t n, cap;
} CgroupIds;

static bool cgroups_ids_dir(int dir_fd, const char *path, size_t len, void *userdata) {
        CgroupIds *c = userdata;
        struct stat st;

        if (c->n >= CGROUPS_IDS_MAX)
                return false;
        if (fstat(dir_fd, &st) < 0)
                return true;
        if (ARRAY_RESERVE(c->ids, c->cap, c->n + 1) < 0)
                return false;
        c->ids[c->n++] = (uint64_t) st.st_ino;
        return true;
}

int cgroups_subtree_ids(const char *mount, const char *path, uint64_t **ret, size_t *ret_n) {
        CgroupIds c = {};

        cgroups_walk_subtree(mount, path, cgroups_ids_dir, &c);
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
