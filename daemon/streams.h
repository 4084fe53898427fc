/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include "manager.h"
#include "peer.h"
#include "varlink.h"

/*
 * Stream and Record: the selection a call asks for is checked, strictly, and built; the events it
 * names are held for the stream's lifetime; a stream that follows pids or a cgroup joins the
 * lineage (daemon/lineage.h); then the connection takes the stream over. Each queues exactly one
 * reply or error (a stream then goes on with records).
 */
int streams_method_stream(Manager *m, Peer *p, const VarlinkCall *call);
int streams_method_record(Manager *m, Peer *p, const VarlinkCall *call);
/* Aggregate (daemon/aggregating.h). */
int streams_method_aggregate(Manager *m, Peer *p, const VarlinkCall *call);
