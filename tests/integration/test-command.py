#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""tpctl stream -- CMD: a command from its first system call, its descendants, its exit status.

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
"""

import json
import os
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
    mine = [x for x in records if x.get('pid') == pid]
    others = [x for x in records if x.get('pid') != pid]
    check(not others, f'{len(others)} records of other pids, e.g. {others[:2]} (outside generator: {other})')
    check(len(mine) == n, f'{len(mine)} records of the command, expected {n}')
    # The two ran at the same time, or the test proved nothing.
    check(mine[0]['ts'] < outside_done and mine[-1]['ts'] > outside_go,
          f'the command ran from {mine[0]["ts"]} to {mine[-1]["ts"]}, the outside generator from '
          f'{outside_go} to {outside_done}: not at the same time')
    log(f'command: exactly {len(mine)} records of pid {pid}; the outside generator ran beside it')


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


def usage(tpd):
    for args, what in ((['stream', '-p', '1', '--', 'true'], '-p with a command'),
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
    tpd.stop()
    slow_reader(ctx)


if __name__ == '__main__':
    T.run(main)
