/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "access.h"
#include "log.h"
#include "tpd-protocol.h"

void access_init(Access *a, const Config *config) {
        struct group *g;

        *a = (Access){ .config = config, .log_limit = RATELIMIT_INIT(10 * 1000 * 1000ULL, 5) };
        if (!config->access_group || !*config->access_group)
                return;
        g = getgrnam(config->access_group);
        if (!g) {
                log_notice("Access group '%s' does not exist: only root may connect.", config->access_group);
                return;
        }
        a->gid = g->gr_gid;
        a->gid_valid = true;
}

/* tpd's own uid counts as root: a tpd run by a user serves that user as root is served. */
bool access_uid_is_root(uid_t uid) {
        return uid == 0 || uid == geteuid();
}

bool access_peer_is_root(const Peer *p) {
        return access_uid_is_root(p->uid);
}

static unsigned access_root_slots(unsigned total) {
        return total / 2 < ACCESS_ROOT_SLOTS ? total / 2 : ACCESS_ROOT_SLOTS;
}

static bool access_is_member(const Access *a, const struct ucred *cred, const gid_t *groups, size_t n) {
        if (!a->gid_valid)
                return false;
        if (cred->gid == a->gid)
                return true;
        for (size_t i = 0; i < n; i++)
                if (groups[i] == a->gid)
                        return true;
        return false;
}

static unsigned access_connections_of(const Peer *peers, uid_t uid) {
        unsigned n = 0;

        for (const Peer *p = peers; p; p = p->next)
                if (p->uid == uid && !p->refusal_error)
                        n++;
        return n;
}

/* Returns NULL when the peer may have one more connection, else why not. */
static const char *access_connection_limit(const Access *a, const Peer *peers, unsigned n,
                                           const struct ucred *cred, bool root) {
        const Config *config = a->config;
        unsigned total = config->max_clients * 2;

        if (config->max_clients == 0)
                return NULL;
        if (n >= total)
                return "tpd has no connection left";
        if (root)
                return NULL;
        if (n >= total - access_root_slots(total))
                return "the connections left are kept for root";
        if (config->max_connections_per_user > 0 &&
            access_connections_of(peers, cred->uid) >= config->max_connections_per_user)
                return "this user has as many connections as it may (MaxConnectionsPerUser=)";
        return NULL;
}

void access_refusal_done(AccessRefusal *refusal) {
        refusal->text = mfree(refusal->text);
}

static void access_refuse(AccessRefusal *ret, const char *error, char *text, const char *fallback) {
        *ret = (AccessRefusal){ .error = error, .message = text ?: fallback, .text = text };
}

/* The socket's mode keeps others out already; this check still holds when the socket was made by
 * someone else or its mode was changed. */
bool access_admit(Access *a, const Peer *peers, unsigned n_peers, unsigned n_refused,
                  const struct ucred *cred, const gid_t *groups, size_t n_groups, AccessRefusal *ret) {
        bool root = access_uid_is_root(cred->uid);
        char *text = NULL;
        const char *why;

        *ret = (AccessRefusal){};
        if (!root && !access_is_member(a, cred, groups, n_groups)) {
                if (ratelimit_below(&a->log_limit))
                        log_notice("Denying access to uid %u (pid %d).", (unsigned) cred->uid,
                                   (int) cred->pid);
                if (asprintf(&text, "Only root and members of group '%s' may use tpd.",
                             strempty(a->config->access_group)) < 0)
                        text = NULL;
                access_refuse(ret, VARLINK_ERROR_PERMISSION_DENIED, text,
                              "Only root and members of the access group may use tpd.");
                return false;
        }

        why = access_connection_limit(a, peers, n_peers - n_refused, cred, root);
        if (why) {
                if (ratelimit_below(&a->log_limit))
                        log_warning("Refusing a connection of uid %u (pid %d): %s (%u connected).",
                                    (unsigned) cred->uid, (int) cred->pid, why, n_peers);
                if (asprintf(&text, "Too many connections: %s.", why) < 0)
                        text = NULL;
                access_refuse(ret, TPD_ERROR_LIMIT_EXCEEDED, text, "Too many connections.");
                return false;
        }
        return true;
}

/* Streams are limited in total and per user, and the last ones are root's. */
int access_check_stream(const Access *a, const Peer *peers, unsigned n_streams, Peer *p) {
        unsigned total = a->config->max_clients, reserved = access_root_slots(total), mine = 0;
        int r;

        if (total == 0)
                return 0;
        if (n_streams >= total)
                r = peer_errorf(p, TPD_ERROR_LIMIT_EXCEEDED, "limit", "streams",
                                "tpd serves at most %u streams at once.", total);
        else if (access_peer_is_root(p))
                return 0;
        else if (n_streams >= total - reserved)
                r = peer_errorf(p, TPD_ERROR_LIMIT_EXCEEDED, "limit", "streams",
                                "The last %u of tpd's %u streams are kept for root.", reserved, total);
        else {
                for (const Peer *k = peers; k; k = k->next)
                        if (k->stream && k->uid == p->uid)
                                mine++;
                if (a->config->max_streams_per_user == 0 || mine < a->config->max_streams_per_user)
                        return 0;
                r = peer_errorf(p, TPD_ERROR_LIMIT_EXCEEDED, "limit", "streams",
                                "uid %u has %u streams, as many as a user may have (MaxStreamsPerUser=).",
                                (unsigned) p->uid, mine);
        }
        return r < 0 ? r : 1;
}

unsigned access_max_call_events(const Access *a, const Peer *p, unsigned max) {
        return access_peer_is_root(p) ? max : MIN(max, a->config->max_call_events);
}

unsigned access_max_glob_events(const Access *a, const Peer *p) {
        return access_peer_is_root(p) ? 0 : a->config->max_glob_events;
}

bool access_kernel_addresses(const Access *a, const Peer *p) {
        return a->config->kernel_addresses || access_peer_is_root(p);
}
