#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""tpctl stream -- CMD and tpctl record -- CMD: a command from its first system call, its
descendants, its exit status.

1. `-- gen-getppid --count 100000 --no-wait`, while an outside generator runs at the same time:
   exactly 100,000 records, all of the command's pid, none of the outside one's; tpctl ends once
   they are all out, with the command's status 0.
2. `-- gen-fork 3 2 2`: every call of the 22 processes of a three-level fork tree.
3. The command's exit status is tpctl's: 3; a signal that kills the command kills tpctl alike; a
   command that cannot be run is 127, as in a shell.
4. SIGTERM sent to tpctl reaches the command (a `sleep` that would run for a minute).
5. Nobody reads tpctl's output while the command runs: the stream's losses (cause client) come
   before its end, and records + lost = calls, exactly.
6. Usage: -p with a command, a command for another verb, and `--` alone are refused.
7. `record -o x.dat -- gen-getppid --count 100000` beside an outside generator: trace-cmd reads
   the file, with exactly the command's 100,000 records and nothing else; tpctl ends once they
   are in, with the command's status.
8. `record -o x.ndjson -- gen-fork 3 2 2`: every call of the 22 processes; `record -- sh -c
   'exit 3'` exits 3.
9. `record -p SHELL --follow`: trace-cmd reads exactly the calls of the children the shell started
   after the recording began.
10. `top -e EVENT -- gen-fork 3 2 2`: the last block of top's lines counts every call of the 22
   processes, each under its pid, nothing else; `top -- sh -c 'exit 3'` exits 3; top's EVENT
   without a command is refused.
"""

import json
import os
import re
import signal
import subprocess
import time

import tpdtest as T
from tpdtest import check, log

EVENT = 'syscalls:sys_enter_getppid'


def run_command(tpd, cmd, timeout=60):
    argv = [T.env_program('TPCTL'), '--socket', tpd.socket, 'stream', '-e', EVENT, '--', *cmd]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    records = [json.loads(line) for line in r.stdout.splitlines() if line.startswith('{')]
    other = [line for line in r.stdout.splitlines() if not line.startswith('{')]
    return r, records, other


def only_the_command(records, mine, n, outside):
    """Exactly n records, each the command's (mine(record)), while the outside generator (pid, go
    and done ts) ran at the same time."""
    other, go, done = outside
    others = [x for x in records if not mine(x)]
    check(not others, f'{len(others)} records not of the command, e.g. {others[:2]} (outside generator: {other})')
    check(len(records) == n, f'{len(records)} records of the command, expected {n}')
    # The two ran at the same time, or the test proved nothing.
    check(records[0]['ts'] < done and records[-1]['ts'] > go,
          f'the command ran from {records[0]["ts"]} to {records[-1]["ts"]}, the outside generator from '
          f'{go} to {done}: not at the same time')


def exact(ctx, tpd):
    # The generator's lines go to a file of their own: the command shares tpctl's stdout.
    out = os.path.join(ctx.tmpdir, 'command.out')
    n = 100_000
    # Paced, so that the two together stay within what tpd reads without loss on a small machine
    # (an instrumented tpd among them).
    outside = ctx.gen('GEN_GETPPID', '--count', n, '--rate', 200_000)
    other, = outside.pids()
    outside_go = outside.go()
    r, records, lines = run_command(tpd, [T.env_program('GEN_GETPPID'), '--count', str(n), '--no-wait',
                                          '--rate', '200000', '--out', out])
    outside_done = outside.wait_done(timeout=60)[0]
    check(r.returncode == 0, f'tpctl exited with {r.returncode}; stderr {r.stderr!r}')
    check(not lines, f'lines other than records: {lines[:3]}')
    with open(out) as f:
        pid = int(f.readline())      # the generator's own first line: its pid
    lost = [x for x in records if 'lost' in x]
    check(not lost, f'lost records: {lost[:3]}')
    only_the_command(records, lambda x: x.get('pid') == pid, n, (other, outside_go, outside_done))
    log(f'command: exactly {n} records of pid {pid}; the outside generator ran beside it')


def fork_tree(tpd):
    n = 1000
    r, records, lines = run_command(tpd, [T.env_program('GEN_FORK'), '--count', str(n), '--no-wait', '--out',
                                          '/dev/null', '3', '2', '2'])
    check(r.returncode == 0, f'tpctl -- gen-fork exited with {r.returncode}; stderr {r.stderr!r}')
    by_pid = {}
    for x in records:
        by_pid[x['pid']] = by_pid.get(x['pid'], 0) + 1
    short = {p: k for p, k in by_pid.items() if k != n}
    check(len(by_pid) == 22 and not short, f'records by pid: {sorted(by_pid.items())}')
    log(f'fork tree: {sum(by_pid.values())} records, {n} of each of {len(by_pid)} pids')


def statuses(tpd):
    r, _, _ = run_command(tpd, ['sh', '-c', 'exit 3'])
    check(r.returncode == 3, f'-- sh -c "exit 3": tpctl exited with {r.returncode}; stderr {r.stderr!r}')
    r, _, _ = run_command(tpd, ['sh', '-c', 'kill -TERM $$'])
    check(r.returncode == -signal.SIGTERM, f'a command killed by SIGTERM: tpctl ended with {r.returncode}')
    r, _, _ = run_command(tpd, ['/nonexistent/command'])
    check(r.returncode == 127 and 'cannot run' in r.stderr,
          f'a missing command: tpctl exited with {r.returncode}, stderr {r.stderr!r}')
    log('statuses: 3, SIGTERM, 127')


def forwarding(tpd):
    argv = [T.env_program('TPCTL'), '--socket', tpd.socket, 'stream', '-e', EVENT, '--', 'sleep', '60']
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    time.sleep(0.5)
    start = time.monotonic()
    p.send_signal(signal.SIGTERM)
    try:
        rc = p.wait(10)
    except subprocess.TimeoutExpired:
        p.kill()
        T.fail('tpctl -- sleep 60 did not end within 10 s of SIGTERM')
    check(rc == -signal.SIGTERM, f'SIGTERM to tpctl -- sleep 60: ended with {rc}; stderr {p.stderr.read()!r}')
    log(f'SIGTERM reached the command: tpctl ended {time.monotonic() - start:.2f} s later, as it did')


def slow_reader(ctx):
    """Nobody reads tpctl's output while the command runs: tpd's queue for the stream (64 KiB)
    overflows. The lost records come before the end all the same, and count exactly what is
    missing."""
    tpd = ctx.tpd(args=['--buffer-size-kb', '8192', '--stream-queue-kb', '64'])
    out = os.path.join(ctx.tmpdir, 'slow.out')
    n = 50_000
    argv = [T.env_program('TPCTL'), '--socket', tpd.socket, 'stream', '-e', EVENT, '--',
            T.env_program('GEN_GETPPID'), '--count', str(n), '--no-wait', '--out', out]
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while not (os.path.exists(out) and 'done' in open(out).read()):
        check(time.monotonic() < deadline and p.poll() is None, 'the command did not finish')
        time.sleep(0.05)
    stdout, stderr = p.communicate(timeout=60)
    check(p.returncode == 0, f'tpctl exited with {p.returncode}; stderr {stderr!r}')
    with open(out) as f:
        pid = int(f.readline())
    records = [json.loads(line) for line in stdout.decode().splitlines()]
    lost = sum(x['lost'] for x in records if x.get('cause') == 'client')
    mine = sum(1 for x in records if x.get('pid') == pid)
    check(lost > 0, f'{mine} records and no loss: the queue of 64 KiB held them all?')
    check(mine + lost == n, f'{mine} records + {lost} lost = {mine + lost}, expected {n}')
    log(f'slow reader: {mine} records and {lost} lost (client), {n} in all, before the end')
    tpd.stop()


SUMMARY_RE = re.compile(r'tpctl: (\d+) records in 1 file, (\d+) lost')


def run_record(tpd, out, cmd, timeout=60):
    argv = [T.env_program('TPCTL'), '--socket', tpd.socket, 'record', '-o', out, '-e', EVENT, '--', *cmd]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    m = SUMMARY_RE.search(r.stderr)
    return r, (int(m[1]), int(m[2])) if m else None


def record_exact(ctx, tpd):
    """The data file of a command, read by trace-cmd: its records and no other's."""
    out = os.path.join(ctx.tmpdir, 'command.dat')
    gen_out = os.path.join(ctx.tmpdir, 'record.out')
    n = 100_000
    outside = ctx.gen('GEN_GETPPID', '--count', n, '--rate', 200_000)
    other, = outside.pids()
    outside_go = outside.go()
    r, summary = run_record(tpd, out, [T.env_program('GEN_GETPPID'), '--count', str(n), '--no-wait',
                                       '--rate', '200000', '--out', gen_out])
    outside_done = outside.wait_done(timeout=60)[0]
    check(r.returncode == 0, f'tpctl record exited with {r.returncode}; stderr {r.stderr!r}')
    check(summary == (n, 0), f'tpctl record said {r.stderr!r}, expected {n} records, 0 lost')
    with open(gen_out) as f:
        pid = int(f.readline())
    records, dropped = T.trace_cmd_report(out)
    check(not dropped, f'trace-cmd reports dropped events: {dropped}')
    only_the_command(records, lambda x: x['pid'] == pid and x['event'] == 'sys_enter_getppid', n,
                     (other, outside_go, outside_done))
    log(f'record: trace-cmd reads exactly {n} records of pid {pid}; the outside generator ran beside it')


def record_tree(ctx, tpd):
    n = 1000
    out = os.path.join(ctx.tmpdir, 'tree.ndjson')
    r, summary = run_record(tpd, out, [T.env_program('GEN_FORK'), '--count', str(n), '--no-wait', '--out',
                                       '/dev/null', '3', '2', '2'])
    check(r.returncode == 0, f'tpctl record -- gen-fork exited with {r.returncode}; stderr {r.stderr!r}')
    by_pid = {}
    with open(out) as f:
        for line in f:
            x = json.loads(line)
            check('lost' not in x and 'notice' not in x, f'a line that is no record of the tree: {line!r}')
            by_pid[x['pid']] = by_pid.get(x['pid'], 0) + 1
    short = {p: k for p, k in by_pid.items() if k != n}
    check(len(by_pid) == 22 and not short, f'records by pid: {sorted(by_pid.items())}')
    check(summary == (22 * n, 0), f'tpctl record said {r.stderr!r}')
    r, _ = run_record(tpd, os.path.join(ctx.tmpdir, 'exit3.dat'), ['sh', '-c', 'exit 3'])
    check(r.returncode == 3, f'record -- sh -c "exit 3": tpctl exited with {r.returncode}; stderr {r.stderr!r}')
    log(f'record: the fork tree\'s {sum(by_pid.values())} records, {n} of each of {len(by_pid)} pids; status 3')


def record_follow(ctx, tpd):
    """A recording of a shell with --follow holds the calls of the children it starts later."""
    out = os.path.join(ctx.tmpdir, 'shell.dat')
    gen = T.env_program('GEN_GETPPID')
    shell = subprocess.Popen(['sh'], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
    argv = [T.env_program('TPCTL'), '--socket', tpd.socket, 'record', '-o', out, '-e', EVENT,
            '-p', str(shell.pid), '--follow']
    rec = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        # The file is made once tpd answered, and the selection is live with its answer.
        deadline = time.monotonic() + 10
        while not [f for f in os.listdir(ctx.tmpdir) if f.startswith('.tpctl-record-')]:
            check(rec.poll() is None and time.monotonic() < deadline, 'tpctl record did not start')
            time.sleep(0.02)
        shell.stdin.write(f'{gen} --count 3000 --no-wait >/dev/null\n'
                          f'{gen} --count 2000 --no-wait >/dev/null &\n'
                          f'( {gen} --count 1000 --no-wait >/dev/null )\n'
                          'wait\necho done\n')
        check(shell.stdout.readline().strip() == 'done', 'the shell did not finish')
        rec.send_signal(signal.SIGINT)
        rc = rec.wait(30)
        stderr = rec.stderr.read()
        check(rc == 0, f'tpctl record -p --follow exited with {rc}; stderr {stderr!r}')
    finally:
        if rec.poll() is None:
            rec.kill()
        shell.stdin.close()
        shell.wait(10)
    records, dropped = T.trace_cmd_report(out)
    check(not dropped, f'trace-cmd reports dropped events: {dropped}')
    pids = {x['pid'] for x in records}
    check(len(records) == 6000 and len(pids) == 3,
          f'trace-cmd lists {len(records)} records of {len(pids)} pids, expected 6000 of 3')
    log(f'record --follow: trace-cmd reads the {len(records)} calls of the shell\'s 3 children')


def top_command(tpd):
    n = 500
    argv = [T.env_program('TPCTL'), '--socket', tpd.socket, 'top', '-d', '0.2', '-e', EVENT, '--',
            T.env_program('GEN_FORK'), '--count', str(n), '--no-wait', '--out', '/dev/null', '3', '2', '2']
    r = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    check(r.returncode == 0, f'tpctl top -- gen-fork exited with {r.returncode}; stderr {r.stderr!r}')
    blocks = [b for b in r.stdout.split('\n\n') if b.startswith('top ')]
    check(blocks, f'no block of top lines: {r.stdout[-2000:]!r}')
    events, procs = {}, {}
    for line in blocks[-1].splitlines():
        kind, *words = line.split(' ')
        kv = dict(w.split('=', 1) for w in words)
        if kind == 'event':
            events[kv['name']] = int(kv['total'])
        elif kind == 'process':
            check(kv['pid'] != 'other', f'an "other" row: {line}')
            procs[int(kv['pid'])] = int(kv['total'])
    check(events == {EVENT: 22 * n}, f'top -- gen-fork: events {events}, expected {22 * n} of {EVENT}')
    short = {p: k for p, k in procs.items() if k != n}
    check(len(procs) == 22 and not short, f'top -- gen-fork: by pid {sorted(procs.items())}')
    r = tpd.tpctl('top', '--', 'sh', '-c', 'exit 3')
    check(r.returncode == 3, f'top -- sh -c "exit 3": tpctl exited with {r.returncode}; stderr {r.stderr!r}')
    log(f'top -- gen-fork: {22 * n} calls counted, {n} for each of the 22 pids, in {len(blocks)} blocks; '
        f'top -- sh -c "exit 3" exits 3')


def usage(tpd):
    for args, what in ((['stream', '-p', '1', '--', 'true'], '-p with a command'),
                       (['record', '-o', '/nonexistent/x.dat', '-p', '1', '--', 'true'], '-p with a command'),
                       (['record', '-o', '/nonexistent/x.dat', '--follow'], '--follow without -p'),
                       (['top', '--follow'], '--follow for top'),
                       (['top', '-e', EVENT], 'an event for top without a command'),
                       (['status', '--', 'true'], 'a command for status'),
                       (['stream', '--'], '-- alone')):
        r = tpd.tpctl(*args)
        check(r.returncode == 2, f'{what}: tpctl exited with {r.returncode}, stderr {r.stderr!r}')


def main(ctx):
    # Room in the kernel's buffer and the stream's queue for a whole run: what is tested is that
    # no record of the command is missed or taken from another, not how fast tpd and tpctl read
    # (the benchmark says that).
    tpd = ctx.tpd(args=['--buffer-size-kb', '8192', '--stream-queue-kb', '65536'])
    # Built with AddressSanitizer, a generator that exits forks LeakSanitizer's tracer, a
    # descendant the stream rightly follows. tpd (started above) still checks.
    os.environ['ASAN_OPTIONS'] = os.environ.get('ASAN_OPTIONS', '') + ':detect_leaks=0'
    usage(tpd)
    exact(ctx, tpd)
    fork_tree(tpd)
    statuses(tpd)
    forwarding(tpd)
    record_exact(ctx, tpd)
    record_tree(ctx, tpd)
    record_follow(ctx, tpd)
    top_command(tpd)
    tpd.stop()
    slow_reader(ctx)


if __name__ == '__main__':
    T.run(main)
