/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <stdbool.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <unistd.h>

#include <json-c/json.h>
#include <systemd/sd-event.h>

#include "core/queue.h"
#include "core/recording.h"
#include "core/stream.h"
#include "tracing.h"
#include "varlink.h"

/*
 * One connection, a peer (the daemon's side; tpctl or another client is at the other end): Varlink framing
 * in, replies and stream records out. Complete calls go up to the owner through PeerHandler.on_call, as a
 * reader hands up pages; a malformed message closes this connection and nothing else. Write interest is on
 * only while output is backlogged. The peer knows nothing of its owner: the owner keeps its list of peers
 * (next, prev), what a stream holds (held) and the counters, and hears of the end through
 * PeerHandler.on_free.
 */

typedef struct Peer Peer;
typedef struct PeerDeferred PeerDeferred;

/* One slice of a call answered over several turns of the loop: works until CLOCK_MONOTONIC reaches
 * until_usec (or a little past: one step), and returns 0 to go on at a later turn, 1 once the call
 * is answered, or a negative errno to close the connection. p is NULL once the connection has
 * gone: the work goes on to its end, so that what the call changes does not depend on when its
 * peer left, and replies go nowhere (peer_reply() and peer_errorf() accept a NULL peer). */
typedef int (*PeerWork)(Peer *p, uint64_t until_usec, void *userdata);

typedef struct PeerHandler {
        /* A complete call: queue exactly one reply or error (a stream then goes on with records).
         * A negative errno closes the connection. */
        int (*on_call)(Peer *p, const VarlinkCall *call, void *userdata);
        /* The connection ends; called once, before p is freed: release what the owner attached. */
        void (*on_free)(Peer *p, void *userdata);
        /* A recording's peer shut its sending side (and still reads): queue the last frames. The
         * connection closes once they are out. Without it, such a peer is gone. */
        void (*on_hangup)(Peer *p, void *userdata);
        /* Bytes a streaming peer sent: returns how many it took (the rest waits for more), or a
         * negative errno to close the connection. Without it, they are discarded. */
        ssize_t (*on_stream_input)(Peer *p, const void *data, size_t size, void *userdata);
} PeerHandler;

struct Peer {
        sd_event *event;
        const PeerHandler *handler;
        void *userdata;
        Peer *next; /* the owner's list */
        Peer *prev;

        int fd;
        sd_event_source *source;
        sd_event_source *resume; /* answers calls left in the buffer after a time slice */
        bool resume_pending;
        uid_t uid;
        gid_t gid;
        pid_t pid;

        VarlinkBuffer in;
        Queue out; /* replies; written before stream records */

        Stream *stream;        /* a live stream, or the head of recording */
        struct ShmReader *shm; /* the stream reads a shared-memory ring; the socket carries frames */
        Recording *recording;  /* a recording: frames of pages */
        struct Aggregation *aggregation; /* the owner's: the stream's records go into it */
        TracingEvent **held;             /* the owner's: events this stream enabled for its lifetime */
        size_t n_held;
        sd_event_source *stall_timer; /* armed while a call is half received */
        uint64_t n_calls;             /* calls received, to see progress */
        uint64_t stall_calls;         /* n_calls when stall_timer was armed */
        /* Refused at accept (access or limits): the first call gets this error, then the connection
         * closes; one that sends nothing goes after PEER_STALL_USEC. */
        const char *refusal_error;
        char *refusal_message;
        char *refusal_group; /* PermissionDenied: the access group, sent for the peer's hint */
        bool upgraded;
        bool read_closed;
        bool sync_pending;      /* its client sent SYNC: a "sync" notice goes out on the loop's next turn */
        bool counting;          /* asked for counters (GetCounters): tpd keeps them while it is connected */
        PeerDeferred *deferred; /* a call still being answered: the next calls wait */
};

/* A control call must arrive whole within this long once its first byte did. */
#define PEER_STALL_USEC (5 * 1000 * 1000ULL)

/* Takes fd over, also on failure. */
int peer_new(sd_event *event, int fd, const struct ucred *cred, const PeerHandler *handler, void *userdata,
             Peer **ret);
Peer *peer_free(Peer *p);
/* Marks a new connection as refused; see refusal_error. */
int peer_refuse(Peer *p, const char *error, const char *message);

/* Queues a reply or an error; takes ownership of parameters. A NULL p (a deferred call whose
 * connection has gone) takes nothing. */
int peer_reply(Peer *p, json_object *parameters);
/* A reply that hands n_fds fds (at most QUEUE_FDS_MAX) over: they travel with the reply's first
 * byte, and the reply names them by index ("fd": 0). Takes ownership of parameters and fds (also
 * on failure and for a NULL p); the queue closes its copies once they are sent, or with it. */
int peer_reply_with_fds(Peer *p, json_object *parameters, const int *fds, size_t n_fds);
/* Queues a copy of a serialized reply (NUL included in len). */
int peer_reply_text(Peer *p, const char *text, size_t len);
/* A reply with "continues": more replies follow (Stream with "more"). */
int peer_reply_more(Peer *p, json_object *parameters);
int peer_error(Peer *p, const char *error, json_object *parameters);
/* An error with a "message" and, when key is set, one more string parameter. */
int peer_errorf(Peer *p, const char *error, const char *key, const char *value, const char *format, ...)
        _printf_(5, 6);

/* Answers the current call over several turns of the loop: runs work for a first slice at once,
 * and while it returns 0 again at later turns, each slice a few milliseconds, with other
 * connections served in between. This connection's further calls wait for the reply. The loop
 * owns userdata until the work ends (free_userdata then, also at exit or on failure). Returns 0,
 * or a negative errno (the connection closes). */
int peer_defer(Peer *p, PeerWork work, void *userdata, void (*free_userdata)(void *userdata));

/* Writes what is queued. Returns 0, or a negative errno after which p was freed. */
int peer_flush(Peer *p);

/* Queues a notice on the peer's stream: a NOTICE frame of a recording, else a line. Call only on a
 * peer with a stream. */
int peer_queue_notice(Peer *p, uint64_t ts, const char *notice, const char *message);
