/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <stdbool.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <unistd.h>

#include <json-c/json.h>
#include <systemd/sd-event.h>

#include "queue.h"
#include "stream.h"
#include "tracing.h"
#include "varlink.h"

typedef struct Manager Manager;

/*
 * One connection: Varlink framing in, replies and stream records out. Calls are dispatched to the
 * API as they complete; a malformed message closes this connection and nothing else. Write
 * interest is on only while output is backlogged.
 */

typedef struct Client Client;
struct Client {
        Manager *manager;
        Client *next;
        Client *prev;

        int fd;
        sd_event_source *source;
        sd_event_source *resume; /* answers calls left in the buffer after a time slice */
        bool resume_pending;
        uid_t uid;
        gid_t gid;
        pid_t pid;

        VarlinkBuffer in;
        Queue out; /* replies; written before stream records */

        Stream *stream;
        TracingEvent **held; /* events this stream enabled for its lifetime */
        size_t n_held;
        sd_event_source *stall_timer; /* armed while a call is half received */
        uint64_t n_calls;             /* calls received, to see progress */
        uint64_t stall_calls;         /* n_calls when stall_timer was armed */
        /* Refused at accept (access or limits): the first call gets this error, then the connection
         * closes; one that sends nothing goes after CLIENT_STALL_USEC. */
        const char *refusal_error;
        char *refusal_message;
        bool upgraded;
        bool read_closed;
};

/* A control call must arrive whole within this long once its first byte did. */
#define CLIENT_STALL_USEC (5 * 1000 * 1000ULL)

int client_new(Manager *m, int fd, const struct ucred *cred, Client **ret);
Client *client_free(Client *c);
/* Marks a new connection as refused; see refusal_error. */
int client_refuse(Client *c, const char *error, const char *message);

/* Root (or tpd's own uid) may do what members may not: see DESIGN §5 and README "Access". */
static inline bool client_is_root(const Client *c) {
        return c->uid == 0 || c->uid == geteuid();
}

/* Queues a reply or an error; takes ownership of parameters. */
int client_reply(Client *c, json_object *parameters);
int client_error(Client *c, const char *error, json_object *parameters);
/* An error with a "message" and, when key is set, one more string parameter. */
int client_errorf(Client *c, const char *error, const char *key, const char *value, const char *format, ...)
        _printf_(5, 6);

/* Writes what is queued. Returns 0, or a negative errno after which c was freed. */
int client_flush(Client *c);
