/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/fsuid.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include "access.h"
#include "log.h"
#include "ratelimit.h"
#include "server.h"
#include "util.h"

#ifndef SO_PEERGROUPS
#define SO_PEERGROUPS 59
#endif

/* After EMFILE/ENFILE on accept, the listening socket rests this long: it stays readable while the
 * connection waits in the backlog, and accepting again at once would spin. */
#define SERVER_ACCEPT_RETRY_USEC (100 * 1000ULL)

struct Server {
        sd_event *event;
        ServerAcceptHandler on_accept;
        void *userdata;
        int fd;
        char *path; /* set when we bound it, and so must unlink it */
        dev_t dev;  /* of the socket file we bound: only that one is unlinked at exit */
        ino_t ino;
        sd_event_source *source;
        sd_event_source *retry; /* re-enables source after a lack of file descriptors */
        RateLimit log_limit;
};

Server *server_free(Server *s) {
        struct stat st;

        if (!s)
                return NULL;
        sd_event_source_disable_unref(s->source);
        sd_event_source_disable_unref(s->retry);
        safe_close(s->fd);
        /* Someone may have put another file at the path meanwhile: remove only our socket. */
        if (s->path && lstat(s->path, &st) == 0 && S_ISSOCK(st.st_mode) && st.st_dev == s->dev &&
            st.st_ino == s->ino)
                (void) unlink(s->path);
        free(s->path);
        free(s);
        return NULL;
}

DEFINE_TRIVIAL_CLEANUP_FUNC(Server *, server_free);

/* The peer's supplementary groups as the kernel recorded them at connect(): no user database
 * look-up (NSS can block, and the database may disagree with what the process holds). */
static int read_peer_groups(int fd, gid_t **ret, size_t *ret_n) {
        socklen_t len = 64 * sizeof(gid_t);

        for (;;) {
                _cleanup_free_ gid_t *groups = malloc(len);
                socklen_t n = len;

                if (!groups)
                        return -ENOMEM;
                if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups, &n) == 0) {
                        *ret = TAKE_PTR(groups);
                        *ret_n = n / sizeof(gid_t);
                        return 0;
                }
                /* ERANGE: n says how much room the list needs. */
                if (errno != ERANGE || n <= len)
                        return negative_errno();
                len = n;
        }
}

static int server_on_retry(sd_event_source *source, uint64_t usec, void *userdata) {
        Server *s = userdata;

        (void) sd_event_source_set_enabled(s->source, SD_EVENT_ON);
        return 0;
}

static void server_pause(Server *s) {
        int r;

        r = sd_event_source_set_enabled(s->source, SD_EVENT_OFF);
        if (r >= 0) {
                if (s->retry)
                        r = sd_event_source_set_time_relative(s->retry, SERVER_ACCEPT_RETRY_USEC);
                else
                        r = sd_event_add_time_relative(s->event, &s->retry, CLOCK_MONOTONIC,
                                                       SERVER_ACCEPT_RETRY_USEC, 0, server_on_retry, s);
        }
        if (r >= 0)
                r = sd_event_source_set_enabled(s->retry, SD_EVENT_ONESHOT);
        if (r < 0)
                /* Without the timer, keep accepting: better busy than deaf. */
                (void) sd_event_source_set_enabled(s->source, SD_EVENT_ON);
}

static int server_on_accept(sd_event_source *source, int fd, uint32_t revents, void *userdata) {
        Server *s = userdata;
        _cleanup_free_ gid_t *groups = NULL;
        struct ucred cred;
        socklen_t len = sizeof(cred);
        size_t n_groups = 0;
        int cfd, r;

        cfd = accept4(s->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (cfd < 0) {
                r = negative_errno();
                if (r == -EAGAIN || r == -EINTR || r == -ECONNABORTED)
                        return 0;
                if (r == -EMFILE || r == -ENFILE || r == -ENOBUFS || r == -ENOMEM) {
                        if (ratelimit_below(&s->log_limit))
                                log_warning_errno(r, "Failed to accept a connection, pausing 100 ms: %m");
                        server_pause(s);
                        return 0;
                }
                if (ratelimit_below(&s->log_limit))
                        log_warning_errno(r, "Failed to accept a connection: %m");
                return 0;
        }

        if (getsockopt(cfd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0) {
                if (ratelimit_below(&s->log_limit))
                        log_warning_errno(negative_errno(), "Failed to get peer credentials: %m");
                safe_close(cfd);
                return 0;
        }
        if (!access_uid_is_root(cred.uid)) {
                r = read_peer_groups(cfd, &groups, &n_groups);
                if (r < 0 && ratelimit_below(&s->log_limit))
                        log_warning_errno(r,
                                          "Failed to get the groups of pid %d, checking its primary group "
                                          "only: %m",
                                          (int) cred.pid);
        }
        s->on_accept(cfd, &cred, groups, n_groups, s->userdata);
        return 0;
}

/* Removes what is at path if it is a socket nobody answers on: a tpd that died left it. Anything
 * else (a live socket, a file, a symlink) is not ours to remove. */
static int remove_stale_socket(const char *path, const struct sockaddr_un *sa) {
        _cleanup_close_ int fd = -1;
        struct stat st;

        if (lstat(path, &st) < 0)
                return errno == ENOENT ? 0
                                       : log_error_errno(negative_errno(), "Failed to check '%s': %m", path);
        if (!S_ISSOCK(st.st_mode))
                return log_error_errno(-EEXIST, "'%s' exists and is not a socket; not removing it.", path);

        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return negative_errno();
        if (connect(fd, (const struct sockaddr *) sa, sizeof(*sa)) == 0 || errno == EAGAIN)
                return log_error_errno(-EADDRINUSE, "Another tpd is listening on '%s'.", path);
        if (errno != ECONNREFUSED)
                return log_error_errno(negative_errno(), "Failed to check whether '%s' is in use: %m", path);
        if (unlink(path) < 0 && errno != ENOENT)
                return log_error_errno(negative_errno(), "Failed to remove the stale socket '%s': %m", path);
        return 0;
}

/* Binds path so that the socket is 0660 root:GROUP from the moment it exists: the mode comes from
 * the umask and the group from the file-system gid in effect at bind(), so there is no window in
 * which others could connect and no chmod/chown by path that a swapped file could redirect. (On
 * Linux fchmod on the socket's fd changes the socket inode of sockfs, not the file.) The parent
 * directory should be writable by root only (as /run/tpd is): whoever can write to it can replace
 * the file, whatever tpd does. */
static int bind_path(const char *path, gid_t gid, dev_t *ret_dev, ino_t *ret_ino) {
        _cleanup_close_ int fd = -1;
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        _cleanup_free_ char *dir = NULL;
        struct stat st;
        char *slash;
        mode_t old_umask;
        int r, old_fsgid = -1;

        if (strlen(path) >= sizeof(sa.sun_path))
                return log_error_errno(-ENAMETOOLONG, "Socket path '%s' is too long.", path);
        strcpy(sa.sun_path, path);

        dir = strdup(path);
        if (!dir)
                return -ENOMEM;
        slash = strrchr(dir, '/');
        if (slash && slash != dir) {
                *slash = 0;
                if (mkdir(dir, 0755) < 0 && errno != EEXIST)
                        return log_error_errno(negative_errno(), "Failed to create '%s': %m", dir);
                if (stat(dir, &st) == 0 && (st.st_mode & (S_IWGRP | S_IWOTH)) && !(st.st_mode & S_ISVTX))
                        log_warning("'%s' is writable by others: they could replace tpd's socket.", dir);
        }

        r = remove_stale_socket(path, &sa);
        if (r < 0)
                return r;

        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return negative_errno();

        if (gid != (gid_t) -1) {
                old_fsgid = setfsgid(gid);
                if ((gid_t) setfsgid((gid_t) -1) != gid)
                        log_warning("Cannot create '%s' with group %u: only root may connect.", path,
                                    (unsigned) gid);
        }
        old_umask = umask(0117);
        r = bind(fd, (struct sockaddr *) &sa, sizeof(sa)) < 0 ? negative_errno() : 0;
        umask(old_umask);
        if (old_fsgid >= 0)
                (void) setfsgid((gid_t) old_fsgid);
        if (r < 0)
                return log_error_errno(r, "Failed to bind '%s': %m", path);

        if (lstat(path, &st) < 0)
                return log_error_errno(negative_errno(), "Failed to check '%s': %m", path);
        if (listen(fd, SOMAXCONN) < 0)
                return log_error_errno(negative_errno(), "Failed to listen on '%s': %m", path);
        *ret_dev = st.st_dev;
        *ret_ino = st.st_ino;
        return TAKE_FD(fd);
}

int server_new(sd_event *event, int fd, const char *path, gid_t gid, ServerAcceptHandler on_accept,
               void *userdata, Server **ret) {
        _cleanup_(server_freep) Server *s = NULL;
        int r;

        s = calloc(1, sizeof(Server));
        if (!s) {
                safe_close(fd);
                return -ENOMEM;
        }
        s->event = event;
        s->on_accept = on_accept;
        s->userdata = userdata;
        s->fd = fd;
        /* Peer-triggered warnings: a few per 10 s. */
        s->log_limit = RATELIMIT_INIT(10 * 1000 * 1000ULL, 5);

        if (s->fd < 0) {
                s->fd = bind_path(path, gid, &s->dev, &s->ino);
                if (s->fd < 0)
                        return s->fd;
                s->path = strdup(path);
                if (!s->path)
                        return -ENOMEM;
        } else {
                /* Activated sockets may come blocking; accept must never block the loop. */
                int flags = fcntl(s->fd, F_GETFL);
                if (flags < 0 || fcntl(s->fd, F_SETFL, flags | O_NONBLOCK) < 0)
                        return negative_errno();
        }

        r = sd_event_add_io(event, &s->source, s->fd, EPOLLIN, server_on_accept, s);
        if (r < 0)
                return r;
        (void) sd_event_source_set_description(s->source, "server");

        *ret = TAKE_PTR(s);
        return 0;
}
