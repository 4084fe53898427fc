/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * tpctl, the command-line client of tpd. Each command is one Varlink call on a fresh connection;
 * `stream` upgrades its connection and then copies the daemon's NDJSON to stdout without parsing it.
 */

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <json-c/json.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "build-config.h"
#include "output.h"
#include "tpd-protocol.h"

#define EXIT_USAGE 2

/*
 * TPD_MESSAGE_MAX bounds what tpd accepts; replies can be larger (an unfiltered ListEvents names all
 * ~2300 events of a kernel). This cap only stops a runaway peer from eating our memory.
 */
#define TPCTL_REPLY_MAX (16U * 1024U * 1024U)
#define TPCTL_BUFFER_SIZE (64U * 1024U)

/* Larger pipes mean fewer splice() calls per MiB; 1 MiB is the default pipe-max-size for non-root. */
#define STREAM_PIPE_SIZE (1024 * 1024)

#define HINT_ACCESS "tpd accepts root and members of its access group (default 'tracing').\n"

#define streq(a, b) (strcmp((a), (b)) == 0)
#define ELEMENTSOF(x) (sizeof(x) / sizeof((x)[0]))

#define _cleanup_(f) __attribute__((cleanup(f)))
#define TAKE_PTR(p) ({ __typeof__(p) _p = (p); (p) = NULL; _p; })

static inline void freep(void *p) {
        free(*(void **) p);
}

static inline void closep(int *fd) {
        if (*fd >= 0)
                close(*fd);
}

static inline void close_pairp(int (*p)[2]) {
        closep(&(*p)[0]);
        closep(&(*p)[1]);
}

static inline void json_object_putp(json_object **j) {
        json_object_put(*j);
}

/* Prints "tpctl: MESSAGE" to stderr, with %m naming -r; returns r so callers can `return log_…();`. */
static int __attribute__((format(printf, 2, 3))) log_error_errno(int r, const char *fmt, ...) {
        va_list ap;

        fputs("tpctl: ", stderr);
        errno = r < 0 ? -r : r;
        va_start(ap, fmt);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
        fputc('\n', stderr);
        return r;
}

#define log_error(...) log_error_errno(0, __VA_ARGS__)
#define log_oom() log_error_errno(-ENOMEM, "out of memory")

static int __attribute__((format(printf, 1, 2))) log_usage(const char *fmt, ...) {
        va_list ap;

        fputs("tpctl: ", stderr);
        va_start(ap, fmt);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
        fputs("\nSee 'tpctl --help'.\n", stderr);
        return -EINVAL;
}

/* For commands: usage errors print a hint and end with status 2. */
#define usage_error(...) (log_usage(__VA_ARGS__), EXIT_USAGE)

/* The one wrapper around json-c's parser: NULL and error codes become -EBADMSG plus a reason. */
static int json_parse(const char *s, size_t len, json_object **ret, const char **ret_reason) {
        _cleanup_(json_object_putp) json_object *o = NULL;
        json_tokener *tok = json_tokener_new();
        size_t end;

        if (!tok)
                return -ENOMEM;
        o = json_tokener_parse_ex(tok, s, len);
        end = json_tokener_get_parse_end(tok);
        *ret_reason = o ? "trailing garbage" : json_tokener_error_desc(json_tokener_get_error(tok));
        if (json_tokener_get_error(tok) == json_tokener_continue)
                *ret_reason = "unexpected end of input";
        json_tokener_free(tok);
        if (!o)
                return -EBADMSG;
        for (; end < len; end++)
                if (!strchr(" \t\r\n", s[end]))
                        return -EBADMSG;
        *ret = TAKE_PTR(o);
        return 0;
}

/* Adds v to o, taking v over; a NULL v is json-c's out-of-memory. */
static int json_add(json_object *o, const char *key, json_object *v) {
        if (!v)
                return -ENOMEM;
        if (json_object_object_add(o, key, v) < 0) {
                json_object_put(v);
                return -ENOMEM;
        }
        return 0;
}

static int json_add_strings(json_object *o, const char *key, char *const *a, size_t n, char *const *b,
                            size_t m) {
        json_object *array = json_object_new_array_ext(n + m);
        int r = json_add(o, key, array);

        for (size_t i = 0; r >= 0 && i < n + m; i++) {
                json_object *s = json_object_new_string(i < n ? a[i] : b[i - n]);

                if (!s || json_object_array_add(array, s) < 0) {
                        json_object_put(s);
                        r = -ENOMEM;
                }
        }
        return r;
}

static int json_add_ints(json_object *o, const char *key, const int *v, size_t n) {
        json_object *array = json_object_new_array_ext(n);
        int r = json_add(o, key, array);

        for (size_t i = 0; r >= 0 && i < n; i++) {
                json_object *j = json_object_new_int(v[i]);

                if (!j || json_object_array_add(array, j) < 0) {
                        json_object_put(j);
                        r = -ENOMEM;
                }
        }
        return r;
}

typedef struct Varlink {
        int fd;
        char *buf;
        size_t len; /* bytes in buf; after a reply, what followed its NUL */
        size_t size;
} Varlink;

static void varlink_done(Varlink *v) {
        closep(&v->fd);
        free(v->buf);
}

static int varlink_connect(Varlink *v, const char *path) {
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        size_t l = strlen(path);

        if (l == 0 || l >= sizeof(sa.sun_path))
                return log_error_errno(-ENAMETOOLONG, "socket path '%s' is empty or longer than %zu bytes",
                                       path, sizeof(sa.sun_path) - 1);
        memcpy(sa.sun_path, path, l);

        v->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (v->fd < 0)
                return log_error_errno(-errno, "cannot create a socket: %m");
        if (connect(v->fd, (struct sockaddr *) &sa, offsetof(struct sockaddr_un, sun_path) + l + 1) < 0) {
                int r = -errno;

                log_error_errno(r, "cannot connect to tpd at '%s': %m", path);
                if (r == -EACCES || r == -EPERM)
                        fputs(HINT_ACCESS, stderr);
                else
                        fprintf(stderr, "Is tpd running? Start it with 'systemctl start tpd' or "
                                        "'tpd --socket %s', or point tpctl at it with --socket or $%s.\n",
                                path, TPD_SOCKET_ENV);
                return r;
        }
        return 0;
}

static int varlink_send(Varlink *v, const char *method, json_object *params, bool upgrade) {
        _cleanup_(json_object_putp) json_object *call = json_object_new_object();
        const char *s;
        size_t len;

        if (!call || json_add(call, "method", json_object_new_string(method)) < 0 ||
            json_add(call, "parameters", json_object_get(params)) < 0 ||
            (upgrade && json_add(call, "upgrade", json_object_new_boolean(true)) < 0))
                return log_oom();

        s = json_object_to_json_string_length(call, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE,
                                              &len);
        if (!s)
                return log_oom();
        if (len + 1 > TPD_MESSAGE_MAX)
                return log_error_errno(-EMSGSIZE, "the call is %zu bytes long, tpd accepts at most %u",
                                       len + 1, TPD_MESSAGE_MAX);

        /* The string's terminating NUL is Varlink's message delimiter: send len + 1 bytes. */
        for (size_t done = 0; done < len + 1;) {
                ssize_t n = send(v->fd, s + done, len + 1 - done, MSG_NOSIGNAL);

                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return log_error_errno(-errno, "cannot send to tpd: %m");
                done += n;
        }
        return 0;
}

/* Reads one message; bytes after its NUL stay at the start of v->buf (stream data, after Stream). */
static int varlink_recv(Varlink *v, json_object **ret) {
        _cleanup_(json_object_putp) json_object *reply = NULL;
        json_object *error, *params;
        const char *reason;
        size_t scanned = 0, consumed;
        char *nul;
        int r;

        for (;;) {
                ssize_t n;

                nul = v->len > scanned ? memchr(v->buf + scanned, 0, v->len - scanned) : NULL;
                if (nul)
                        break;
                scanned = v->len;

                if (v->len == v->size) {
                        size_t size = v->size > 0 ? v->size * 2 : TPCTL_BUFFER_SIZE;
                        char *p;

                        if (v->size >= TPCTL_REPLY_MAX)
                                return log_error_errno(-EMSGSIZE, "reply from tpd exceeds %u bytes",
                                                       TPCTL_REPLY_MAX);
                        p = realloc(v->buf, size);
                        if (!p)
                                return log_oom();
                        v->buf = p;
                        v->size = size;
                }

                n = read(v->fd, v->buf + v->len, v->size - v->len);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return log_error_errno(-errno, "cannot read from tpd: %m");
                if (n == 0)
                        return log_error_errno(-ECONNRESET, "tpd closed the connection without replying");
                v->len += n;
        }

        r = json_parse(v->buf, nul - v->buf, &reply, &reason);
        if (r == -ENOMEM)
                return log_oom();
        if (r < 0)
                return log_error_errno(r, "tpd sent a malformed reply: %s", reason);

        if (!json_object_is_type(reply, json_type_object))
                return log_error_errno(-EBADMSG, "tpd sent a reply that is not a JSON object");
        error = json_object_object_get(reply, "error");
        if (error && !json_object_is_type(error, json_type_string))
                return log_error_errno(-EBADMSG, "tpd sent an error id that is not a string");
        if (!json_object_object_get_ex(reply, "parameters", &params) || !params) {
                /* Varlink allows leaving out empty parameters; callers always find an object. */
                params = json_object_new_object();
                if (json_add(reply, "parameters", params) < 0)
                        return log_oom();
        }
        if (!json_object_is_type(params, json_type_object))
                return log_error_errno(-EBADMSG, "tpd sent parameters that are not a JSON object");

        consumed = nul + 1 - v->buf;
        memmove(v->buf, nul + 1, v->len - consumed);
        v->len -= consumed;
        *ret = TAKE_PTR(reply);
        return 0;
}

static json_object *reply_parameters(json_object *reply) {
        return json_object_object_get(reply, "parameters");
}

static void print_error_reply(json_object *reply) {
        const char *id = json_object_get_string(json_object_object_get(reply, "error"));
        json_object *params = reply_parameters(reply);
        json_object *message = json_object_object_get(params, "message");

        if (json_object_is_type(message, json_type_string) && json_object_get_string_len(message) > 0)
                log_error("%s", json_object_get_string(message));
        else if (json_object_object_length(params) > 0)
                log_error("%s %s", id, json_object_to_json_string_ext(params, JSON_C_TO_STRING_PLAIN));
        else
                log_error("%s", id);

        if (streq(id, VARLINK_ERROR_PERMISSION_DENIED))
                fputs(HINT_ACCESS, stderr);
        else if (streq(id, TPD_ERROR_NO_SUCH_EVENT))
                fputs("'tpctl list' shows the events this kernel has.\n", stderr);
}

/*
 * Connects, sends one call and reads its reply. Returns 0 for a successful reply, 1 for an error reply
 * (already printed; *ret_reply holds it), negative errno when tpd could not be asked (printed).
 */
static int varlink_call(Varlink *v, const char *socket_path, const char *method, json_object *params,
                        bool upgrade, json_object **ret_reply) {
        json_object *reply = NULL;
        int r;

        r = varlink_connect(v, socket_path);
        if (r < 0)
                return r;
        r = varlink_send(v, method, params, upgrade);
        if (r < 0)
                return r;
        r = varlink_recv(v, &reply);
        if (r < 0)
                return r;

        *ret_reply = reply;
        if (json_object_object_get(reply, "error")) {
                print_error_reply(reply);
                return 1;
        }
        return 0;
}

static int exit_status(int r) {
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
                return EXIT_FAILURE;
        }
}

typedef struct Args {
        const char *socket_path;
        bool json;
        bool all;
        bool print;
        const char *filter;
        unsigned options; /* Option bits given, to check them against the command */
        char **events;
        size_t n_events;
        int *pids;
        size_t n_pids;
        int *cpus;
        size_t n_cpus;
} Args;

static void args_done(Args *a) {
        free(a->events);
        free(a->pids);
        free(a->cpus);
}

/* Options that only some commands take, as bits of Args.options and Verb.options. */
enum {
        OPT_FILTER = 1 << 0,
        OPT_ALL = 1 << 1,
        OPT_EVENT = 1 << 2,
        OPT_PID = 1 << 3,
        OPT_CPU = 1 << 4,
        OPT_PRINT = 1 << 5,
};

static const char *const option_names[] = { "--filter", "--all", "--event", "--pid", "--cpu", "--print" };

/* Sends method with params and prints the reply: as JSON with --json, else with print (if any). */
static int run_call(const Args *a, const char *method, json_object *params, void (*print)(json_object *)) {
        _cleanup_(varlink_done) Varlink v = { .fd = -1 };
        _cleanup_(json_object_putp) json_object *reply = NULL;
        int r;

        r = varlink_call(&v, a->socket_path, method, params, false, &reply);
        if (r != 0)
                return exit_status(r);
        if (a->json)
                print_json(reply_parameters(reply));
        else if (print)
                print(reply_parameters(reply));
        return EXIT_SUCCESS;
}

static int verb_list(const Args *a, char **args, size_t n) {
        _cleanup_(json_object_putp) json_object *params = json_object_new_object();

        if (!params || (n > 0 && json_add(params, "pattern", json_object_new_string(args[0])) < 0))
                return exit_status(log_oom());
        return run_call(a, TPD_METHOD("ListEvents"), params, print_list);
}

static int verb_describe(const Args *a, char **args, size_t n) {
        _cleanup_(json_object_putp) json_object *params = json_object_new_object();

        if (!params || json_add(params, "event", json_object_new_string(args[0])) < 0)
                return exit_status(log_oom());
        return run_call(a, TPD_METHOD("DescribeEvent"), params, print_describe);
}

static int verb_enable(const Args *a, char **args, size_t n) {
        _cleanup_(json_object_putp) json_object *params = json_object_new_object();

        if (!params || json_add_strings(params, "events", args, n, NULL, 0) < 0 ||
            (a->filter && json_add(params, "filter", json_object_new_string(a->filter)) < 0))
                return exit_status(log_oom());
        return run_call(a, TPD_METHOD("Enable"), params, NULL);
}

static int verb_disable(const Args *a, char **args, size_t n) {
        _cleanup_(json_object_putp) json_object *params = json_object_new_object();

        if (n == 0 && !a->all)
                return usage_error("disable needs EVENT... or --all");
        if (n > 0 && a->all)
                return usage_error("disable takes either EVENT... or --all, not both");

        if (!params || (a->all ? json_add(params, "all", json_object_new_boolean(true))
                               : json_add_strings(params, "events", args, n, NULL, 0)) < 0)
                return exit_status(log_oom());
        return run_call(a, TPD_METHOD("Disable"), params, NULL);
}

static int verb_status(const Args *a, char **args, size_t n) {
        _cleanup_(json_object_putp) json_object *params = json_object_new_object();

        if (!params)
                return exit_status(log_oom());
        return run_call(a, TPD_METHOD("GetStatus"), params, print_status);
}

static int verb_call(const Args *a, char **args, size_t n) {
        _cleanup_(varlink_done) Varlink v = { .fd = -1 };
        _cleanup_(json_object_putp) json_object *params = NULL, *reply = NULL;
        _cleanup_(freep) char *method = NULL;
        const char *reason;
        int r;

        if (n > 1) {
                r = json_parse(args[1], strlen(args[1]), &params, &reason);
                if (r == -ENOMEM)
                        return exit_status(log_oom());
                if (r < 0)
                        return usage_error("PARAMETERS are not valid JSON: %s", reason);
                if (!json_object_is_type(params, json_type_object))
                        return usage_error("PARAMETERS must be a JSON object: "
                                           "'{\"event\":\"sched:sched_switch\"}'");
        } else if (!(params = json_object_new_object()))
                return exit_status(log_oom());

        /* A bare name means a method of tpd's own interface: `tpctl call GetStatus`. */
        if (asprintf(&method, "%s%s", strchr(args[0], '.') ? "" : TPD_INTERFACE ".", args[0]) < 0) {
                method = NULL;
                return exit_status(log_oom());
        }

        r = varlink_call(&v, a->socket_path, method, params, false, &reply);
        if (r < 0)
                return exit_status(r);
        /* Error replies go to stdout whole, so scripts can look at the error id and its parameters. */
        print_json(r == 0 ? reply_parameters(reply) : reply);
        return r == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

static int write_all(int fd, const char *p, size_t n) {
        while (n > 0) {
                ssize_t k = write(fd, p, n);

                if (k < 0 && errno == EINTR)
                        continue;
                if (k < 0)
                        return -errno;
                p += k;
                n -= k;
        }
        return 0;
}

/* Moves n bytes that are already in a pipe to out with read() and write(). */
static int pipe_drain(int in, int out, size_t n, char *buf, size_t size) {
        while (n > 0) {
                ssize_t k = read(in, buf, n < size ? n : size);
                int r;

                if (k < 0 && errno == EINTR)
                        continue;
                if (k <= 0)
                        return k < 0 ? -errno : -EIO;
                r = write_all(out, buf, k);
                if (r < 0)
                        return r;
                n -= k;
        }
        return 0;
}

/*
 * Copies sock to out inside the kernel: directly when out is a pipe, else through a pipe of our own.
 * Returns 0 at end of stream, -EINVAL when splice() cannot serve these files (nothing is in flight
 * then, so the caller may go on with read/write), other negative errno on failure.
 */
static int stream_splice(int sock, int out, char *buf, size_t size) {
        _cleanup_(close_pairp) int pipefd[2] = { -1, -1 };
        struct stat st;
        int to = out;

        if (fstat(out, &st) < 0)
                return -errno;
        if (!S_ISFIFO(st.st_mode)) {
                if (pipe2(pipefd, O_CLOEXEC) < 0)
                        return -errno;
                (void) fcntl(pipefd[1], F_SETPIPE_SZ, STREAM_PIPE_SIZE);
                to = pipefd[1];
        }

        for (;;) {
                struct pollfd in = { .fd = sock, .events = POLLIN };
                ssize_t n;

                /* Wait outside splice(): a splice() blocked on the socket holds the pipe's lock,
                 * and a reader of our stdout could not take what is already in the pipe. */
                if (poll(&in, 1, -1) < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                n = splice(sock, NULL, to, NULL, STREAM_PIPE_SIZE, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0 && errno == EAGAIN) {
                        /* The socket had data, so the pipe is full: wait until the reader makes room. */
                        struct pollfd o = { .fd = to, .events = POLLOUT };
                        if (poll(&o, 1, -1) < 0 && errno != EINTR)
                                return -errno;
                        continue;
                }
                if (n < 0)
                        return -errno;
                if (n == 0)
                        return 0;

                while (to != out && n > 0) {
                        ssize_t k = splice(pipefd[0], NULL, out, NULL, n, SPLICE_F_MOVE);

                        if (k < 0 && errno == EINTR)
                                continue;
                        if (k < 0 && errno == EINVAL) {
                                /* out takes no splice (a tty, an O_APPEND file): what is already in
                                 * our pipe must still get out, in order, before falling back. */
                                int r = pipe_drain(pipefd[0], out, n, buf, size);

                                return r < 0 ? r : -EINVAL;
                        }
                        if (k < 0)
                                return -errno;
                        n -= k;
                }
        }
}

static int stream_copy(int sock, int out, char *buf, size_t size) {
        for (;;) {
                ssize_t n = read(sock, buf, size);
                int r;

                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0)
                        return n < 0 ? -errno : 0;
                r = write_all(out, buf, n);
                if (r < 0)
                        return r;
        }
}

static void stream_on_signal(int sig) {
        /* Stream data never sits in stdio buffers, so nothing is lost by leaving right here; a flag
         * checked between syscalls could miss a signal that arrives just before a blocking splice(). */
        _exit(EXIT_SUCCESS);
}

static int verb_stream(const Args *a, char **args, size_t n) {
        _cleanup_(varlink_done) Varlink v = { .fd = -1 };
        _cleanup_(json_object_putp) json_object *params = json_object_new_object(), *reply = NULL;
        struct sigaction sa_exit = { .sa_handler = stream_on_signal };
        struct sigaction sa_ignore = { .sa_handler = SIG_IGN };
        int r;

        if (!params || (a->n_events + n > 0 && json_add_strings(params, "events", a->events, a->n_events,
                                                                 args, n) < 0) ||
            (a->n_pids > 0 && json_add_ints(params, "pids", a->pids, a->n_pids) < 0) ||
            (a->n_cpus > 0 && json_add_ints(params, "cpus", a->cpus, a->n_cpus) < 0) ||
            (a->filter && json_add(params, "filter", json_object_new_string(a->filter)) < 0) ||
            (a->print && json_add(params, "print", json_object_new_boolean(true)) < 0))
                return exit_status(log_oom());

        /* A closed stdout (| head) must show up as EPIPE, to end quietly with 0. */
        (void) sigaction(SIGPIPE, &sa_ignore, NULL);
        (void) sigaction(SIGINT, &sa_exit, NULL);
        (void) sigaction(SIGTERM, &sa_exit, NULL);

        r = varlink_call(&v, a->socket_path, TPD_METHOD("Stream"), params, true, &reply);
        if (r != 0)
                return exit_status(r);
        json_object_put(TAKE_PTR(reply));
        json_object_put(TAKE_PTR(params));

        /* What came with the reply in the same read() is already stream data. */
        r = write_all(STDOUT_FILENO, v.buf, v.len);
        if (r >= 0)
                r = stream_splice(v.fd, STDOUT_FILENO, v.buf, v.size);
        if (r == -EINVAL)
                r = stream_copy(v.fd, STDOUT_FILENO, v.buf, v.size);

        if (r == 0 || r == -ECONNRESET) {
                log_error("tpd closed the stream");
                return TPD_EXIT_DAEMON_GONE;
        }
        if (r == -EPIPE)
                return EXIT_SUCCESS;
        log_error_errno(r, "cannot copy the stream to standard output: %m");
        return EXIT_FAILURE;
}

typedef struct Verb {
        const char *name;
        size_t min_args;
        size_t max_args;
        unsigned options;
        int (*run)(const Args *a, char **args, size_t n);
} Verb;

static const Verb verbs[] = {
        { "list", 0, 1, 0, verb_list },
        { "describe", 1, 1, 0, verb_describe },
        { "enable", 1, SIZE_MAX, OPT_FILTER, verb_enable },
        { "disable", 0, SIZE_MAX, OPT_ALL, verb_disable },
        { "status", 0, 0, 0, verb_status },
        { "stream", 0, SIZE_MAX, OPT_EVENT | OPT_PID | OPT_CPU | OPT_FILTER | OPT_PRINT, verb_stream },
        { "call", 1, 2, 0, verb_call },
};

static void help(void) {
        printf("Usage: tpctl [OPTIONS] COMMAND [ARGUMENTS]\n"
               "\n"
               "Control tpd and stream Linux kernel tracepoints from it as JSON.\n"
               "\n"
               "Commands:\n"
               "  list [PATTERN]             List events by name, enabled ones marked \"(enabled)\";\n"
               "                             PATTERN is a glob: 'sched:*', '*:sched_switch'\n"
               "  describe EVENT             Show an event's id, fields and print format\n"
               "  enable EVENT... [-f EXPR]  Enable events until 'disable', with an optional kernel filter\n"
               "  disable EVENT... | --all   Remove your pins of these events, or all yours (root: all)\n"
               "  status                     Show tpd's settings, counters and enabled events\n"
               "  stream [EVENT...]          Print records as NDJSON, one JSON object a line, until\n"
               "                             interrupted; without EVENT or -e, every enabled event\n"
               "  call METHOD [PARAMETERS]   Call a Varlink method with a JSON object and print the reply\n"
               "                             as JSON (an error reply whole); bare METHODs are in\n"
               "                             %s\n"
               "\n"
               "Options:\n"
               "  -h --help                  Show this help\n"
               "     --version               Show the version\n"
               "     --socket=PATH           tpd's socket (default: $%s, else\n"
               "                             %s)\n"
               "     --json                  list, describe, status, enable, disable: print the reply's\n"
               "                             parameters as JSON\n"
               "  -f --filter=EXPR           enable: kernel filter of the events;\n"
               "                             stream: filter of this stream only, in the same syntax\n"
               "     --all                   disable: every event enabled with 'enable'\n"
               "  -e --event=EVENT           stream: include EVENT (repeatable, like EVENT arguments)\n"
               "  -p --pid=PID               stream: only records of process PID (repeatable)\n"
               "  -c --cpu=CPU               stream: only records of CPU (repeatable)\n"
               "     --print                 stream: add the kernel's formatted text as \"print\"\n"
               "\n"
               "Exit status:\n"
               "  0   success; also when a stream ends by SIGINT or SIGTERM, or its reader goes away\n"
               "  1   tpd answered with an error, or another failure\n"
               "  2   wrong usage\n"
               "  %d  tpd cannot be reached, or it closed the stream\n",
               TPD_INTERFACE, TPD_SOCKET_ENV, TPD_SOCKET_DEFAULT, TPD_EXIT_DAEMON_GONE);
}

static int parse_int(const char *s, int *ret) {
        char *end;
        long v;

        if (*s < '0' || *s > '9')
                return -EINVAL;
        errno = 0;
        v = strtol(s, &end, 10);
        if (errno != 0 || *end || v > INT_MAX)
                return -EINVAL;
        *ret = (int) v;
        return 0;
}

/* Returns 1 to run *ret_verb, 0 to exit successfully (--help, --version), negative on usage errors. */
static int parse_args(int argc, char *argv[], Args *a, const Verb **ret_verb) {
        enum {
                ARG_VERSION = 0x100,
                ARG_SOCKET,
                ARG_JSON,
                ARG_ALL,
                ARG_PRINT,
        };
        static const struct option options[] = {
                { "help", no_argument, NULL, 'h' },
                { "version", no_argument, NULL, ARG_VERSION },
                { "socket", required_argument, NULL, ARG_SOCKET },
                { "json", no_argument, NULL, ARG_JSON },
                { "filter", required_argument, NULL, 'f' },
                { "all", no_argument, NULL, ARG_ALL },
                { "event", required_argument, NULL, 'e' },
                { "pid", required_argument, NULL, 'p' },
                { "cpu", required_argument, NULL, 'c' },
                { "print", no_argument, NULL, ARG_PRINT },
                {}
        };
        const Verb *verb = NULL;
        size_t n;
        int c;

        /* argc bounds every list, so they never grow. */
        a->events = calloc(argc, sizeof(*a->events));
        a->pids = calloc(argc, sizeof(*a->pids));
        a->cpus = calloc(argc, sizeof(*a->cpus));
        if (!a->events || !a->pids || !a->cpus)
                return log_oom();

        /* No '+': options may follow the command (`tpctl stream -e sched:sched_switch`). */
        opterr = 0;
        while ((c = getopt_long(argc, argv, ":hf:e:p:c:", options, NULL)) >= 0)
                switch (c) {
                case 'h':
                        help();
                        return 0;
                case ARG_VERSION:
                        printf("tpctl %s\n", TPD_VERSION);
                        return 0;
                case ARG_SOCKET:
                        a->socket_path = optarg;
                        break;
                case ARG_JSON:
                        a->json = true;
                        break;
                case 'f':
                        a->filter = optarg;
                        a->options |= OPT_FILTER;
                        break;
                case ARG_ALL:
                        a->all = true;
                        a->options |= OPT_ALL;
                        break;
                case 'e':
                        a->events[a->n_events++] = optarg;
                        a->options |= OPT_EVENT;
                        break;
                case 'p':
                        if (parse_int(optarg, &a->pids[a->n_pids++]) < 0)
                                return log_usage("invalid PID '%s'", optarg);
                        a->options |= OPT_PID;
                        break;
                case 'c':
                        if (parse_int(optarg, &a->cpus[a->n_cpus++]) < 0)
                                return log_usage("invalid CPU number '%s'", optarg);
                        a->options |= OPT_CPU;
                        break;
                case ARG_PRINT:
                        a->print = true;
                        a->options |= OPT_PRINT;
                        break;
                case ':':
                        return log_usage("option '%s' needs an argument", argv[optind - 1]);
                default:
                        if (optopt > 0 && optopt < 0x100)
                                return log_usage("unknown option '-%c'", optopt);
                        return log_usage("unknown option '%s'", argv[optind - 1]);
                }

        if (!a->socket_path)
                a->socket_path = getenv(TPD_SOCKET_ENV);
        if (!a->socket_path || !*a->socket_path)
                a->socket_path = TPD_SOCKET_DEFAULT;

        if (optind >= argc)
                return log_usage("missing command");
        for (size_t i = 0; i < ELEMENTSOF(verbs); i++)
                if (streq(argv[optind], verbs[i].name))
                        verb = &verbs[i];
        if (!verb)
                return log_usage("unknown command '%s'", argv[optind]);

        n = argc - optind - 1;
        if (n < verb->min_args)
                return log_usage("%s needs an argument", verb->name);
        if (n > verb->max_args)
                return log_usage("too many arguments for %s", verb->name);
        for (size_t i = 0; i < ELEMENTSOF(option_names); i++)
                if (a->options & ~verb->options & (1U << i))
                        return log_usage("%s does not apply to %s", option_names[i], verb->name);

        *ret_verb = verb;
        return 1;
}

int main(int argc, char *argv[]) {
        _cleanup_(args_done) Args a = {};
        const Verb *verb = NULL;
        int r;

        r = parse_args(argc, argv, &a, &verb);
        if (r == -ENOMEM)
                return EXIT_FAILURE;
        if (r <= 0)
                return r < 0 ? EXIT_USAGE : EXIT_SUCCESS;

        r = verb->run(&a, argv + optind + 1, argc - optind - 1);

        /* Output the user asked for that never arrived is a failure, e.g. on a full disk. */
        if (fflush(stdout) != 0 || ferror(stdout)) {
                log_error_errno(-errno, "cannot write to standard output: %m");
                return r == EXIT_SUCCESS ? EXIT_FAILURE : r;
        }
        return r;
}
