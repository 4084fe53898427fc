/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "log.h"
#include "peer.h"
#include "ratelimit.h"
#include "tpd-protocol.h"

/* Stop reading calls while this much reply text waits for a peer that does not read. */
#define PEER_OUT_MAX (4 * TPD_MESSAGE_MAX)
#define PEER_READ_SIZE 16384U
/* Calls of one peer are answered for at most this long in one go; those left in the buffer
 * wait for the next turn of the loop (and its input stops being read meanwhile), so that a peer
 * pipelining expensive calls cannot hold up the others. */
#define PEER_SLICE_USEC (5 * 1000ULL)

static int peer_update_events(Peer *p);
static int peer_process(Peer *p);
static int peer_update_stall(Peer *p);

/* A call answered over several turns of the loop (peer_defer()). The event loop owns it (a floating
 * source): it outlives its connection, and is freed with the loop at exit. */
struct PeerDeferred {
        sd_event_source *source;
        Peer *peer; /* NULL once the connection has gone */
        PeerWork work;
        void *userdata;
        void (*free_userdata)(void *userdata);
};

Peer *peer_free(Peer *p) {
        if (!p)
                return NULL;

        /* A call still being answered goes on without its connection. */
        if (p->deferred)
                p->deferred->peer = NULL;
        /* The owner unlinks it, counts what its stream delivered and releases what it held. */
        if (p->handler && p->handler->on_free)
                p->handler->on_free(p, p->userdata);
        free(p->refusal_message);
        free(p->refusal_group);
        if (p->recording)
                recording_free(p->recording);
        else
                stream_free(p->stream);
        free(p->held);

        sd_event_source_disable_unref(p->source);
        sd_event_source_disable_unref(p->stall_timer);
        sd_event_source_disable_unref(p->resume);
        safe_close(p->fd);
        varlink_buffer_done(&p->in);
        queue_done(&p->out);
        free(p);
        return NULL;
}

/* A reply (error NULL) or an error, built by include/varlink.c and queued with n_fds fds;
 * parameters and fds are taken. */
static int peer_send(Peer *p, const char *error, json_object *parameters, bool continues, const int *fds,
                     size_t n_fds) {
        size_t len;
        char *text;
        int r;

        if (p) {
                r = error ? varlink_error(error, parameters, &text, &len)
                          : varlink_reply(parameters, continues, &text, &len);
                if (r >= 0)
                        return queue_push_text_fds(&p->out, text, len, fds, n_fds);
        } else {
                json_object_put(parameters);
                r = 0;
        }
        for (size_t i = 0; i < n_fds; i++)
                safe_close(fds[i]);
        return r;
}

int peer_reply(Peer *p, json_object *parameters) {
        return peer_send(p, NULL, parameters, false, NULL, 0);
}

int peer_reply_with_fds(Peer *p, json_object *parameters, const int *fds, size_t n_fds) {
        return peer_send(p, NULL, parameters, false, fds, n_fds);
}

int peer_reply_more(Peer *p, json_object *parameters) {
        return peer_send(p, NULL, parameters, true, NULL, 0);
}

int peer_reply_text(Peer *p, const char *text, size_t len) {
        if (!p)
                return 0;
        return queue_push_copy(&p->out, text, len);
}

int peer_error(Peer *p, const char *error, json_object *parameters) {
        return peer_send(p, error, parameters, false, NULL, 0);
}

int peer_errorf(Peer *p, const char *error, const char *key, const char *value, const char *format, ...) {
        _cleanup_free_ char *message = NULL;
        json_object *params;
        va_list ap;
        int r;

        if (!p)
                return 0;
        va_start(ap, format);
        r = vasprintf(&message, format, ap);
        va_end(ap);
        if (r < 0)
                return -ENOMEM;

        params = json_object_new_object();
        if (!params)
                return -ENOMEM;
        r = key ? json_add(params, key, json_object_new_string(strempty(value))) : 0;
        if (r >= 0)
                r = json_add(params, "message", json_object_new_string(message));
        if (r < 0) {
                json_object_put(params);
                return r;
        }
        return peer_error(p, error, params);
}

static bool peer_backlogged(Peer *p) {
        return !queue_is_empty(&p->out) || (p->stream && !queue_is_empty(&p->stream->queue));
}

static bool peer_done(Peer *p) {
        /* A control connection whose peer stopped sending ends once its replies are out; a
         * recording once its last frames are (see PeerHandler.on_hangup). */
        return p->read_closed && !p->deferred && queue_is_empty(&p->out) &&
               (!p->stream || queue_is_empty(&p->stream->queue));
}

int peer_queue_notice(Peer *p, uint64_t ts, const char *notice, const char *message) {
        return p->recording ? recording_queue_notice(p->recording, ts, notice, message)
                            : stream_queue_notice(p->stream, ts, notice, message);
}

int peer_flush(Peer *p) {
        int r;

        for (;;) {
                r = queue_write(&p->out, p->fd);
                if (r != 0 || p->stream || varlink_buffer_pending(&p->in) == 0)
                        break;
                /* The replies went out: answer the calls that waited for room. */
                r = peer_process(p);
                if (r < 0 || queue_is_empty(&p->out))
                        break;
        }
        if (r == 0 && p->stream) {
                r = queue_write(&p->stream->queue, p->fd);
                /* Room again: tell the peer what it missed. */
                if (r >= 0 && p->stream->drops_pending) {
                        int k = p->recording ? recording_report_losses(p->recording)
                                             : stream_report_drops(p->stream, false);
                        if (k >= 0 && !queue_is_empty(&p->stream->queue))
                                r = queue_write(&p->stream->queue, p->fd);
                }
        }
        if (r < 0) {
                if (r != -EPIPE && r != -ECONNRESET)
                        log_debug_errno(r, "Peer %d: write failed: %m", (int) p->pid);
                peer_free(p);
                return r;
        }
        if (peer_done(p)) {
                peer_free(p);
                return -ECONNRESET;
        }
        r = peer_update_events(p);
        if (r < 0) {
                peer_free(p);
                return r;
        }
        return 0;
}

static int peer_update_events(Peer *p) {
        uint32_t events = 0;

        /* Calls are read only while their replies are being taken: a peer that sends without
         * reading cannot make us queue without bound. */
        if (!p->read_closed && p->out.bytes < PEER_OUT_MAX && !p->resume_pending && !p->deferred)
                events |= EPOLLIN;
        if (peer_backlogged(p))
                events |= EPOLLOUT;
        return sd_event_source_set_io_events(p->source, events);
}

static int peer_process(Peer *p);

static int peer_on_resume(sd_event_source *s, uint64_t usec, void *userdata) {
        Peer *p = userdata;
        int r;

        p->resume_pending = false;
        r = peer_process(p);
        if (r < 0) {
                peer_free(p);
                return 0;
        }
        if (peer_flush(p) < 0)
                return 0; /* freed */
        if (peer_update_events(p) < 0)
                peer_free(p);
        return 0;
}

/* The slice is used up: the rest of the buffered calls on a later turn of the loop. */
static int peer_yield(Peer *p) {
        int r;

        /* A timer due at once, not a defer source: sd-event does not poll while a source is
         * pending, so a chain of defers would keep every other peer waiting. */
        if (!p->resume)
                /* Accuracy 1 µs: 0 would mean sd-event's default of 250 ms, a wait that an otherwise
                 * idle loop takes in full. */
                r = sd_event_add_time_relative(p->event, &p->resume, CLOCK_MONOTONIC, 0, 1, peer_on_resume,
                                               p);
        else {
                r = sd_event_source_set_time_relative(p->resume, 0);
                if (r >= 0)
                        r = sd_event_source_set_enabled(p->resume, SD_EVENT_ONESHOT);
        }
        if (r < 0)
                return r;
        p->resume_pending = true;
        return peer_update_events(p);
}

static int peer_process(Peer *p) {
        uint64_t start = now_usec(CLOCK_MONOTONIC);

        if (p->resume_pending)
                return 0;

        for (;;) {
                VarlinkCall call;
                const char *msg;
                size_t len;
                int r;

                /* Once upgraded, the connection no longer carries calls; a call still being answered
                 * keeps the next ones waiting. */
                if (p->upgraded || p->stream || p->deferred || p->out.bytes >= PEER_OUT_MAX)
                        return 0;

                if (now_usec(CLOCK_MONOTONIC) - start >= PEER_SLICE_USEC &&
                    varlink_buffer_pending(&p->in) > 0)
                        return peer_yield(p);

                r = varlink_buffer_next(&p->in, &msg, &len);
                if (r == -EMSGSIZE) {
                        log_debug("Peer %d: message larger than %u bytes, closing.", (int) p->pid,
                                  TPD_MESSAGE_MAX);
                        return r;
                }
                if (r <= 0)
                        return r;

                p->n_calls++;
                if (p->refusal_error) {
                        /* Whatever was asked: the refusal, and nothing more. */
                        p->read_closed = true;
                        if (streq(p->refusal_error, TPD_ERROR_LIMIT_EXCEEDED))
                                return peer_errorf(p, p->refusal_error, "limit", "connections", "%s",
                                                   p->refusal_message);
                        return peer_errorf(p, p->refusal_error, p->refusal_group ? "group" : NULL,
                                           p->refusal_group, "%s", p->refusal_message);
                }
                r = varlink_call_parse(msg, len, &call);
                if (r < 0) {
                        log_debug("Peer %d: malformed message, closing.", (int) p->pid);
                        return r;
                }
                r = p->handler->on_call(p, &call, p->userdata);
                varlink_call_done(&call);
                if (r < 0)
                        return r;
        }
}

static int peer_on_stall(sd_event_source *s, uint64_t usec, void *userdata) {
        Peer *p = userdata;
        static RateLimit limit = RATELIMIT_INIT(10 * 1000 * 1000ULL, 5);

        if (ratelimit_below(&limit))
                log_notice("Closing the connection of uid %u (pid %d): half a message and nothing more "
                           "for %llu s.",
                           (unsigned) p->uid, (int) p->pid,
                           (unsigned long long) (PEER_STALL_USEC / 1000000));
        peer_free(p);
        return 0;
}

/* A peer that stops in the middle of a call would keep its buffer (up to 64 KiB) and its slot for
 * ever: the call must be complete PEER_STALL_USEC after it started. A connection idle between
 * calls is fine (tools keep one open); the per-user connection limit bounds those. */
static int peer_update_stall(Peer *p) {
        size_t pending = varlink_buffer_pending(&p->in);
        /* While replies back up, calls are not read (peer_update_events): not the peer's stall. */
        bool partial = !p->stream && !p->upgraded && !p->read_closed && !p->deferred &&
                       p->out.bytes < PEER_OUT_MAX && pending > 0 &&
                       !memchr(p->in.data + p->in.consumed, 0, pending);

        /* A refused connection gets the same time to send its call, from the start. */
        if (p->refusal_error && !p->read_closed && p->n_calls == 0)
                partial = true;
        int r;

        if (!partial) {
                if (p->stall_timer)
                        return sd_event_source_set_enabled(p->stall_timer, SD_EVENT_OFF);
                return 0;
        }
        if (p->stall_timer) {
                int enabled = SD_EVENT_OFF;

                /* Armed and no call completed since: the deadline stands. */
                (void) sd_event_source_get_enabled(p->stall_timer, &enabled);
                if (enabled != SD_EVENT_OFF && p->stall_calls == p->n_calls)
                        return 0;
                r = sd_event_source_set_time_relative(p->stall_timer, PEER_STALL_USEC);
                if (r >= 0)
                        r = sd_event_source_set_enabled(p->stall_timer, SD_EVENT_ONESHOT);
        } else {
                r = sd_event_add_time_relative(p->event, &p->stall_timer, CLOCK_MONOTONIC, PEER_STALL_USEC,
                                               0, peer_on_stall, p);
                if (r >= 0)
                        (void) sd_event_source_set_description(p->stall_timer, "peer-stall");
        }
        p->stall_calls = p->n_calls;
        return r;
}

static int peer_on_io(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        Peer *p = userdata;
        int r;

        if (revents & EPOLLIN) {
                char *buf;
                ssize_t n;

                r = varlink_buffer_space(&p->in, PEER_READ_SIZE, &buf);
                if (r < 0) {
                        peer_free(p);
                        return 0;
                }
                n = read(p->fd, buf, PEER_READ_SIZE);
                if (n < 0 && errno != EAGAIN && errno != EINTR) {
                        peer_free(p);
                        return 0;
                }
                if (n == 0) {
                        /* A streaming peer that hangs up is gone, except a recording's, which
                         * waits for its last names; a caller may just have shut down its sending
                         * side and still waits for replies. */
                        if (p->stream && (!p->recording || !p->handler->on_hangup)) {
                                peer_free(p);
                                return 0;
                        }
                        if (p->stream && !p->read_closed)
                                p->handler->on_hangup(p, p->userdata);
                        p->read_closed = true;
                }
                if (n > 0) {
                        if (p->stream && !p->handler->on_stream_input)
                                /* Nothing is expected from a streaming peer: discard it. */
                                p->in.len = p->in.consumed;
                        else
                                varlink_buffer_advance(&p->in, (size_t) n);
                }
        }

        r = peer_process(p);
        /* What a streaming peer sent, also with the call that started its stream. */
        if (r >= 0 && p->stream && p->handler->on_stream_input && varlink_buffer_pending(&p->in) > 0) {
                ssize_t taken = p->handler->on_stream_input(p, p->in.data + p->in.consumed,
                                                            varlink_buffer_pending(&p->in), p->userdata);
                if (taken < 0)
                        r = (int) taken;
                else
                        p->in.consumed += (size_t) taken;
        }
        if (r >= 0)
                r = peer_update_stall(p);
        if (r < 0) {
                peer_free(p);
                return 0;
        }

        if ((revents & (EPOLLHUP | EPOLLERR)) && !(revents & EPOLLIN) && !peer_backlogged(p)) {
                peer_free(p);
                return 0;
        }

        (void) peer_flush(p);
        return 0;
}

int peer_refuse(Peer *p, const char *error, const char *message) {
        int r;

        /* Set first: the owner's on_free, also on the failures below, sees a refused peer. */
        p->refusal_error = error;
        p->refusal_message = strdup(message);
        if (!p->refusal_message) {
                peer_free(p);
                return -ENOMEM;
        }
        r = peer_update_stall(p);
        if (r < 0)
                peer_free(p);
        return r;
}

int peer_new(sd_event *event, int fd, const struct ucred *cred, const PeerHandler *handler, void *userdata,
             Peer **ret) {
        Peer *p;
        int r;

        p = calloc(1, sizeof(Peer));
        if (!p) {
                safe_close(fd);
                return -ENOMEM;
        }
        p->event = event;
        p->fd = fd;
        p->uid = cred->uid;
        p->gid = cred->gid;
        p->pid = cred->pid;
        varlink_buffer_init(&p->in, TPD_MESSAGE_MAX);

        r = sd_event_add_io(event, &p->source, fd, EPOLLIN, peer_on_io, p);
        if (r < 0) {
                peer_free(p);
                return r;
        }
        (void) sd_event_source_set_description(p->source, "peer");
        /* Only now: a failure above must not reach an owner that never had the peer. */
        p->handler = handler;
        p->userdata = userdata;
        *ret = p;
        return 0;
}

static void peer_deferred_destroy(void *userdata) {
        PeerDeferred *d = userdata;

        if (d->peer)
                d->peer->deferred = NULL;
        if (d->free_userdata)
                d->free_userdata(d->userdata);
        free(d);
}

/* Ends a deferred call: its source goes (and with it d), its connection reads calls again. */
static void peer_deferred_end(PeerDeferred *d, int r) {
        sd_event_source *s = d->source;
        Peer *p = d->peer;

        /* Let go of the connection now: a source released inside its own dispatch is freed (and
         * its destroy callback run) only after the dispatch, too late for the peer_flush() below
         * to read the connection's next calls. */
        if (p)
                p->deferred = NULL;
        d->peer = NULL;
        /* The loop's reference is the only one: taking it back frees s, and d with it (at the
         * end of this dispatch). */
        (void) sd_event_source_set_enabled(s, SD_EVENT_OFF);
        (void) sd_event_source_set_floating(s, false);
        if (!p)
                return;
        if (r < 0)
                peer_free(p);
        else
                (void) peer_flush(p); /* the reply, then the calls that waited */
}

static int peer_on_deferred(sd_event_source *s, uint64_t usec, void *userdata) {
        PeerDeferred *d = userdata;
        int r;

        r = d->work(d->peer, now_usec(CLOCK_MONOTONIC) + PEER_SLICE_USEC, d->userdata);
        if (r == 0) {
                /* Again at the next turn, after the other sources (see peer_yield()). */
                r = sd_event_source_set_time_relative(s, 0);
                if (r >= 0)
                        r = sd_event_source_set_enabled(s, SD_EVENT_ONESHOT);
                if (r >= 0)
                        return 0;
        }
        peer_deferred_end(d, r);
        return 0;
}

int peer_defer(Peer *p, PeerWork work, void *userdata, void (*free_userdata)(void *userdata)) {
        PeerDeferred *d;
        int r;

        r = work(p, now_usec(CLOCK_MONOTONIC) + PEER_SLICE_USEC, userdata);
        if (r != 0) {
                if (free_userdata)
                        free_userdata(userdata);
                return r < 0 ? r : 0;
        }

        d = calloc(1, sizeof(PeerDeferred));
        if (!d) {
                if (free_userdata)
                        free_userdata(userdata);
                return -ENOMEM;
        }
        *d = (PeerDeferred){ .peer = p, .work = work, .userdata = userdata, .free_userdata = free_userdata };
        /* Due at once, accurate to 1 µs (see peer_yield()). */
        r = sd_event_add_time_relative(p->event, &d->source, CLOCK_MONOTONIC, 0, 1, peer_on_deferred, d);
        if (r < 0) {
                peer_deferred_destroy(d);
                return r;
        }
        (void) sd_event_source_set_description(d->source, "peer-deferred");
        (void) sd_event_source_set_destroy_callback(d->source, peer_deferred_destroy);
        /* The loop takes a reference of its own: ours goes. */
        (void) sd_event_source_set_floating(d->source, true);
        sd_event_source_unref(d->source);
        p->deferred = d;
        return peer_update_events(p);
}
