#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Shutdown: SIGTERM (and SIGINT) stop tpd cleanly and leave tracefs as it was.

With a pinned event (sched:sched_switch), an event held only by a stream (sys_enter_getppid) and
two running streams, SIGTERM must make tpd exit 0 within 10 s, both `tpctl stream`s end with exit
69 (daemon gone) within 5 s, the instance directory disappear, the top level's enabled events,
filters and tracing_on be what they were before tpd started, and a later `tpctl status` exit 69
(unreachable). The same stop by SIGINT, with a pinned event, exits 0 and removes the instance too.
"""

import os
import signal
import time

import tpdtest as T
from tpdtest import check, log


def main(ctx):
    top_before = T.tracefs_snapshot()

    tpd = ctx.tpd()
    tpd.tpctl_ok('enable', 'sched:sched_switch')
    held = tpd.stream('-e', 'syscalls:sys_enter_getppid')
    everything = tpd.stream()
    T.confirm_live([everything], lambda: tpd.marker('tpdtest-probe'))
    getppid_enable = os.path.join(tpd.instance_dir, 'events', 'syscalls', 'sys_enter_getppid', 'enable')
    deadline = time.monotonic() + 5
    while T.read_text(getppid_enable).strip() != '1':
        check(held.running(), f'stream -e syscalls:sys_enter_getppid exited {held.proc.returncode}: '
                              f'{held.stderr_text()!r}')
        check(time.monotonic() < deadline, 'stream -e syscalls:sys_enter_getppid did not enable the event')
        time.sleep(0.02)
    check(T.read_text(os.path.join(tpd.instance_dir, 'events', 'sched', 'sched_switch', 'enable')).strip() == '1',
          'pinned sched:sched_switch is not enabled in the instance')

    t0 = time.monotonic()
    tpd.stop(signal.SIGTERM, clear_pins=False)      # asserts exit 0 and the instance gone
    log(f'tpd stopped {time.monotonic() - t0:.3f} s after SIGTERM')
    for s in (held, everything):
        rc = s.wait(5)
        check(rc is not None, f'tpctl stream {" ".join(s.args)} still running 5 s after tpd stopped')
        check(rc == T.EXIT_DAEMON_GONE, f'tpctl stream {" ".join(s.args)} exited {rc} when tpd stopped, '
                                        f'expected {T.EXIT_DAEMON_GONE}; stderr {s.stderr_text()!r}')
        s.poll()
        rest = s.partial
        check(not rest, f'stream {" ".join(s.args)} ended with a partial line: {rest[:200]!r}')

    check(not os.path.exists(tpd.instance_dir), f'instance {tpd.instance_dir} still exists')
    check(tpd.instance not in os.listdir(os.path.join(T.TRACEFS, 'instances')), 'instance still listed')
    top_after = T.tracefs_snapshot()
    check(top_after == top_before, f'top-level tracefs changed across tpd\'s life:\n'
                                   f'{T.snapshot_diff(top_before, top_after)}')
    r = tpd.tpctl('status')
    check(r.returncode == T.EXIT_DAEMON_GONE, f'tpctl status with tpd stopped exited {r.returncode}, '
                                              f'expected {T.EXIT_DAEMON_GONE}')
    check(r.stderr.strip(), 'tpctl status with tpd stopped printed no message')

    # SIGINT: the foreground way of stopping (Ctrl-C).
    tpd2 = ctx.tpd()
    tpd2.tpctl_ok('enable', 'sched:sched_switch')
    tpd2.stop(signal.SIGINT, clear_pins=False)
    check(T.tracefs_snapshot() == top_before, 'top-level tracefs changed across the SIGINT run')


if __name__ == '__main__':
    T.run(main)
