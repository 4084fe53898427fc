#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""`tpctl top --by unit` and `--by cgroup`: each event's counts summed by the systemd unit, or the
cgroup, its processes are in.

Cgroups of the test's own are named as systemd names units: x.service, y.scope and below it
y.scope/inner (a cgroup of a unit's own, as a container's payload), and z (not a unit: it belongs to
the root slice, "-.slice"). A generator in each makes a known number of getppid calls while top
counts, paced over a few refreshes and exiting before the last ones (top keeps the group of a
process it saw running), over a pipe (key=value lines); the last block's rows equal, exactly: x.service the first
generator's calls, y.scope the calls of the two under it, -.slice at least those of z; by cgroup,
each cgroup its own generator's calls. An unknown --by is a usage error.
"""

import os
import signal
import time

import tpdtest as T
from tpdtest import check, log

EVENT = 'syscalls:sys_enter_getppid'
COUNTS = {'x.service': 3000, 'y.scope': 2000, 'y.scope/inner': 1000, 'z': 500}


def parse_rows(text, kind):
    """The rows of the last complete block: {name: total} of `kind name=EVENT kind=NAME ...` lines."""
    blocks = text.split('\n\n')
    complete = [b for b in blocks[:-1] if b.startswith('top ')]
    check(complete, f'no complete block of top lines:\n{text[-2000:]}')
    rows = {}
    for line in complete[-1].splitlines():
        words = line.split(' ')
        if words[0] != kind:
            continue
        kv = dict(w.split('=', 1) for w in words[1:])
        if kv['name'] == EVENT:
            rows[kv[kind]] = int(kv['total'])
    return rows


def run(ctx, tpd, cg, by):
    gens = {}
    for name, n in COUNTS.items():
        g = ctx.gen('GEN_GETPPID', '--count', n, '--rate', n)
        pid, = g.pids()
        cg.move(pid, name)
        gens[name] = g
    out = os.path.join(ctx.tmpdir, f'top-{by}.txt')
    with open(out, 'wb') as f:
        top = T.Process(ctx, f'top-{by}', [T.env_program('TPCTL'), '--socket', tpd.socket, 'top', '--by', by,
                                            '-d', '0.3'], stdout=f)
    # Counting started once top printed its first block (its second call).
    deadline = time.monotonic() + 10 * T.SLOWDOWN
    while b'\n\n' not in open(out, 'rb').read():
        check(top.running() and time.monotonic() < deadline, f'top printed nothing: {top.stderr_text()!r}')
        time.sleep(0.05)
    for g in gens.values():
        g.go()
    for g in gens.values():
        g.wait_done(timeout=60)
    # Two refreshes more: tpd read and counted every call.
    n = open(out, 'rb').read().count(b'\n\n')
    deadline = time.monotonic() + 10 * T.SLOWDOWN
    while open(out, 'rb').read().count(b'\n\n') < n + 3:
        check(top.running() and time.monotonic() < deadline, f'top stopped: {top.stderr_text()!r}')
        time.sleep(0.05)
    top.signal(signal.SIGINT)
    check(top.wait(10) == 0, f'top --by {by} exited with {top.proc.returncode}: {top.stderr_text()!r}')
    return parse_rows(open(out).read(), 'unit' if by == 'unit' else 'cgroup')


def main(ctx):
    cg = ctx.cgroups(tuple(COUNTS))
    tpd = ctx.tpd()
    tpd.tpctl_ok('enable', EVENT)

    rows = run(ctx, tpd, cg, 'unit')
    check(rows.get('x.service') == COUNTS['x.service'], f'--by unit: x.service {rows}')
    check(rows.get('y.scope') == COUNTS['y.scope'] + COUNTS['y.scope/inner'], f'--by unit: y.scope {rows}')
    check(rows.get('-.slice', 0) >= COUNTS['z'], f'--by unit: -.slice {rows}')
    log(f'--by unit: {rows}')

    rows = run(ctx, tpd, cg, 'cgroup')
    for name, n in COUNTS.items():
        check(rows.get(cg.path(name)) == n, f'--by cgroup: {cg.path(name)}: {rows.get(cg.path(name))}, expected {n}: {rows}')
    log(f'--by cgroup: {rows}')

    r = tpd.tpctl('top', '--by', 'comm')
    check(r.returncode == 2 and '--by' in r.stderr, f'--by comm: {r.returncode} {r.stderr!r}')
    tpd.stop()


if __name__ == '__main__':
    T.run(main)
