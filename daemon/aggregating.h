/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <json-c/json.h>

#include "core/aggregate.h"
#include "core/encode.h"
#include "core/stream.h"
#include "manager.h"
#include "peer.h"
#include "varlink.h"

/*
 * Aggregate's glue: a stream whose records go into an aggregation (core/aggregate.h) instead of
 * its queue, and a timer that sends its snapshots. streams.c sets up the stream (selection, holds,
 * following) as for Stream; this reads the call's own parameters, binds its fields to the events'
 * formats, feeds it the batches (manager_offer()) and answers with snapshots.
 */

/* The call's aggregation parameters, checked: 0 with *ret, 1 when an error reply was queued, or a
 * negative errno. */
int aggregation_parse(Manager *m, Peer *peer, const VarlinkCall *call, Aggregation **ret);
/* Binds the fields it names to the formats of the events the stream holds. 0, 1 when an error reply
 * was queued, or a negative errno. */
int aggregation_bind(Aggregation *a, Peer *peer, TracingEvent *const *events, size_t n);
/* Starts it on the peer's stream: the first snapshot (empty) as the call's reply, and the timer. */
int aggregation_start(Aggregation *a, Manager *m, Peer *peer);
static inline void aggregation_freep(Aggregation **a) {
        aggregation_free(*a);
}
