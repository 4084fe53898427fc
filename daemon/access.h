/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>
#include <sys/types.h>

#include "config.h"
#include "peer.h"
#include "ratelimit.h"

/*
 * Who may do what (docs/design.md §5, "Access"): root (or tpd's own uid), members of the access
 * group, and the limits on everyone else: connections and streams per user, and the last slots of
 * each, which are root's. The callers ask here; the answers, and the words of a refusal, are
 * decided nowhere else.
 */

/* Connection and stream slots only root may take (at most half of them), so that no member, nor
 * all of them together, can lock root out. */
#define ACCESS_ROOT_SLOTS 4U

typedef struct Access {
        const Config *config; /* AccessGroup=, MaxClients= and the per-user limits, as they are now */
        gid_t gid;            /* the access group's, when gid_valid */
        bool gid_valid;
        RateLimit log_limit; /* the log lines of refused and failed connections: one budget */
} Access;

/* Looks the access group up; without it only root may connect (logged). */
void access_init(Access *a, const Config *config);

bool access_uid_is_root(uid_t uid);
bool access_peer_is_root(const Peer *p);

/* Why a new connection is refused: the Varlink error its first call gets, and the message. */
typedef struct AccessRefusal {
        const char *error;   /* NULL: the connection may stay */
        const char *message; /* text, or a shorter one when out of memory */
        char *text;
} AccessRefusal;

void access_refusal_done(AccessRefusal *refusal);

/* Whether a new connection may stay, among the n_peers connections of peers (n_refused of them
 * only waiting for their refusal): root, and members by the groups the peer process holds, within
 * the connection limits. Logs a refusal, rate-limited. Returns false with *ret set otherwise. */
bool access_admit(Access *a, const Peer *peers, unsigned n_peers, unsigned n_refused,
                  const struct ucred *cred, const gid_t *groups, size_t n_groups, AccessRefusal *ret);

/* Whether c may start one more stream or recording, with n_streams of them running among peers:
 * 0, or 1 with the LimitExceeded error queued (a negative errno when even that failed). */
int access_check_stream(const Access *a, const Peer *peers, unsigned n_streams, Peer *p);

/* The bounds of one call of c (0: none): events selected (at most max for everyone), and events
 * one glob may match. */
unsigned access_max_call_events(const Access *a, const Peer *p, unsigned max);
unsigned access_max_glob_events(const Access *a, const Peer *p);

/* Whether c's recordings carry kernel addresses with their symbols: root's, or everyone's with
 * KernelAddresses=yes. */
bool access_kernel_addresses(const Access *a, const Peer *p);
