/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <grp.h>
#include <poll.h>
#include <pwd.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include "connection.h"
#include "message.h"
#include "suggest.h"
#include "tpd-protocol.h"

/*
 * TPD_MESSAGE_MAX bounds what tpd accepts; replies can be larger (an unfiltered ListEvents names all
 * ~2300 events of a kernel). This cap only stops a runaway peer from eating our memory.
 */
#define CONNECTION_REPLY_MAX (16U * 1024U * 1024U)
#define CONNECTION_READ_SIZE (64U * 1024U)

/* tpd's default access group (AccessGroup=), for a hint when the socket does not name another. */
#define CONNECTION_GROUP_DEFAULT "tracing"

static void connection_close_fds(Connection *c) {
        for (size_t i = 0; i < c->n_fds; i++)
                safe_close(c->fds[i]);
        c->n_fds = 0;
}

void connection_done(Connection *c) {
        c->fd = safe_close(c->fd);
        varlink_buffer_done(&c->in);
        connection_close_fds(c);
}

int connection_take_fd(Connection *c, size_t index) {
        if (index >= c->n_fds || c->fds[index] < 0)
                return -ENXIO;
        return TAKE_FD(c->fds[index]);
}

/* What a user refused by tpd can do: join its access group, or start a session that has it. */
static void hint_access(const char *group) {
        const struct passwd *pw = getpwuid(getuid());
        const struct group *gr = getgrnam(group);
        bool member = false;

        if (pw && gr) {
                member = pw->pw_gid == gr->gr_gid;
                for (char **m = gr->gr_mem; m && *m && !member; m++)
                        member = streq(*m, pw->pw_name);
        }
        if (member)
                log_hint("You are in the '%s' group, but this session is not: log in again (or run 'newgrp "
                         "%s').",
                         group, group);
        else
                log_hint("add yourself to the '%s' group: usermod -aG %s %s, then log in again", group,
                         group, pw ? pw->pw_name : "USER");
}

/* The access group of a socket tpd made (mode 0660, group AccessGroup=); a socket of root's group
 * (tpd found no access group) says nothing, so the default is named. */
static void hint_access_socket(const char *path) {
        const struct group *gr;
        struct stat st;

        if (stat(path, &st) >= 0 && st.st_gid != 0 && (gr = getgrgid(st.st_gid)))
                hint_access(gr->gr_name);
        else
                hint_access(CONNECTION_GROUP_DEFAULT);
}

static int connection_connect(Connection *c, const char *path) {
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        size_t l = strlen(path);

        if (l == 0 || l >= sizeof(sa.sun_path))
                return log_error_errno(-ENAMETOOLONG, "socket path '%s' is empty or longer than %zu bytes",
                                       path, sizeof(sa.sun_path) - 1);
        memcpy(sa.sun_path, path, l);

        c->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (c->fd < 0)
                return log_error_errno(-errno, "cannot create a socket: %m");
        if (connect(c->fd, (struct sockaddr *) &sa, offsetof(struct sockaddr_un, sun_path) + l + 1) < 0) {
                int r = -errno;

                log_error_errno(r, "cannot connect to tpd at '%s': %m", path);
                if (r == -EACCES || r == -EPERM)
                        hint_access_socket(path);
                else if (r == -ENOENT || r == -ECONNREFUSED)
                        log_hint("tpd is not running; start it: systemctl start tpd.socket "
                                 "(or 'tpd --socket %s'; another socket: --socket or $%s)",
                                 path, TPD_SOCKET_ENV);
                return r;
        }
        varlink_buffer_init(&c->in, CONNECTION_REPLY_MAX);
        return 0;
}

/*
 * Under socket activation the connection waits in the socket's backlog for tpd; a tpd that fails to
 * start leaves it reset or closed unanswered. Which one the client sees depends on when tpd exits:
 * while the call is being sent (EPIPE, or ECONNRESET), or after (ECONNRESET, or end of file on the
 * read). All of them are the same fault and get the same words.
 */
static int connection_closed(const Connection *c) {
        /* After replies (of a call with "more", or an earlier call), tpd stopped while it served. */
        log_error_errno(-ECONNRESET, c->replied ? "tpd closed the connection"
                                                : "tpd closed the connection without replying");
        log_hint("tpd failed to start, or stopped; see journalctl -u tpd");
        return -ECONNRESET;
}

static int connection_send(Connection *c, const char *method, json_object *params, bool upgrade) {
        _cleanup_free_ char *text = NULL;
        size_t len;
        int r;

        r = varlink_call_format(method, params, upgrade, c->more, &text, &len);
        if (r < 0)
                return log_oom();
        if (len > TPD_MESSAGE_MAX)
                return log_error_errno(-EMSGSIZE, "the call is %zu bytes long, tpd accepts at most %u", len,
                                       TPD_MESSAGE_MAX);

        for (size_t done = 0; done < len;) {
                ssize_t n = send(c->fd, text + done, len - done, MSG_NOSIGNAL);

                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0 && (errno == EPIPE || errno == ECONNRESET))
                        return connection_closed(c);
                if (n < 0)
                        return log_error_errno(-errno, "cannot send to tpd: %m");
                done += (size_t) n;
        }
        return 0;
}

/* Reads up to size bytes into p, keeping the fds that come along. They come with the reply's first
 * byte, which is read only after the previous reply was handed out: those of the reply being read.
 * Returns the bytes read, or a negative errno; -EBADMSG for more fds than one reply brings. */
static ssize_t connection_read(Connection *c, char *p, size_t size) {
        union {
                struct cmsghdr cmsg;
                char buf[CMSG_SPACE(sizeof(int) * CONNECTION_FDS_MAX)];
        } control;
        struct iovec iov = { p, size };
        struct msghdr mh = {
                .msg_iov = &iov, .msg_iovlen = 1, .msg_control = &control, .msg_controllen = sizeof(control)
        };
        size_t had = c->n_fds;
        bool extra = false;
        ssize_t n;

        n = recvmsg(c->fd, &mh, MSG_CMSG_CLOEXEC);
        if (n < 0)
                return -errno;
        for (struct cmsghdr *cmsg = CMSG_FIRSTHDR(&mh); cmsg; cmsg = CMSG_NXTHDR(&mh, cmsg)) {
                size_t n_fds = (cmsg->cmsg_len - CMSG_LEN(0)) / sizeof(int);
                const int *fds = (const int *) CMSG_DATA(cmsg);

                if (cmsg->cmsg_level != SOL_SOCKET || cmsg->cmsg_type != SCM_RIGHTS)
                        continue;
                for (size_t i = 0; i < n_fds; i++) {
                        int fd;

                        memcpy(&fd, fds + i, sizeof(fd));
                        /* One set per reply. */
                        if (had == 0 && c->n_fds < CONNECTION_FDS_MAX)
                                c->fds[c->n_fds++] = fd;
                        else {
                                safe_close(fd);
                                extra = true;
                        }
                }
        }
        /* Fds the control buffer had no room for were closed by the kernel. */
        if (extra || (mh.msg_flags & MSG_CTRUNC))
                return -EBADMSG;
        return n;
}

/* Reads one message; bytes after its NUL stay pending in c->in (stream data, after Stream). Fds of
 * the previous reply not taken are closed. */
static int connection_recv(Connection *c, VarlinkReply *ret) {
        const char *msg;
        size_t len;
        int r;

        connection_close_fds(c);
        for (;;) {
                struct pollfd pfd = { .fd = c->fd, .events = POLLIN };
                char *p;
                ssize_t n;

                r = varlink_buffer_next(&c->in, &msg, &len);
                if (r == -EMSGSIZE)
                        return log_error_errno(r, "reply from tpd exceeds %u bytes", CONNECTION_REPLY_MAX);
                if (r > 0)
                        break;
                /* ppoll() unblocks the signals and waits in one step: a signal that came just before
                 * the wait ends it too. */
                if (c->wait_mask && ppoll(&pfd, 1, NULL, c->wait_mask) < 0) {
                        if (errno == EINTR)
                                return -EINTR;
                        return log_error_errno(-errno, "cannot wait for tpd: %m");
                }

                r = varlink_buffer_space(&c->in, CONNECTION_READ_SIZE, &p);
                if (r < 0)
                        return log_oom();
                n = connection_read(c, p, CONNECTION_READ_SIZE);
                if (n == -EINTR)
                        continue;
                if (n == 0 || n == -ECONNRESET)
                        return connection_closed(c);
                if (n == -EBADMSG)
                        return log_error_errno(n, "tpd sent more file descriptors than expected");
                if (n < 0)
                        return log_error_errno((int) n, "cannot read from tpd: %m");
                varlink_buffer_advance(&c->in, (size_t) n);
        }

        r = varlink_reply_parse(msg, len, ret);
        if (r == -ENOMEM)
                return log_oom();
        if (r < 0)
                return log_error_errno(r, "tpd sent a malformed reply");
        c->replied = true;
        return 0;
}

/* "Did you mean" for an unknown event, from tpd's own list (a second call, quiet if it fails). */
static void hint_events(const char *socket_path, const char *name) {
        _cleanup_(connection_done) Connection c = CONNECTION_NULL;
        _cleanup_(varlink_reply_done) VarlinkReply reply = {};
        const char *similar[SUGGEST_MAX];
        bool muted = log_muted;
        size_t n;
        int r;

        if (log_quiet || !name || strpbrk(name, "*?[") || strlen(name) > TPD_EVENT_NAME_MAX)
                return;
        log_muted = true;
        r = connection_call(&c, socket_path, TPD_METHOD("ListEvents"), json_object_new_object(), false,
                            &reply);
        log_muted = muted;
        if (r != 0)
                return;
        n = suggest_events(json_object_object_get(reply.parameters, "events"), name, similar);
        if (n == 1)
                log_hint("Did you mean %s?", similar[0]);
        else if (n == 2)
                log_hint("Did you mean %s or %s?", similar[0], similar[1]);
        else if (n == 3)
                log_hint("Did you mean %s, %s or %s?", similar[0], similar[1], similar[2]);
}

void connection_print_error(const char *socket_path, const VarlinkReply *reply) {
        json_object *message = json_object_object_get(reply->parameters, "message");

        if (json_object_is_type(message, json_type_string) && json_object_get_string_len(message) > 0)
                log_error("%s", json_object_get_string(message));
        else if (json_object_object_length(reply->parameters) > 0)
                log_error("%s %s", reply->error,
                          json_object_to_json_string_ext(reply->parameters, JSON_C_TO_STRING_PLAIN));
        else
                log_error("%s", reply->error);

        /* tpd's messages say what to do already; the hints add what only the client knows. Refusals
         * of a connection name the access group; other PermissionDenied (others' pins and filters,
         * root-only calls) do not, and joining the group would not help. */
        if (streq(reply->error, VARLINK_ERROR_PERMISSION_DENIED)) {
                const char *group =
                        json_object_get_string(json_object_object_get(reply->parameters, "group"));

                if (group)
                        hint_access(group);
        } else if (streq(reply->error, TPD_ERROR_NO_SUCH_EVENT) && socket_path)
                hint_events(socket_path,
                            json_object_get_string(json_object_object_get(reply->parameters, "event")));
}

int connection_call(Connection *c, const char *socket_path, const char *method, json_object *params,
                    bool upgrade, VarlinkReply *ret_reply) {
        int r;

        r = connection_connect(c, socket_path);
        if (r >= 0)
                r = connection_send(c, method, TAKE_PTR(params), upgrade);
        else
                json_object_put(params);
        if (r >= 0)
                r = connection_recv(c, ret_reply);
        if (r < 0)
                return r;

        if (ret_reply->error) {
                if (!c->keep_error)
                        connection_print_error(socket_path, ret_reply);
                return 1;
        }
        return 0;
}

int connection_next(Connection *c, const char *socket_path, VarlinkReply *ret_reply) {
        int r;

        varlink_reply_done(ret_reply);
        r = connection_recv(c, ret_reply);
        if (r < 0)
                return r;

        if (ret_reply->error) {
                connection_print_error(socket_path, ret_reply);
                return 1;
        }
        return 0;
}

int connection_call_again(Connection *c, const char *method, json_object *params, VarlinkReply *ret_reply) {
        int r;

        r = connection_send(c, method, TAKE_PTR(params), false);
        if (r < 0)
                return r;
        /* A later call of a connection: no socket path to ask for names with. */
        return connection_next(c, NULL, ret_reply);
}

int connection_exit_status(int r) {
        switch (r) {
        case 0:
                return EXIT_SUCCESS;
        case -ENOENT:
        case -ECONNREFUSED:
        case -EACCES:
        case -EPERM:
        case -ECONNRESET:
        case -EPIPE:
        case -ENOTCONN:
                return TPD_EXIT_DAEMON_GONE;
        case -ENAMETOOLONG:
                return EXIT_USAGE;
        default:
                return EXIT_FAILURE; /* also 1: an error reply, printed */
        }
}

int64_t reply_int(json_object *o, const char *key, bool *ret_found) {
        json_object *v;
        bool found = json_object_object_get_ex(o, key, &v) && json_object_is_type(v, json_type_int);

        if (ret_found)
                *ret_found = found;
        return found ? json_object_get_int64(v) : 0;
}
