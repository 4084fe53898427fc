/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include "manager.h"
#include "peer.h"
#include "varlink.h"

/*
 * Enable and Disable: the pins of each uid on events, and the kernel filters that go with them.
 * A call that changes many events is answered over several turns of the loop (peer_defer()).
 */
int pins_method_enable(Manager *m, Peer *p, const VarlinkCall *call);
int pins_method_disable(Manager *m, Peer *p, const VarlinkCall *call);
