#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Concurrent streams: two `tpctl stream -e syscalls:sys_enter_getppid` at once get the same records.

A known workload (10,000 getppid calls of one pinned process, kernel filter on its pid) runs while
both streams are live. Records with ts at or after the generator's "go" (boot clock) belong to the
run: each stream must have exactly N of them, nothing lost, and the two lists of lines must be
identical byte for byte and in the same order (each record is encoded once and shared, docs/design.md §1).
Closing one stream must not disturb the other: afterwards the survivor still receives records.
"""


import tpdtest as T
from tpdtest import check, log

EVENT = 'syscalls:sys_enter_getppid'
N = 10_000


def main(ctx):
    tpd = ctx.tpd()
    gen = ctx.gen('GEN_GETPPID', '--count', N, '--cpu', 0)
    pid, = gen.pids()
    tpd.tpctl_ok('enable', EVENT, '--filter', f'common_pid == {pid}')

    a = tpd.stream('-e', EVENT)
    b = tpd.stream('-e', EVENT)
    T.confirm_live([a, b], gen.probe)
    go_ts = gen.go()
    gen.wait_done(timeout=60)

    def run_lines(s):
        out = []
        for line in s.lines:
            rec = T.parse_record(line)
            check('lost' not in rec, f'stream {s.name} lost records: {line!r}')
            check(rec['event'] == EVENT and rec['pid'] == pid, f'unexpected record in {s.name}: {line!r}')
            if rec['ts'] >= go_ts:
                out.append(line)
        return out

    for s in (a, b):
        s.drain(lambda s=s: len(run_lines(s)) >= N, timeout=30)
    la, lb = run_lines(a), run_lines(b)
    log(f'stream A: {a.nlines} lines ({len(la)} of the run), stream B: {b.nlines} lines ({len(lb)} of the run), '
        f'{gen.probes} probes')
    check(len(la) == N, f'stream A got {len(la)} records of the run, expected {N}')
    check(len(lb) == N, f'stream B got {len(lb)} records of the run, expected {N}')
    if la != lb:
        sa, sb = set(la), set(lb)
        only_a, only_b = sorted(sa - sb)[:3], sorted(sb - sa)[:3]
        if sa == sb:
            first = next(i for i, (x, y) in enumerate(zip(la, lb)) if x != y)
            T.fail(f'same records in a different order; first difference at {first}: {la[first]!r} vs {lb[first]!r}')
        T.fail(f'streams differ: only in A {only_a}, only in B {only_b}')

    # One stream goes away; the other keeps being served.
    a.stop()
    gen2 = ctx.gen('GEN_GETPPID', '--count', 100, '--cpu', 0)
    pid2, = gen2.pids()
    tpd.tpctl_ok('enable', EVENT, '--filter', f'common_pid == {pid2}')
    before = b.nlines
    gen2.go()
    gen2.wait_done()
    b.wait_for(lambda: b.nlines >= before + 100, 10, '100 more records after the other stream closed')
    b.stop()
    check(b.nlines == before + 100, f'survivor got {b.nlines - before} records of 100')
    tpd.stop()


if __name__ == '__main__':
    T.run(main)
