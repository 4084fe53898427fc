/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "manager.h"
#include "peer.h"
#include "tracing.h"
#include "varlink.h"

/*
 * What the API's methods share (api.c, pins.c, status.c, streams.c): the strict checks of a call's
 * parameters, the error replies they end with, and the resolution of the events a call names,
 * bounded for members. Functions that queue an error reply on a peer's fault return it as a
 * positive value (or a negative errno when even that failed), unless said otherwise.
 */

/* Bounds on what one call may ask for. API_EVENTS_MAX is the wire limit of a name list;
 * API_PATTERNS_MAX bounds the matching work: a distinct glob may cost a pass over all ~2,300
 * names (≈ 70 µs here), so a call costs at most ≈ 5 ms, and a peer waiting behind a few such
 * calls on other connections is still answered within tens of milliseconds. */
#define API_EVENTS_MAX 4096U
#define API_PATTERNS_MAX 64U

/* Queues p as the reply, unless a json_set()/json_push() into it failed (r < 0): then p is freed
 * and r returned (the connection closes, out of memory). */
int call_reply(Peer *peer, json_object *p, int r);
/* Queues InvalidParameter naming key; returns what peer_errorf() returns. */
int invalid_parameter(Peer *p, const char *key);
/* -EINVAL, with InvalidParameter queued, when the call has a parameter not in allowed. */
int check_keys(Peer *p, const VarlinkCall *call, const char *const *allowed);
/* How a method reads one parameter into its struct (see call_params_parse()). */
typedef enum CallParamType {
        CALL_PARAM_STRINGS, /* char ** (the strings are the call's), count: size_t; max: entries */
        CALL_PARAM_INTS,    /* int64_t *, count: size_t; max: entries; each within min to max_value */
        CALL_PARAM_CPUS,    /* int64_t *, count: size_t; max: entries; each a CPU of this machine */
        CALL_PARAM_STRING,  /* const char * (the call's); max: bytes */
        CALL_PARAM_BOOL,    /* bool */
        CALL_PARAM_INT,     /* int64_t, within min to max_value */
} CallParamType;

typedef struct CallParam {
        const char *name;
        CallParamType type;
        size_t field; /* offset in the method's struct */
        size_t count; /* lists: offset of their length */
        size_t max;
        int64_t min, max_value;
} CallParam;

/* Reads the parameters of table into the struct at ret, whose fields hold the defaults: absent (or
 * null) parameters leave them as they are. Types come first, in the table's order, then the values
 * of the lists, CPUs before other numbers: the first parameter found wrong gets InvalidParameter
 * naming it (a CPU this machine lacks says which CPUs it has). Returns 0, 1 when an error reply was
 * queued, or a negative errno; the lists are the caller's to free, also on error. */
int call_params_parse(Manager *m, Peer *p, const VarlinkCall *call, const CallParam *table, size_t n,
                      void *ret);
/* Replies with the error for a failed tracing_resolve(); returns what peer_errorf() returns. */
int resolve_error(Peer *p, int r, const char *bad);
int tracefs_error(Peer *p, int r, const char *what);

/* Resolves the names of a call within its bounds (patterns, MaxGlobEvents= and MaxCallEvents= for
 * members, MaxEnabledEvents= with enable), without loading any format. Returns 0 with *ret (the
 * sorted names), 1 when an error reply was queued, or a negative errno. */
int resolve_names(Manager *m, Peer *p, char *const *names, size_t n, bool enable, char ***ret);
/* The same, and the tracing state of each event, loading formats not loaded yet: each costs a read
 * and a parse of its format file (≈ 1 ms), so only for the few events a member may name, or the
 * events of a stream. */
int resolve_events(Manager *m, Peer *p, char *const *names, size_t n, bool enable, TracingEvent ***ret,
                   size_t *ret_n);
/* The LimitExceeded "call_events" a member gets for a call that selects n events, queued when n is
 * over MaxCallEvents= (1, or a negative errno); 0 when the call may go on. */
int check_call_events(Manager *m, Peer *p, size_t n);

/* Whether k's stream gets e's records (a stream that named no event gets every enabled one). */
bool peer_holds(const Peer *k, const TracingEvent *e);
/* Adds uid to a set of uids. */
int uids_add(uid_t **l, size_t *n, uid_t uid);
/* Whether anyone but uid holds e: a pin of another uid, or a stream of another uid that gets the
 * event. On 1, *ret_who says who: "uid 0 (pin), uid 1001 (pin, stream)". */
int event_held_by_others(Manager *m, const TracingEvent *e, uid_t uid, char **ret_who);

/* A run of json-c adds whose constructors may fail (NULL: out of memory): once one failed (*r < 0),
 * the rest only free their value, and the builder checks *r once, at the end. */
void json_set(int *r, json_object *o, const char *key, json_object *v);
void json_push(int *r, json_object *array, json_object *v);
