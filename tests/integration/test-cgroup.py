#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""--cgroup PATH: the tasks of a cgroup v2 subtree as they come and go, exactly.

Two sibling cgroups a and b are made under a cgroup of the test's own in the cgroup v2 hierarchy
(the unified one of the hybrid layout too). A generator runs in each, and a third starts in b and
is moved to a while it runs:
1. A stream of a gets exactly a's calls and, of the moved one, exactly those written from its move
   on (the ts of the kernel's cgroup_attach_task record, which a third stream shows); a stream of
   b gets b's and the moved one's before the move; none of a's. A stream of their parent gets
   them all.
   The same with tpd in a cgroup namespace of its own (unshare --cgroup), where it compares the
   cgroups' ids, not their paths, the moved generator going into a cgroup made after the start.
   A fifth stream, --with cgroup, gets every call of the three with the cgroup /proc/PID/cgroup
   named at the time, as tpd sees it: the moved one's change at its move.
2. `record --cgroup`: trace-cmd reads exactly the calls of a cgroup's task.
   --with cgroup on a fork tree started in a cgroup after the stream: every call of every child
   carries that cgroup (children are in their parent's).
3. A path that is no cgroup, one not in the kernel's form, --cgroup with -p, --unit of a unit
   without a cgroup, and --unit with --cgroup are refused. (--unit's records: the system test.)
"""

import os
import signal
import subprocess
import time

import tpdtest as T
from tpdtest import check, log

EVENT = 'syscalls:sys_enter_getppid'
N = 20_000
RATE = 100_000


def by_pid(records, go_ts):
    counts = {}
    for r in records:
        check('lost' not in r, f'a loss: {r}')
        if r['ts'] >= go_ts and r.get('event') == EVENT:
            counts[r['pid']] = counts.get(r['pid'], 0) + 1
    return counts


def cgroup_of(tpd, pid):
    """/proc/PID/cgroup's v2 path as tpd reads it: in its cgroup namespace."""
    if tpd.wrapper:
        text = subprocess.run(['nsenter', '--cgroup', '-t', str(tpd.process.proc.pid), 'cat', f'/proc/{pid}/cgroup'],
                              capture_output=True, text=True, check=True).stdout
    else:
        with open(f'/proc/{pid}/cgroup') as f:
            text = f.read()
    return next(line[3:] for line in text.splitlines() if line.startswith('0::'))


def check_attributed(records, go_ts, expect):
    """Every call of the pids in expect after go_ts carries expect[pid](ts) (a path, or a tuple of
    the paths it may carry); returns the count per cgroup."""
    per = {}
    for r in records:
        check('lost' not in r, f'a loss: {r}')
        if r['ts'] < go_ts or r.get('event') != EVENT or r['pid'] not in expect:
            continue
        want = expect[r['pid']](r['ts'])
        want = want if isinstance(want, tuple) else (want,)
        check(r.get('cgroup') in want, f'pid {r["pid"]} at {r["ts"]}: "cgroup" {r.get("cgroup")!r}, expected '
                                       f'{" or ".join(map(repr, want))}')
        per[r['cgroup']] = per.get(r['cgroup'], 0) + 1
    return per


def moves(ctx, tpd, cg, target='a'):
    gen_a = ctx.gen('GEN_GETPPID', '--count', N, '--rate', RATE)
    gen_b = ctx.gen('GEN_GETPPID', '--count', N, '--rate', RATE)
    moved = ctx.gen('GEN_GETPPID', '--count', N, '--rate', RATE // 4)
    a, = gen_a.pids()
    b, = gen_b.pids()
    m, = moved.pids()
    cg.move(a, 'a')
    cg.move(b, 'b')
    cg.move(m, 'b')
    tpd.tpctl_ok('enable', EVENT)
    attach = tpd.stream('-e', 'cgroup:cgroup_attach_task')
    in_a = tpd.stream('-e', EVENT, '--cgroup', cg.path('a'))
    in_b = tpd.stream('-e', EVENT, '--cgroup', cg.path('b'))
    both = tpd.stream('-e', EVENT, '--cgroup', cg.path(''))
    attributed = tpd.stream('-e', EVENT, '--with', 'cgroup')
    before = {pid: cgroup_of(tpd, pid) for pid in (a, b, m)}
    # Live once each shows a probe of a task that was in its cgroup before it started (tpd read
    # the cgroup's tasks at the start).
    T.confirm_live([in_a], gen_a.probe)
    T.confirm_live([in_b, both, attributed], gen_b.probe)
    conns = tpd.call('io.tpd.tracing.GetStatus')['parameters']['connections']
    followed = sorted(c['followed'] for c in conns if 'followed' in c)
    check(followed == [1, 2, 3], f'tasks followed by the three streams of cgroups: {followed}')
    attribution = tpd.call('io.tpd.tracing.GetStatus')['parameters'].get('attribution', {})
    # In a cgroup namespace of its own tpd reads no tree at the start (its paths are not the kernel's):
    # only the tasks whose records came.
    seeded = 1 if tpd.wrapper else 3
    check(attribution.get('streams') == 1 and attribution.get('tasks', 0) >= seeded and attribution.get('cgroups', 0) >= 1,
          f'GetStatus attribution while a stream is --with cgroup: {attribution}')

    go_ts = min(gen_a.go(), gen_b.go(), moved.go())
    # A quarter of the way (paced), the moved generator goes to a (or a cgroup made in a since).
    time.sleep(N / (RATE // 4) / 4)
    if target != 'a':
        cg.mkdir(target)
    cg.move(m, target)
    after = cgroup_of(tpd, m)
    for g in (gen_a, gen_b, moved):
        g.wait_done(timeout=60)
    total = {a: N, b: N, m: N}
    both.drain(lambda: sum(by_pid(both.records(), go_ts).values()) >= 3 * N, timeout=30)
    in_a.drain(lambda: by_pid(in_a.records(), go_ts).get(a, 0) >= N, timeout=30)
    in_b.drain(lambda: by_pid(in_b.records(), go_ts).get(b, 0) >= N, timeout=30)
    attach.drain(lambda: any(r.get('fields', {}).get('pid') == m for r in attach.records()), timeout=10)
    attributed.drain(lambda: sum(by_pid(attributed.records(), go_ts).get(p, 0) for p in (a, b, m)) >= 3 * N,
                     timeout=30)

    moves_m = [r for r in attach.records() if r.get('fields', {}).get('pid') == m and r['ts'] >= go_ts]
    check(len(moves_m) == 1 and moves_m[0]['fields']['dst_path'] == cg.path(target),
          f'the kernel\'s records of the move: {moves_m}')
    move_ts = moves_m[0]['ts']
    ca, cb, call = by_pid(in_a.records(), go_ts), by_pid(in_b.records(), go_ts), by_pid(both.records(), go_ts)
    check(call == total, f'the parent cgroup\'s stream: {call}, expected {total}')
    check(set(ca) <= {a, m} and ca.get(a) == N, f'the stream of a: {ca} (a {a}, b {b}, moved {m})')
    check(set(cb) <= {b, m} and cb.get(b) == N, f'the stream of b: {cb} (a {a}, b {b}, moved {m})')
    m_a = [r['ts'] for r in in_a.records() if r.get('pid') == m and r['ts'] >= go_ts]
    m_b = [r['ts'] for r in in_b.records() if r.get('pid') == m and r['ts'] >= go_ts]
    check(len(m_a) + len(m_b) == N and m_a and m_b,
          f'the moved generator: {len(m_a)} records in a + {len(m_b)} in b, expected {N} split by its move')
    check(min(m_a) >= move_ts and max(m_b) < move_ts,
          f'the moved generator\'s records split at {min(m_a)}/{max(m_b)}, its move at {move_ts}')
    log(f'cgroups{" (tpd in a cgroup namespace: by ids)" if target != "a" else ""}: a {ca[a]} + {len(m_a)} of the moved one from its move at {move_ts}; '
        f'b {cb[b]} + {len(m_b)} before it; the parent all {sum(call.values())}')
    check(after != before[m], f'the move changed nothing tpd reads: {before[m]!r}')
    # In a cgroup namespace of its own tpd learns of a move when it handles the kernel's record of it
    # (docs/design.md §3, "cgroup"): a record written before the move but read after it (another
    # CPU's, read later) names the cgroup after it. Records after the move name it always.
    early = (before[m], after) if tpd.wrapper else before[m]
    per = check_attributed(attributed.records(), go_ts, {
        a: lambda ts: before[a], b: lambda ts: before[b],
        m: lambda ts: early if ts < move_ts else after})
    check(sum(per.values()) == 3 * N, f'--with cgroup: {per}, expected {3 * N} calls')
    log(f'--with cgroup: {per} (the moved one {before[m]} -> {after} at its move)')
    for s in (attach, in_a, in_b, both, attributed):
        s.stop()
    deadline = time.monotonic() + 10
    while 'attribution' in tpd.call('io.tpd.tracing.GetStatus')['parameters']:
        check(time.monotonic() < deadline, 'tpd keeps the tasks\' cgroups after the last stream --with cgroup')
        time.sleep(0.05)
    return a


def record(ctx, tpd, cg):
    gen = ctx.gen('GEN_GETPPID', '--count', N)
    outside = ctx.gen('GEN_GETPPID', '--count', N)
    pid, = gen.pids()
    outside.pids()
    cg.move(pid, 'a')
    out = os.path.join(ctx.tmpdir, 'a.dat')
    rec = T.Process(ctx, 'record', [T.env_program('TPCTL'), '--socket', tpd.socket, 'record', '-o', out,
                                    '-e', EVENT, '--cgroup', cg.path('a')])
    deadline = time.monotonic() + 10
    while not [f for f in os.listdir(ctx.tmpdir) if f.startswith('.tpctl-record-')]:
        check(rec.running() and time.monotonic() < deadline, f'tpctl record did not start: {rec.stderr_text()!r}')
        time.sleep(0.02)
    gen.go()
    outside.go()
    gen.wait_done(timeout=60)
    outside.wait_done(timeout=60)
    rec.signal(signal.SIGINT)
    check(rec.wait(30) == 0, f'tpctl record --cgroup: {rec.stderr_text()!r}')
    records, dropped = T.trace_cmd_report(out)
    pids = {r['pid'] for r in records}
    check(not dropped and len(records) == N and pids == {pid},
          f'trace-cmd reads {len(records)} records of {pids}, expected {N} of {pid}')
    log(f'record --cgroup: trace-cmd reads exactly {len(records)} records of the cgroup\'s task')


def fork_tree(ctx, tpd, cg):
    """Children forked after the stream began carry their parent's cgroup."""
    tree = ctx.gen('GEN_FORK', '--count', 1000, 3, 2)
    root, = tree.pids()
    cg.move(root, 'b')
    want = cgroup_of(tpd, root)
    follow = tpd.stream('-e', EVENT, '-p', str(root), '--follow')
    attributed = tpd.stream('-e', EVENT, '--with', 'cgroup')
    T.confirm_live([follow, attributed], tree.probe)
    go_ts = tree.go()
    fields = tree.wait_done(timeout=60)
    expected, processes = fields[1], fields[2]
    check(processes == 10 and expected == 10 * 1000, f'gen-fork reported {fields}')
    follow.drain(lambda: sum(by_pid(follow.records(), go_ts).values()) >= expected, timeout=30)
    pids = by_pid(follow.records(), go_ts)
    check(len(pids) == processes, f'the tree\'s pids: {pids}')
    attributed.drain(lambda: sum(by_pid(attributed.records(), go_ts).get(p, 0) for p in pids) >= expected,
                     timeout=30)
    per = check_attributed(attributed.records(), go_ts, {p: lambda ts: want for p in pids})
    check(per == {want: expected}, f'--with cgroup of the fork tree: {per}, expected {expected} in {want}')
    log(f'--with cgroup: {expected} calls of a tree of {processes} processes forked in {want}, each named so')
    follow.stop()
    attributed.stop()


def refusals(tpd, cg):
    for args, what in ((['--cgroup', cg.path('') + '/none'], 'no such cgroup'),
                       (['--cgroup', cg.path('a') + '/'], 'a path not in the kernel\'s form'),
                       (['--cgroup', cg.path('a') + '/../b'], 'a path with ..'),
                       (['--cgroup', cg.path('a'), '-p', '1'], '--cgroup with -p')):
        r = tpd.tpctl('stream', '-e', EVENT, *args)
        check(r.returncode == 1 and 'cgroup' in r.stderr, f'{what}: tpctl exited {r.returncode}: {r.stderr!r}')
    r = tpd.tpctl('stream', '--unit', 'basic.target')
    check(r.returncode == 1 and 'have a cgroup' in r.stderr, f'--unit of a target: {r.returncode} {r.stderr!r}')
    r = tpd.tpctl('stream', '--unit', 'x', '--cgroup', '/')
    check(r.returncode == 2, f'--unit with --cgroup: {r.returncode} {r.stderr!r}')
    for w in (['stack'], 'cgroup', [1]):
        reply = tpd.call('io.tpd.tracing.Stream', {'events': [EVENT], 'with': w}, more=True)
        check(reply.get('error') == 'org.varlink.service.InvalidParameter' and
              reply.get('parameters', {}).get('parameter') == 'with', f'Stream with {w!r}: {reply}')
    reply = tpd.call('io.tpd.tracing.Record', {'events': [EVENT], 'with': ['cgroup']}, upgrade=True)
    check(reply.get('error') == 'org.varlink.service.InvalidParameter', f'Record with "with": {reply}')
    r = tpd.tpctl('stream', '--with', 'pid')
    check(r.returncode == 2 and '--with' in r.stderr, f'--with pid: {r.returncode} {r.stderr!r}')
    log('refusals: a missing cgroup, two malformed paths, --cgroup with -p, --unit of a target, '
        '--unit with --cgroup, "with" other than ["cgroup"], Record with "with"')


def main(ctx):
    cg = ctx.cgroups(('a', 'b'))
    tpd = ctx.tpd(args=['--buffer-size-kb', '8192', '--stream-queue-kb', '65536'])
    # Built with AddressSanitizer, a generator that exits forks LeakSanitizer's tracer into its
    # cgroup, a task the streams rightly select. tpd (started above) still checks.
    os.environ['ASAN_OPTIONS'] = os.environ.get('ASAN_OPTIONS', '') + ':detect_leaks=0'
    refusals(tpd, cg)
    moves(ctx, tpd, cg)
    record(ctx, tpd, cg)
    fork_tree(ctx, tpd, cg)
    tpd.stop()
    # In a cgroup namespace of its own tpd cannot compare the kernel's paths with its own: it
    # compares the cgroups' ids, read again for a cgroup made after the stream began.
    tpd = ctx.tpd(args=['--buffer-size-kb', '8192', '--stream-queue-kb', '65536'], wrapper=('unshare', '--cgroup'))
    moves(ctx, tpd, cg, target='a/late')
    tpd.stop()


if __name__ == '__main__':
    T.run(main)
