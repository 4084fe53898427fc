/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include "client.h"
#include "log.h"
#include "manager.h"
#include "server.h"

struct Server {
        Manager *manager;
        int fd;
        char *path; /* set when we bound it, and so must unlink it */
        sd_event_source *source;
};

Server *server_free(Server *s) {
        if (!s)
                return NULL;
        sd_event_source_disable_unref(s->source);
        safe_close(s->fd);
        if (s->path)
                (void) unlink(s->path);
        free(s->path);
        free(s);
        return NULL;
}

DEFINE_TRIVIAL_CLEANUP_FUNC(Server *, server_free);

static bool in_group(uid_t uid, gid_t primary, gid_t group) {
        struct passwd *pw;
        gid_t groups[256];
        int n = (int) ELEMENTSOF(groups);

        if (primary == group)
                return true;
        pw = getpwuid(uid);
        if (!pw || getgrouplist(pw->pw_name, primary, groups, &n) < 0)
                return false;
        for (int i = 0; i < n; i++)
                if (groups[i] == group)
                        return true;
        return false;
}

/* The socket's mode keeps others out already; this check still holds when the socket was made
 * by someone else or its mode was changed. */
static bool peer_allowed(Manager *m, const struct ucred *cred) {
        if (cred->uid == 0 || cred->uid == geteuid())
                return true;
        return m->access_gid_valid && in_group(cred->uid, cred->gid, m->access_gid);
}

static int server_on_accept(sd_event_source *source, int fd, uint32_t revents, void *userdata) {
        Server *s = userdata;
        Manager *m = s->manager;
        struct ucred cred;
        socklen_t len = sizeof(cred);
        Client *c;
        int cfd, r;

        cfd = accept4(s->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (cfd < 0) {
                if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED)
                        log_warning_errno(negative_errno(), "Failed to accept a connection: %m");
                return 0;
        }

        if (getsockopt(cfd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0) {
                log_warning_errno(negative_errno(), "Failed to get peer credentials: %m");
                safe_close(cfd);
                return 0;
        }

        if (m->config.max_clients > 0 && m->n_clients >= m->config.max_clients * 2) {
                /* Streams are limited with a clear error in the API; this bounds idle
                 * connections too. */
                log_warning("Refusing connection of pid %d: %u clients connected.", (int) cred.pid, m->n_clients);
                safe_close(cfd);
                return 0;
        }

        r = client_new(m, cfd, &cred, &c);
        if (r < 0) {
                log_warning_errno(r, "Failed to set up a client: %m");
                return 0;
        }
        if (!peer_allowed(m, &cred)) {
                log_notice("Denying access to uid %u (pid %d).", (unsigned) cred.uid, (int) cred.pid);
                c->denied = true;
        }
        return 0;
}

static int bind_path(const char *path) {
        _cleanup_close_ int fd = -1;
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        _cleanup_free_ char *dir = NULL;
        char *slash;

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
        }

        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return negative_errno();

        /* A socket file left by a dead tpd is stale; one that accepts connections is not ours to take. */
        if (connect(fd, (struct sockaddr *) &sa, sizeof(sa)) == 0)
                return log_error_errno(-EADDRINUSE, "Another tpd is listening on '%s'.", path);
        (void) unlink(path);

        if (bind(fd, (struct sockaddr *) &sa, sizeof(sa)) < 0)
                return log_error_errno(negative_errno(), "Failed to bind '%s': %m", path);
        if (chmod(path, 0660) < 0)
                return log_error_errno(negative_errno(), "Failed to set the mode of '%s': %m", path);
        if (listen(fd, SOMAXCONN) < 0)
                return log_error_errno(negative_errno(), "Failed to listen on '%s': %m", path);
        return TAKE_FD(fd);
}

int server_new(Manager *m, int fd, const char *path, Server **ret) {
        _cleanup_(server_freep) Server *s = NULL;
        int r;

        s = calloc(1, sizeof(Server));
        if (!s) {
                safe_close(fd);
                return -ENOMEM;
        }
        s->manager = m;
        s->fd = fd;

        if (s->fd < 0) {
                s->fd = bind_path(path);
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

        r = sd_event_add_io(m->event, &s->source, s->fd, EPOLLIN, server_on_accept, s);
        if (r < 0)
                return r;
        (void) sd_event_source_set_description(s->source, "server");

        *ret = TAKE_PTR(s);
        return 0;
}
