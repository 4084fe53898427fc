/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "connection.h"
#include "log.h"
#include "tpd-protocol.h"

/*
 * TPD_MESSAGE_MAX bounds what tpd accepts; replies can be larger (an unfiltered ListEvents names all
 * ~2300 events of a kernel). This cap only stops a runaway peer from eating our memory.
 */
#define CONNECTION_REPLY_MAX (16U * 1024U * 1024U)
#define CONNECTION_READ_SIZE (64U * 1024U)

#define HINT_ACCESS "tpd accepts root and members of its access group (default 'tracing').\n"

void connection_done(Connection *c) {
        c->fd = safe_close(c->fd);
        varlink_buffer_done(&c->in);
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
                        fputs(HINT_ACCESS, stderr);
                else
                        fprintf(stderr,
                                "Is tpd running? Start it with 'systemctl start tpd' or "
                                "'tpd --socket %s', or point tpctl at it with --socket or $%s.\n",
                                path, TPD_SOCKET_ENV);
                return r;
        }
        varlink_buffer_init(&c->in, CONNECTION_REPLY_MAX);
        return 0;
}

static int connection_send(Connection *c, const char *method, json_object *params, bool upgrade) {
        _cleanup_free_ char *text = NULL;
        size_t len;
        int r;

        r = varlink_call_format(method, params, upgrade, &text, &len);
        if (r < 0)
                return log_oom();
        if (len > TPD_MESSAGE_MAX)
                return log_error_errno(-EMSGSIZE, "the call is %zu bytes long, tpd accepts at most %u", len,
                                       TPD_MESSAGE_MAX);

        for (size_t done = 0; done < len;) {
                ssize_t n = send(c->fd, text + done, len - done, MSG_NOSIGNAL);

                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return log_error_errno(-errno, "cannot send to tpd: %m");
                done += (size_t) n;
        }
        return 0;
}

/* Reads one message; bytes after its NUL stay pending in c->in (stream data, after Stream). */
static int connection_recv(Connection *c, VarlinkReply *ret) {
        const char *msg;
        size_t len;
        int r;

        for (;;) {
                char *p;
                ssize_t n;

                r = varlink_buffer_next(&c->in, &msg, &len);
                if (r == -EMSGSIZE)
                        return log_error_errno(r, "reply from tpd exceeds %u bytes", CONNECTION_REPLY_MAX);
                if (r > 0)
                        break;

                r = varlink_buffer_space(&c->in, CONNECTION_READ_SIZE, &p);
                if (r < 0)
                        return log_oom();
                n = read(c->fd, p, CONNECTION_READ_SIZE);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return log_error_errno(-errno, "cannot read from tpd: %m");
                if (n == 0)
                        return log_error_errno(-ECONNRESET, "tpd closed the connection without replying");
                varlink_buffer_advance(&c->in, (size_t) n);
        }

        r = varlink_reply_parse(msg, len, ret);
        if (r == -ENOMEM)
                return log_oom();
        if (r < 0)
                return log_error_errno(r, "tpd sent a malformed reply");
        return 0;
}

static void print_error_reply(const VarlinkReply *reply) {
        json_object *message = json_object_object_get(reply->parameters, "message");

        if (json_object_is_type(message, json_type_string) && json_object_get_string_len(message) > 0)
                log_error("%s", json_object_get_string(message));
        else if (json_object_object_length(reply->parameters) > 0)
                log_error("%s %s", reply->error,
                          json_object_to_json_string_ext(reply->parameters, JSON_C_TO_STRING_PLAIN));
        else
                log_error("%s", reply->error);

        if (streq(reply->error, VARLINK_ERROR_PERMISSION_DENIED))
                fputs(HINT_ACCESS, stderr);
        else if (streq(reply->error, TPD_ERROR_NO_SUCH_EVENT))
                fputs("'tpctl list' shows the events this kernel has.\n", stderr);
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
                print_error_reply(ret_reply);
                return 1;
        }
        return 0;
}

int connection_call_again(Connection *c, const char *method, json_object *params, VarlinkReply *ret_reply) {
        int r;

        r = connection_send(c, method, TAKE_PTR(params), false);
        if (r >= 0)
                r = connection_recv(c, ret_reply);
        if (r < 0)
                return r;

        if (ret_reply->error) {
                print_error_reply(ret_reply);
                return 1;
        }
        return 0;
}
