/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include "manager.h"
#include "peer.h"
#include "varlink.h"

/*
 * GetStatus and GetCounters: what tpd does, and the per-event counts. GetCounters replies are
 * built at most every 100 ms and shared between the callers of that time.
 */
int status_method_get_status(Manager *m, Peer *p, const VarlinkCall *call);
int status_method_get_counters(Manager *m, Peer *p, const VarlinkCall *call);
