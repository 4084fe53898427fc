#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""-p PID --follow: a process and its descendants, exactly.

1. A fork tree three levels deep (gen-fork 3 2 2: 22 processes), each process making N getppid
   calls at once after its fork, while an outside generator makes M more. The following stream
   gets exactly N calls of each of the 22 pids and none of the outside one's: no child's first
   calls are missed, though they may be read from another CPU before its fork. A stream without
   a selection beside it sees none of the fork and exit records tpd reads for the follower.
2. A shell named with -p --follow that starts children (one in the background, one in a
   subshell) after the stream began: exactly their calls.
3. A child the shell forked before the stream began (tpd finds it in /proc), and its children.
"""

import os
import subprocess
import time

import tpdtest as T
from tpdtest import check, log

EVENT = 'syscalls:sys_enter_getppid'
HIDDEN = ('sched:sched_process_fork', 'sched:sched_process_exit')
N = 2_000
M = 30_000


def run_records(s, go_ts):
    return [r for r in s.records() if 'lost' in r or r['ts'] >= go_ts]


def fork_tree(ctx, tpd):
    tree = ctx.gen('GEN_FORK', '--count', N, 3, 2, 2)
    outside = ctx.gen('GEN_GETPPID', '--count', M)
    root, = tree.pids()
    other, = outside.pids()
    tpd.tpctl_ok('enable', EVENT)
    # The unselected stream first: it would see any record of tpd's own from the first reads on.
    everything = tpd.stream()
    follow = tpd.stream('-e', EVENT, '-p', str(root), '--follow')

    def probe():
        tree.probe()
    T.confirm_live([follow], probe)
    # The unselected stream is live once it shows the outside generator's probe.
    T.confirm_live([everything], outside.probe)
    # tpd says what it holds, and for whom.
    events = {e['name']: e for e in tpd.call('io.tpd.tracing.GetStatus')['parameters']['events']}
    for name in HIDDEN:
        check(events.get(name, {}).get('internal') is True and events[name]['streams'] == 0,
              f'GetStatus while following: {name} is {events.get(name)}')
    conns = tpd.call('io.tpd.tracing.GetStatus')['parameters']['connections']
    followed = [c for c in conns if 'followed' in c]
    check(len(followed) == 1 and followed[0]['followed'] >= 1 and followed[0]['follow_refused'] == 0,
          f'GetStatus connections while following: {followed}')
    status = tpd.tpctl_ok('status').stdout
    check('tpd (follow)' in status, f'tpctl status does not show tpd\'s own hold:\n{status}')

    go_ts = min(tree.go(), outside.go())
    fields = tree.wait_done(timeout=60)
    outside.wait_done(timeout=60)
    expected, processes = fields[1], fields[2]
    check(processes == 22 and expected == 22 * N, f'gen-fork reported {fields}')

    follow.drain(lambda: len(run_records(follow, go_ts)) >= expected, timeout=30)
    follow.stop()
    recs = run_records(follow, go_ts)
    lost = [r for r in recs if 'lost' in r]
    check(not lost, f'the following stream lost records: {lost[:3]}')
    by_pid = {}
    for r in recs:
        by_pid[r['pid']] = by_pid.get(r['pid'], 0) + 1
    check(other not in by_pid, f'{by_pid.get(other)} records of the outside generator {other}')
    check(len(by_pid) == processes, f'{len(by_pid)} pids, expected {processes}: {sorted(by_pid.items())}')
    short = {p: n for p, n in by_pid.items() if n != N}
    check(not short, f'pids with other than {N} calls: {sorted(short.items())[:8]}')
    check(len(recs) == expected, f'{len(recs)} records, expected {expected}')
    log(f'fork tree: {len(recs)} records of {len(by_pid)} pids, {N} each; none of pid {other}')

    # The stream without a selection got the outside generator's calls, and no record of tpd's.
    everything.drain(lambda: sum(1 for r in run_records(everything, go_ts)
                                 if r.get('pid') == other) >= M, timeout=30)
    everything.stop()
    events = {r.get('event') for r in everything.records() if 'event' in r}
    hidden = events & set(HIDDEN)
    check(not hidden, f'a stream that did not ask got records of {sorted(hidden)}')
    got = sum(1 for r in run_records(everything, go_ts) if r.get('pid') == other)
    check(got == M, f'the unselected stream got {got} calls of the outside generator, expected {M}')
    log(f'unselected stream: {got} calls of the outside generator; events {sorted(events)}')


def shell_follow(tpd, shell):
    """A following stream of the shell, live (a child of the shell seen, which only following it
    sees) and past every probe. Returns it and the boot-clock ns before the run."""
    follow = tpd.stream('-e', EVENT, '-p', str(shell.pid), '--follow')

    def probe():
        shell.stdin.write(f'{T.env_program("GEN_GETPPID")} --count 1 --no-wait >/dev/null\n')
    T.confirm_live([follow], probe)
    # Probes written while the first one ran come before the run.
    shell.stdin.write('echo probed\n')
    check(shell.stdout.readline().strip() == 'probed', 'the shell did not answer')
    return follow, T.boottime_ns()


def shell_records(shell, follow, go_ts, expected):
    """Waits for the shell's children, then for the stream's records of them."""
    shell.stdin.write('wait\necho done\n')
    check(shell.stdout.readline().strip() == 'done', 'the shell did not finish')
    follow.drain(lambda: len(run_records(follow, go_ts)) >= expected, timeout=30)
    follow.stop()
    recs = run_records(follow, go_ts)
    check(not [r for r in recs if 'lost' in r], 'the shell\'s stream lost records')
    return recs, {r['pid'] for r in recs}


def shell_children(ctx, tpd):
    gen = T.env_program('GEN_GETPPID')
    shell = subprocess.Popen(['sh'], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
    try:
        follow, go_ts = shell_follow(tpd, shell)
        shell.stdin.write(f'{gen} --count 3000 --no-wait >/dev/null\n'
                          f'{gen} --count 2000 --no-wait >/dev/null &\n'
                          f'( {gen} --count 1000 --no-wait >/dev/null; true )\n')
        recs, pids = shell_records(shell, follow, go_ts, 6000)
        check(len(recs) == 6000, f'{len(recs)} records of the shell\'s children, expected 6000')
        check(len(pids) == 3, f'records of {len(pids)} pids, expected the 3 generators')
        log(f'shell: {len(recs)} records of its children started after the stream began')
    finally:
        shell.stdin.close()
        shell.wait(10)


def existing_children(ctx, tpd):
    """A child the shell forked before the stream began is followed too, as are its own children."""
    fork = T.env_program('GEN_FORK')
    fifo = os.path.join(ctx.tmpdir, 'go.fifo')
    os.mkfifo(fifo)
    shell = subprocess.Popen(['sh'], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
    try:
        # gen-fork waits for its go on the fifo: it exists, idle, before the stream starts.
        shell.stdin.write(f'{fork} --count 500 2 <{fifo} >/dev/null & echo started\n')
        check(shell.stdout.readline().strip() == 'started', 'the shell did not start gen-fork')
        follow, go_ts = shell_follow(tpd, shell)
        with open(fifo, 'w') as f:
            f.write('go\n')
        recs, pids = shell_records(shell, follow, go_ts, 1500)
        check(len(recs) == 1500 and len(pids) == 3,
              f'{len(recs)} records of {len(pids)} pids, expected 1500 of gen-fork and its 2 children')
        log(f'existing child: {len(recs)} records of {len(pids)} pids')
    finally:
        shell.stdin.close()
        shell.wait(10)


def refusals(tpd):
    """follow needs pids; tpctl says so before calling tpd."""
    reply = tpd.call('io.tpd.tracing.Stream', {'events': [EVENT], 'follow': True}, more=True)
    check(reply.get('error') == 'org.varlink.service.InvalidParameter' and
          reply.get('parameters', {}).get('parameter') == 'follow',
          f'Stream with follow and no pids: expected InvalidParameter follow, got {reply}')
    r = tpd.tpctl('stream', '-e', EVENT, '--follow')
    check(r.returncode == 2 and '-p' in r.stderr,
          f'tpctl stream --follow without -p: exit {r.returncode}, stderr {r.stderr!r}')
    # A stream that asks for shared memory gets the socket: its selection changes with each fork.
    with tpd.varlink() as v:
        v.send('io.tpd.tracing.Stream', {'events': [EVENT], 'pids': [os.getpid()], 'follow': True,
                                         'transport': 'shm'}, upgrade=True)
        reply = v.recv(5)
    check(reply and reply.get('parameters', {}).get('transport') == 'socket',
          f'a following stream that asked for shm: expected "transport":"socket", got {reply}')


def main(ctx):
    tpd = ctx.tpd()
    refusals(tpd)
    # Built with AddressSanitizer, a generator that exits forks LeakSanitizer's tracer, which makes
    # getppid calls: a descendant the stream rightly follows. tpd (started above) still checks.
    os.environ['ASAN_OPTIONS'] = os.environ.get('ASAN_OPTIONS', '') + ':detect_leaks=0'
    fork_tree(ctx, tpd)
    shell_children(ctx, tpd)
    existing_children(ctx, tpd)
    # Following ended with the streams: tpd's own hold is gone.
    enabled = T.enabled_events(tpd.instance_dir)
    check(not enabled & set(HIDDEN), f'still enabled after the followers ended: {sorted(enabled)}')
    tpd.stop()


if __name__ == '__main__':
    T.run(main)
