#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Errors: bad input gets an error (or a closed connection) and changes nothing else.

- `tpctl enable no_such:event` exits 1 naming the event; the raw call gets io.tpd.tracing.NoSuchEvent.
- Malformed names (path tricks, regex, empty, over-long, ...) given to enable, describe and stream
  exit 1 (or 2 for usage) and leave tracefs exactly as it was: enabled events and filters of the
  instance and of the top level, both tracing_on files, the list of instances, the instance's files.
- An invalid kernel filter gets io.tpd.tracing.InvalidFilter and the previous filter stays in place
  (the kernel itself would drop it); an invalid stream filter fails that stream.
- Raw Varlink abuse (garbage + NUL, non-object JSON, truncated JSON, > 64 KiB without NUL) closes
  that connection only: a client connected before keeps working, new clients are served, a running
  stream keeps streaming. An unknown method is an error reply (MethodNotFound), not a close. A call
  split into one-byte writes and two pipelined calls are answered correctly.
- Fds sent with a call (SCM_RIGHTS) are not taken: the call is answered, and tpd holds none of them
  (its read() leaves them to the kernel, which closes them).
"""

import os
import socket
import subprocess
import time

import tpdtest as T
from tpdtest import check, log

NAME_ERRORS = (1, 2)       # daemon error reply, or tpctl's own usage error
BAD_NAMES = [
    '../../tracing_on',
    '.*',
    'sched:sched_switch/../..',
    '',
    'sched:sched_switch/../../../tracing_on',
    'sched/sched_switch',
    'sched:sched_switch\nsched:sched_wakeup',
    '../sched:sched_switch',
    'sched:',
    ':sched_switch',
    ':',
    'sched:sched_switch:x',
    'a' * 300 + ':b',
]


def tpd_fds(tpd):
    fd_dir = f'/proc/{tpd.process.pid}/fd'
    links = []
    for name in os.listdir(fd_dir):
        try:
            links.append(os.readlink(os.path.join(fd_dir, name)))
        except FileNotFoundError:
            pass
    return links


def fds_not_taken(tpd):
    memfd = os.memfd_create('tpdtest-passed-fd')
    r, w = os.pipe()
    pipe_link = f'pipe:[{os.fstat(r).st_ino}]'
    # Connections closed before are let go first.
    before, settled = len(tpd_fds(tpd)), time.monotonic()
    while time.monotonic() - settled < 0.5:
        time.sleep(0.05)
        if len(tpd_fds(tpd)) != before:
            before, settled = len(tpd_fds(tpd)), time.monotonic()
    with tpd.varlink() as v:
        call = b'{"method":"org.varlink.service.GetInfo"}\x00'
        socket.send_fds(v.sock, [call[:10]], [memfd, r])
        v.send_raw(call[10:])
        reply = v.recv()
        check(reply is not None and 'interfaces' in reply.get('parameters', {}), f'call sent with fds: {reply}')
        # Two pipelined calls, fds with the second.
        socket.send_fds(v.sock, [call + call], [w])
        check('error' not in v.recv() and 'error' not in v.recv(), 'pipelined calls sent with an fd')
        held = [link for link in tpd_fds(tpd) if 'tpdtest-passed-fd' in link or link == pipe_link]
        check(not held, f'tpd holds fds a client sent: {held}')
    for fd in (memfd, r, w):
        os.close(fd)
    deadline = time.monotonic() + 3
    while len(tpd_fds(tpd)) != before and time.monotonic() < deadline:
        time.sleep(0.05)
    check(len(tpd_fds(tpd)) == before, f'tpd has {len(tpd_fds(tpd))} fds, {before} before fds were sent to it')
    log('fds sent with calls are not taken')


def main(ctx):
    tpd = ctx.tpd()
    evdir = os.path.join(tpd.instance_dir, 'events', 'sched', 'sched_switch')

    # A baseline the bad calls must not disturb: one pinned event with a kernel filter.
    tpd.tpctl_ok('enable', 'sched:sched_switch', '--filter', 'prev_pid == 1')
    check(T.read_text(os.path.join(evdir, 'filter')).strip() == 'prev_pid == 1',
          f'filter not set: {T.read_text(os.path.join(evdir, "filter"))!r}')

    # A stream that must survive everything below.
    witness = tpd.stream()
    T.confirm_live([witness], lambda: tpd.marker('tpdtest-probe'))

    snap = T.tracefs_snapshot(tpd.instance_dir)

    def alive(after_what):
        # A crash shows up first as tpctl's 69 (daemon gone): name the real cause.
        check(tpd.running(), f'tpd died (exit {tpd.process.proc.returncode}) after {after_what}; log:\n{tpd.log()}')

    def unchanged(after_what):
        alive(after_what)
        now = T.tracefs_snapshot(tpd.instance_dir)
        check(now == snap, f'tracefs changed after {after_what}:\n{T.snapshot_diff(snap, now)}')
        check(tpd.running(), f'tpd died after {after_what}; log:\n{tpd.log()}')

    # --- unknown event
    r = tpd.tpctl('enable', 'no_such:event')
    check(r.returncode == 1, f'tpctl enable no_such:event exited {r.returncode}, expected 1')
    check('no_such:event' in r.stderr, f'error message does not name the event: {r.stderr!r}')
    reply = tpd.call('io.tpd.tracing.Enable', {'events': ['no_such:event']})
    check(reply.get('error') == 'io.tpd.tracing.NoSuchEvent', f'raw Enable of no_such:event: {reply}')
    check(reply.get('parameters', {}).get('event') == 'no_such:event', f'NoSuchEvent without the event: {reply}')
    unchanged('enabling no_such:event')

    # --- the old names of MaxStreams= and StreamQueueKB= on the command line: still read, with a notice
    r = subprocess.run([T.env_program('TPD'), '--max-clients=5', '--client-queue-kb=64', '--version'],
                       capture_output=True, text=True, timeout=10)
    check(r.returncode == 0 and '--max-clients= is deprecated, use --max-streams=' in r.stderr and
          '--client-queue-kb= is deprecated, use --stream-queue-kb=' in r.stderr,
          f'tpd --max-clients=5 --client-queue-kb=64 --version: exit {r.returncode}, stderr {r.stderr!r}')
    r = subprocess.run([T.env_program('TPD'), '--max-clients=0', '--version'], capture_output=True, text=True,
                       timeout=10)
    check(r.returncode != 0 and "Invalid value '0' for --max-clients" in r.stderr,
          f'tpd --max-clients=0: expected an error naming the option as given, got exit {r.returncode}, '
          f'stderr {r.stderr!r}')

    # --- a Stream with two bad lists: the CPU is named first, with the CPUs there are
    reply = tpd.call('io.tpd.tracing.Stream', {'events': ['sched:sched_switch'], 'pids': [-1], 'cpus': [99999]},
                     more=True)
    check(reply.get('error') == 'org.varlink.service.InvalidParameter' and
          reply.get('parameters', {}).get('parameter') == 'cpus' and
          'There is no CPU 99999' in reply.get('parameters', {}).get('message', ''),
          f'Stream with pids [-1] and cpus [99999]: expected InvalidParameter cpus naming the CPU, got {reply}')
    reply = tpd.call('io.tpd.tracing.Stream', {'events': ['sched:sched_switch'], 'pids': [-1]}, more=True)
    check(reply.get('error') == 'org.varlink.service.InvalidParameter' and
          reply.get('parameters', {}).get('parameter') == 'pids',
          f'Stream with pids [-1]: expected InvalidParameter pids, got {reply}')
    unchanged('Streams with bad pids and CPUs')

    # --- malformed names
    for name in BAD_NAMES:
        for args in (['enable', name], ['describe', name], ['disable', name]):
            r = tpd.tpctl(*args)
            alive(f'tpctl {args[0]} {name!r}')
            check(r.returncode in NAME_ERRORS, f'tpctl {args[0]} {name!r} exited {r.returncode}, expected 1 or 2; '
                                               f'stdout {r.stdout[:200]!r}')
            check(r.stderr.strip(), f'tpctl {args[0]} {name!r} failed without a message')
        # A stream naming it must fail at once rather than stream.
        r = tpd.tpctl('stream', '-e', name, timeout=10)
        alive(f'tpctl stream -e {name!r}')
        check(r.returncode in NAME_ERRORS, f'tpctl stream -e {name!r} exited {r.returncode}, expected 1 or 2')
        with tpd.varlink() as v:
            reply = v.call('io.tpd.tracing.Enable', {'events': [name]})
            check(reply.get('error') in ('io.tpd.tracing.NoSuchEvent', 'org.varlink.service.InvalidParameter'),
                  f'raw Enable of {name!r}: expected NoSuchEvent or InvalidParameter, got {reply}')
            # An error reply is not a reason to drop the connection.
            check('error' not in v.call('org.varlink.service.GetInfo'), 'GetInfo failed after an error reply')
        unchanged(f'bad name {name!r}')
    log(f'{len(BAD_NAMES)} malformed names refused, tracefs unchanged')

    # --- invalid filters
    for bad in ('prev_pid ==', 'no_such_field == 1', 'prev_pid == 1 )', '(((('):
        r = tpd.tpctl('enable', 'sched:sched_switch', '--filter', bad)
        alive(f'tpctl enable --filter {bad!r}')
        check(r.returncode == 1, f'tpctl enable --filter {bad!r} exited {r.returncode}, expected 1')
        check('filter' in r.stderr.lower(), f'tpctl enable --filter {bad!r}: message does not mention the filter: '
                                            f'{r.stderr!r}')
        reply = tpd.call('io.tpd.tracing.Enable', {'events': ['sched:sched_switch'], 'filter': bad})
        check(reply.get('error') == 'io.tpd.tracing.InvalidFilter', f'raw Enable with filter {bad!r}: {reply}')
        check(reply.get('parameters', {}).get('message'), f'InvalidFilter without a message: {reply}')
        check(T.read_text(os.path.join(evdir, 'filter')).strip() == 'prev_pid == 1',
              f'previous filter lost after {bad!r}: now {T.read_text(os.path.join(evdir, "filter")).strip()!r}')
        r = tpd.tpctl('stream', '-e', 'sched:sched_switch', '--filter', bad, timeout=10)
        alive(f'tpctl stream -e sched:sched_switch --filter {bad!r}')
        check(r.returncode == 1, f'tpctl stream -e sched:sched_switch --filter {bad!r} exited {r.returncode}, '
                                 f'expected 1; stderr {r.stderr.strip()!r}')
        r = tpd.tpctl('stream', '--filter', bad, timeout=10)
        alive(f'tpctl stream --filter {bad!r}')
        check(r.returncode == 1, f'tpctl stream --filter {bad!r} exited {r.returncode}, expected 1; '
                                 f'stderr {r.stderr.strip()!r}')
        unchanged(f'invalid filter {bad!r}')
    log('invalid filters refused, previous filter kept')

    # --- raw protocol abuse
    keeper = tpd.varlink()
    check('error' not in keeper.call('org.varlink.service.GetInfo'), 'GetInfo failed')
    oversize = b'{"method":"io.tpd.tracing.GetStatus","parameters":{"pad":"' + b'a' * (T.MESSAGE_MAX + 8192)
    abuses = [
        ('garbage', b'\xff\xfegarbage{{{\x00'),
        ('non-object JSON', b'[1,2,3]\x00'),
        ('JSON string', b'"io.tpd.tracing.GetStatus"\x00'),
        ('truncated JSON', b'{"method":"io.tpd.tracing.GetStatus",\x00'),
        ('oversize without NUL', oversize),
    ]
    for what, data in abuses:
        v = tpd.varlink()
        try:
            v.send_raw(data)
        except (BrokenPipeError, ConnectionResetError):
            pass        # closed while we were still writing: the right outcome for the oversize message
        check(v.wait_closed(3.0), f'{what}: connection still open 3 s after the malformed message')
        v.close()
        check(tpd.running(), f'tpd died after {what}; log:\n{tpd.log()}')
        check('error' not in keeper.call('org.varlink.service.GetInfo'),
              f'the other client was not served after {what}')
        check('error' not in tpd.call('org.varlink.service.GetInfo'), f'a new client was not served after {what}')
    log('malformed messages closed their connection only')

    reply = keeper.call('io.tpd.tracing.NoSuchMethod')
    check(reply.get('error') == 'org.varlink.service.MethodNotFound', f'unknown method: {reply}')
    check('error' not in keeper.call('org.varlink.service.GetInfo'), 'connection unusable after MethodNotFound')

    # Framing: one call in one-byte writes; two calls in one write.
    with tpd.varlink() as v:
        for byte in b'{"method":"org.varlink.service.GetInfo"}\x00':
            v.send_raw(bytes([byte]))
            time.sleep(0.0005)
        reply = v.recv()
        check(reply is not None and 'error' not in reply, f'call sent byte by byte: {reply}')
        v.send_raw(b'{"method":"org.varlink.service.GetInfo"}\x00{"method":"io.tpd.tracing.GetStatus"}\x00')
        r1, r2 = v.recv(), v.recv()
        check(r1 is not None and 'interfaces' in r1.get('parameters', {}), f'first of two pipelined calls: {r1}')
        check(r2 is not None and r2.get('parameters', {}).get('instance') == tpd.instance,
              f'second of two pipelined calls: {r2}')
    keeper.close()
    fds_not_taken(tpd)

    # The witness stream lived through all of it.
    msg = f'tpdtest-after-errors {ctx.rand}'
    tpd.marker(msg)
    witness.wait_for(lambda: any(msg.encode() in line for line in witness.lines), 5, 'a marker after the abuse')
    witness.stop()
    unchanged('everything')
    tpd.stop()


if __name__ == '__main__':
    T.run(main)
