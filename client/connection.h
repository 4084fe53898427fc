/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

#include <json-c/json.h>

#include "varlink.h"

/*
 * tpctl's side of a Varlink connection: connect, send one call, read its reply. Framing and message
 * checks are the shared ones (include/varlink.h), so tpctl reads exactly what tpd writes. Every
 * failure is printed here, once, with a hint where one helps.
 */

/* File descriptors one reply can bring (SCM_RIGHTS with its first byte; the reply names them by
 * index): as many as tpd sends with one (QUEUE_FDS_MAX). */
#define CONNECTION_FDS_MAX 2

typedef struct Connection {
        int fd;
        VarlinkBuffer in;            /* after the reply to Stream: the first stream bytes */
        int fds[CONNECTION_FDS_MAX]; /* came with the last reply; -1 once taken */
        size_t n_fds;
        bool keep_error; /* connection_call() leaves an error reply to its caller to print */
        bool more;       /* connection_call() asks for "more" replies rather than an upgrade */
        bool replied;    /* a reply came: a close is no longer one "without replying" */
        /* While a reply is awaited, the signal mask as ppoll() takes it (NULL: none): a signal blocked
         * outside the wait ends it with -EINTR, and what was read of the reply stays for the next
         * read. */
        const sigset_t *wait_mask;
} Connection;

#define CONNECTION_NULL ((Connection){ .fd = -1 })

void connection_done(Connection *c);

/*
 * Connects, sends one call (taking params over) and reads its reply. Returns 0 for a successful
 * reply, 1 for an error reply (already printed), negative errno when tpd could not be asked
 * (printed). *ret_reply is set for 0 and 1.
 */
int connection_call(Connection *c, const char *socket_path, const char *method, json_object *params,
                    bool upgrade, VarlinkReply *ret_reply);

/* The next reply of a call with "more" (replacing *ret_reply): returns as connection_call(), or
 * -EINTR (see wait_mask). */
int connection_next(Connection *c, const char *socket_path, VarlinkReply *ret_reply);

/* Prints an error reply as connection_call() does (socket_path: where to ask for the names near
 * an unknown event; NULL for none). */
void connection_print_error(const char *socket_path, const VarlinkReply *reply);

/* Another call on the connection connection_call() opened, once its previous reply was read: same
 * returns. */
int connection_call_again(Connection *c, const char *method, json_object *params, VarlinkReply *ret_reply);

/* Takes fd index of the last reply over (the reply's "fd": index), or -ENXIO when it brought no
 * such fd or it was taken already. Fds not taken are closed with the next reply or the connection. */
int connection_take_fd(Connection *c, size_t index);

/* The exit status for a result of connection_call(): 0 success, 1 an error reply (printed),
 * TPD_EXIT_DAEMON_GONE when tpd cannot be reached or went away, 2 for a socket path too long. */
int connection_exit_status(int r);

/* The integer member key of a reply's object o: its value, or 0 (and *ret_found false, when asked)
 * if o has no such member or it is no integer. Replies come from another program: never trusted
 * to have a member or its type. */
int64_t reply_int(json_object *o, const char *key, bool *ret_found);
