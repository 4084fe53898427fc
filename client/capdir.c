/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "capdir.h"
#include "util.h"

#define CAPDIR_TRIES 100

int capdir_open(const char *output, int *ret_dirfd, char **ret_name) {
        const char *slash = strrchr(output, '/'), *name = slash ? slash + 1 : output;
        _cleanup_free_ char *dir = NULL, *copy = NULL;
        int fd;

        if (!*name || streq(name, ".") || streq(name, ".."))
                return -EISDIR;
        if (!slash)
                dir = strdup(".");
        else if (slash == output)
                dir = strdup("/");
        else
                dir = strndup(output, (size_t) (slash - output));
        copy = strdup(name);
        if (!dir || !copy)
                return -ENOMEM;
        /* The directory's own path may hold links: it is the user's to name. */
        fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0)
                return negative_errno();
        *ret_dirfd = fd;
        *ret_name = TAKE_PTR(copy);
        return 0;
}

int capdir_create(int dirfd, const char *name, int flags) {
        /* O_EXCL fails on any name that exists, a dangling link included: nothing is truncated or
         * written through. The mode is the file's whatever the umask allows beyond it. */
        int fd = openat(dirfd, name, flags | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);

        return fd < 0 ? negative_errno() : fd;
}

/* Six characters of [a-zA-Z0-9] that nobody can guess in advance. */
static void random_suffix(char out[static 7]) {
        static const char chars[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
        unsigned char bytes[6];

        if (getrandom(bytes, sizeof(bytes), GRND_NONBLOCK) != (ssize_t) sizeof(bytes)) {
                struct timespec ts;
                unsigned long long v;

                clock_gettime(CLOCK_MONOTONIC, &ts);
                v = (unsigned long long) ts.tv_nsec * 2654435761ULL ^ (unsigned long long) getpid() << 20;
                for (size_t i = 0; i < sizeof(bytes); i++)
                        bytes[i] = (unsigned char) (v >> (8 * i));
        }
        for (size_t i = 0; i < sizeof(bytes); i++)
                out[i] = chars[bytes[i] % (sizeof(chars) - 1)];
        out[6] = 0;
}

/* Tries names PREFIX + random until make() does not find one taken. */
static int make_unique(int dirfd, const char *prefix, int flags, int (*make)(int, const char *, int),
                       char **ret_name) {
        size_t len = strlen(prefix);
        _cleanup_free_ char *name = malloc(len + 7);

        if (!name)
                return -ENOMEM;
        memcpy(name, prefix, len);
        for (unsigned i = 0; i < CAPDIR_TRIES; i++) {
                int r;

                random_suffix(name + len);
                r = make(dirfd, name, flags);
                if (r == -EEXIST)
                        continue;
                if (r >= 0)
                        *ret_name = TAKE_PTR(name);
                return r;
        }
        return -EEXIST;
}

static int make_dir(int dirfd, const char *name, int flags) {
        int fd;

        (void) flags;
        if (mkdirat(dirfd, name, 0700) < 0)
                return negative_errno();
        /* Just made, 0700: nobody else could have put anything else there since. */
        fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0) {
                int r = negative_errno();
                (void) unlinkat(dirfd, name, AT_REMOVEDIR);
                return r == -EEXIST ? -EIO : r;
        }
        return fd;
}

int capdir_mkdtemp(int dirfd, const char *prefix, char **ret_name, int *ret_fd) {
        int fd = make_unique(dirfd, prefix, 0, make_dir, ret_name);

        if (fd < 0)
                return fd;
        *ret_fd = fd;
        return 0;
}

int capdir_mktemp(int dirfd, const char *prefix, int flags, char **ret_name) {
        return make_unique(dirfd, prefix, flags, capdir_create, ret_name);
}

int capdir_move(int from_dirfd, const char *from, int to_dirfd, const char *to, bool replace) {
        if (replace)
                return renameat(from_dirfd, from, to_dirfd, to) < 0 ? negative_errno() : 0;
        if (renameat2(from_dirfd, from, to_dirfd, to, RENAME_NOREPLACE) == 0)
                return 0;
        if (errno != EINVAL && errno != ENOSYS)
                return negative_errno();
        /* A file system without RENAME_NOREPLACE: a hard link never replaces a name either. */
        if (linkat(from_dirfd, from, to_dirfd, to, 0) < 0)
                return negative_errno();
        (void) unlinkat(from_dirfd, from, 0);
        return 0;
}

int capdir_remove_file(int dirfd, const char *name, const struct stat *st) {
        struct stat now;

        /* POSIX has no unlink of an fd: the name is checked right before, as close as it gets. */
        if (fstatat(dirfd, name, &now, AT_SYMLINK_NOFOLLOW) < 0)
                return negative_errno();
        if (!S_ISREG(now.st_mode) || now.st_dev != st->st_dev || now.st_ino != st->st_ino)
                return -ESTALE;
        return unlinkat(dirfd, name, 0) < 0 ? negative_errno() : 0;
}

/* The directory name in at as a DIR, never through a link: NULL with errno set. */
static DIR *open_dir(int at, const char *name) {
        int fd = openat(at, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        DIR *d;

        if (fd < 0)
                return NULL;
        d = fdopendir(fd);
        if (!d)
                safe_close(fd);
        return d;
}

int capdir_remove_tree(int at, const char *name) {
        DIR *d = open_dir(at, name);
        struct dirent *de;

        /* A file, or a link (ELOOP, or ENOTDIR for a link to a file): the name alone goes. */
        if (!d && (errno == ENOTDIR || errno == ELOOP))
                return unlinkat(at, name, 0) < 0 ? negative_errno() : 0;
        if (!d)
                return negative_errno();
        while ((de = readdir(d))) {
                if (streq(de->d_name, ".") || streq(de->d_name, ".."))
                        continue;
                if (de->d_type == DT_DIR || de->d_type == DT_UNKNOWN)
                        (void) capdir_remove_tree(dirfd(d), de->d_name);
                else
                        (void) unlinkat(dirfd(d), de->d_name, 0);
        }
        closedir(d);
        return unlinkat(at, name, AT_REMOVEDIR) < 0 ? negative_errno() : 0;
}

int capdir_find_rotated(int at, const char *stem, const char *ext, char **ret_name) {
        size_t stem_len = strlen(stem), ext_len = strlen(ext);
        DIR *d = open_dir(at, ".");
        struct dirent *de;
        int r = 0;

        if (!d)
                return negative_errno();
        while ((de = readdir(d))) {
                const char *n = de->d_name;
                size_t len = strlen(n), digits = 0;

                if (len < stem_len + 1 + 4 + ext_len || strncmp(n, stem, stem_len) != 0 ||
                    n[stem_len] != '-' || memcmp(n + len - ext_len, ext, ext_len) != 0)
                        continue;
                for (const char *p = n + stem_len + 1; p < n + len - ext_len && *p >= '0' && *p <= '9'; p++)
                        digits++;
                if (digits < 4 || stem_len + 1 + digits + ext_len != len)
                        continue;
                *ret_name = strdup(n);
                r = *ret_name ? 1 : -ENOMEM;
                break;
        }
        closedir(d);
        return r;
}
