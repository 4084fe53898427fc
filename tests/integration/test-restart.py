#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Crash and restart: a killed tpd's instance is reclaimed, and pins survive the restart.

tpd pins sched:sched_switch with a kernel filter and serves a stream; then it is SIGKILLed, which
leaves the instance (with the event enabled) and the socket file behind, and the stream must end
with exit 69. A new tpd on the same instance name and socket path must start (reclaiming the stale
instance, docs/design.md §4), restore the pin and its filter (docs/design.md §2: "pins; persisted across restarts"),
serve records, and on SIGTERM exit 0 and remove the instance.
"""

import os
import signal

import tpdtest as T
from tpdtest import check, log

EVENT = 'sched:sched_switch'
FILTER = 'prev_pid == 1'


def main(ctx):
    tpd = ctx.tpd()
    evdir = os.path.join(tpd.instance_dir, 'events', 'sched', 'sched_switch')
    tpd.tpctl_ok('enable', EVENT, '--filter', FILTER)
    stream = tpd.stream()
    T.confirm_live([stream], lambda: tpd.marker('tpdtest-probe'))
    # Enable replies before the state is on disk (saved from a debounce timer, docs/operating.md "State"): a crash
    # right after it may lose the pin, so wait until the save is done, as GetStatus shows.
    T.wait_state_saved(tpd, 1)

    tpd.stop(signal.SIGKILL, expect=-signal.SIGKILL, clear_pins=False)
    rc = stream.wait(5)
    check(rc == T.EXIT_DAEMON_GONE, f'stream exited {rc} after tpd was killed, expected {T.EXIT_DAEMON_GONE}')
    check(os.path.isdir(tpd.instance_dir), 'instance vanished with SIGKILL: the crash case is not exercised')

    tpd.start(clean=False)     # same instance, same (stale) socket path; keep what it restores
    log('restarted on the stale instance')
    check(T.read_text(os.path.join(evdir, 'enable')).strip() == '1', f'pinned {EVENT} not enabled after restart')
    check(T.read_text(os.path.join(evdir, 'filter')).strip() == FILTER,
          f'filter after restart: {T.read_text(os.path.join(evdir, "filter")).strip()!r}, expected {FILTER!r}')
    st = tpd.status()
    pinned = [e for e in st.get('events', []) if e.get('name') == EVENT]
    check(pinned and pinned[0].get('pinned') is True, f'status does not show {EVENT} pinned: {st.get("events")}')

    stream2 = tpd.stream()
    T.confirm_live([stream2], lambda: tpd.marker('tpdtest-probe'))
    stream2.stop()
    tpd.stop()      # disables the pin first (so no state leaks), asserts exit 0 and the instance gone


if __name__ == '__main__':
    T.run(main)
