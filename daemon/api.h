/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include "varlink.h"

typedef struct Manager Manager;
typedef struct Peer Peer;

/*
 * The methods of org.varlink.service and io.tpd.tracing: parameters are checked here, strictly,
 * before anything reaches tracing control. Each call queues exactly one reply or error on the
 * peer (a stream then goes on with records). Returns a negative errno only when the connection
 * must close.
 */
int api_dispatch(Manager *m, Peer *p, const VarlinkCall *call);

/* The interface description, compiled in from io.tpd.tracing.varlink. */
extern const char api_interface_description[];
