#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""The policy between members (docs/design.md §5), with real users: A and B in a group made for the test
(tpd's access group), O outside it; each runs tpctl through setpriv.

- the socket tpd binds is 0660 root:GROUP; O is refused (by the mode, and by tpd's own check when
  the mode lets O in); membership is the peer's groups, not the user database;
- B cannot remove A's or root's pins (named: PermissionDenied; --all and globs: only B's own),
  nor set, change or clear the kernel filter of an event A pins or streams or root pinned (the
  kernel's filter files stay as they were); B may filter an event it alone holds;
- per-user limits and root's slots: B's streams and connections stop at its limits, members
  together stop short of the last slots, and root still connects and streams;
- a connection that stops in the middle of a call is closed after 5 s while others are served,
  one idle between calls is not;
- EMFILE on accept does not spin;
- root can do all that members cannot; status shows who holds what; owners survive a restart;
- a member's scoped streams (--with cgroup, -p --follow, --cgroup) get no record the member's plain
  stream of the same event does not, none of the records tpd holds for them, and exactly the
  calls of the scope.

All along, A streams a paced generator (its kernel filter 'common_pid == GEN' set by A as the
event's only holder) and gets exactly what the kernel wrote: delivered + lost = written.
"""

import json
import os
import resource
import socket
import stat
import subprocess
import threading
import time

import tpdtest as T
from tpdtest import check, fail, log

SCALE = float(os.environ.get('TPD_TEST_SCALE', '1'))
GEN_EVENT = 'syscalls:sys_enter_getppid'
# Obsolete or privileged system calls nothing on the machine makes (not reboot or sethostname:
# a container's boot and poweroff make those): pinned, streamed and filtered without adding
# records, so that the instance's written count is the generator's alone.
ROOT_EVENT = 'syscalls:sys_enter_sysfs'       # root pins it with a filter on 'option'
STREAM_ONLY = 'syscalls:sys_enter_iopl'       # A's stream holds it, nobody pins it
B_EVENT = 'syscalls:sys_enter_ioperm'         # B's own
SPARE_EVENT = 'syscalls:sys_enter_ustat'      # what B's and root's extra streams ask for
RATE = 4000
COUNT = int(RATE * 15 * SCALE)
MAX_STREAMS = 8          # 8 streams, 16 connections; the last 4 of each are root's
STREAMS_PER_USER = 2
CONNECTIONS_PER_USER = 7

HOLDER = r'''
import json, socket, sys
path, n = sys.argv[1], int(sys.argv[2])
held = []
for i in range(n):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(5)
    try:
        s.connect(path)
        s.sendall(b'{"method":"org.varlink.service.GetInfo"}\0')
        buf = b''
        while b'\0' not in buf:
            chunk = s.recv(65536)
            if not chunk:
                break
            buf += chunk
    except OSError as e:
        print('refused', i, json.dumps({'oserror': str(e)}), flush=True)
        break
    if b'\0' not in buf:
        print('refused', i, json.dumps({'closed': True}), flush=True)
        break
    reply = json.loads(buf.split(b'\0')[0])
    if 'error' in reply:
        print('refused', i, json.dumps(reply), flush=True)
        break
    held.append(s)
print('holding', len(held), flush=True)
sys.stdin.read()
'''


def main(ctx):
    with T.TestUsers(ctx, 'tpd', members=('A', 'B'), outsiders=('O',)) as users:
        run(ctx, users)


def run(ctx, users):
    # The test's directory must be reachable by the users; the socket's own mode decides the rest.
    os.chmod(ctx.tmpdir, 0o711)
    holder_path = os.path.join(ctx.tmpdir, 'holder.py')
    with open(holder_path, 'w') as f:
        f.write(HOLDER)
    os.chmod(holder_path, 0o644)
    with open(os.path.join(ctx.tmpdir, 'tpd.conf'), 'w') as f:
        f.write(f'[Clients]\nMaxStreams={MAX_STREAMS}\nMaxStreamsPerUser={STREAMS_PER_USER}\n'
                f'MaxConnectionsPerUser={CONNECTIONS_PER_USER}\n')

    check_socket_path_safety(ctx, users)

    tpd = users.tpd()
    uid_a, uid_b = users.uid['A'], users.uid['B']

    def tpctl_as(key, *args, groups='init'):
        argv = users.setpriv(key, groups) + [T.env_program('TPCTL'), '--socket', tpd.socket, *args]
        return subprocess.run(argv, capture_output=True, text=True, timeout=15)

    def ok_as(key, *args):
        r = tpctl_as(key, *args)
        check(r.returncode == 0, f'tpctl {" ".join(args)} as {key} exited {r.returncode}: {r.stderr.strip()!r}; '
                                 f'tpd log:\n{tpd.log(2000)}')
        return r

    def denied_as(key, *args, what='PermissionDenied', text=None):
        r = tpctl_as(key, *args)
        check(r.returncode != 0, f'tpctl {" ".join(args)} as {key} succeeded; it must be refused: {r.stdout!r}')
        if text:
            check(text in r.stderr, f'tpctl {" ".join(args)} as {key}: expected {text!r} in {r.stderr.strip()!r}')
        log(f'{key}: tpctl {" ".join(args)} refused ({r.returncode}): {r.stderr.strip().splitlines()[0]}')
        return r

    def stream_as(key, *args):
        # Stream takes its argv from $TPCTL: point it at a wrapper that runs tpctl as the user.
        wrapper = os.path.join(ctx.tmpdir, f'tpctl-as-{key}')
        if not os.path.exists(wrapper):
            with open(wrapper, 'w') as f:
                f.write('#!/bin/sh\nexec ' + ' '.join(users.setpriv(key)) + f' {T.env_program("TPCTL")} "$@"\n')
            os.chmod(wrapper, 0o755)
        saved = os.environ['TPCTL']
        os.environ['TPCTL'] = wrapper
        try:
            return tpd.stream(*args)
        finally:
            os.environ['TPCTL'] = saved

    def kernel_filter(event):
        system, name = event.split(':')
        return T.read_text(os.path.join(tpd.instance_dir, 'events', system, name, 'filter')).strip()

    def event_status(name):
        for e in tpd.status().get('events', []):
            if e.get('name') == name:
                return e
        return None

    # --- the socket: 0660 root:GROUP from the start
    st = os.lstat(tpd.socket)
    check(stat.S_ISSOCK(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o660 and st.st_uid == 0 and st.st_gid == users.gid,
          f'socket is {oct(st.st_mode)} {st.st_uid}:{st.st_gid}, expected 0660 root:{users.gid}')

    # --- who gets in
    ok_as('A', 'status')
    r = ok_as('A', 'top', '-n', '1', '-d', '0.1')   # GetCounters is for members too
    check(r.stdout.startswith('top time='), f'tpctl top as a member printed {r.stdout[:200]!r}')
    r = tpctl_as('O', 'status')
    check(r.returncode != 0, 'the outsider got in through a 0660 socket')
    os.chmod(tpd.socket, 0o666)     # as if someone else made the socket, or changed its mode
    try:
        denied_as('O', 'status', text='Only root and members')
        # Membership is what the process holds, not what the user database says.
        r = tpctl_as('A', 'status', groups=users.primary['A'])
        check(r.returncode != 0 and 'Only root and members' in r.stderr,
              f'A without the group in its process got in: {r.returncode} {r.stderr!r}')
        r = tpctl_as('O', 'status', groups=users.gid)
        check(r.returncode == 0, f'a process with the access group as its gid was refused: {r.stderr!r}')
    finally:
        os.chmod(tpd.socket, 0o660)

    # --- the well-behaved stream: A alone holds the generator's event and filters it to GEN
    gen = ctx.gen('GEN_GETPPID', '--count', COUNT, '--rate', RATE)
    gen_pid, = gen.pids()
    ok_as('A', 'enable', GEN_EVENT, '--filter', f'common_pid == {gen_pid}')
    good = stream_as('A', '-e', GEN_EVENT, '-e', STREAM_ONLY)
    T.confirm_live([good], gen.probe)
    # The books start once the stream is live: a probe written before tpd had the stream was
    # drained with nobody to deliver it to.
    good.drain(lambda: True, timeout=5)
    written0, delivered0 = T.written(tpd.stats()), good.nlines
    gen.go()
    gen_filter = kernel_filter(GEN_EVENT)
    check(f'common_pid == {gen_pid}' in gen_filter, f'kernel filter of {GEN_EVENT}: {gen_filter!r}')

    # root pins an event with a filter; A and B pin it too (no filter change: allowed)
    tpd.tpctl_ok('enable', ROOT_EVENT, '--filter', 'option == 1')
    ok_as('A', 'enable', ROOT_EVENT)
    ok_as('B', 'enable', ROOT_EVENT)
    # B filters an event it alone holds
    ok_as('B', 'enable', B_EVENT, '--filter', 'turn_on == 1')
    root_filter = kernel_filter(ROOT_EVENT)
    check('option == 1' in root_filter, f'kernel filter of {ROOT_EVENT}: {root_filter!r}')

    ev = event_status(ROOT_EVENT)
    check(ev and ev.get('pin_uids') == sorted([0, uid_a, uid_b]) and ev.get('filter_uid') == 0,
          f'status of {ROOT_EVENT}: {ev}')
    ev = event_status(GEN_EVENT)
    check(ev and ev.get('pin_uids') == [uid_a] and ev.get('stream_uids') == [uid_a] and ev.get('filter_uid') == uid_a,
          f'status of {GEN_EVENT}: {ev}')
    st = tpd.status()
    check(any(c.get('uid') == uid_a and c.get('pid') == good.pid and c.get('streaming') for c in st['connections']),
          f'status does not show A\'s stream (pid {good.pid}): {st["connections"]}')
    text = tpd.tpctl_ok('status').stdout
    check('PINNED BY' in text and f'0,{min(uid_a, uid_b)},{max(uid_a, uid_b)}' in text,
          f'tpctl status does not show the owners of {ROOT_EVENT}:\n{text}')

    # --- B against others' pins and filters
    before = T.tracefs_snapshot(tpd.instance_dir)
    denied_as('B', 'disable', GEN_EVENT, text='pinned by others')
    denied_as('B', 'enable', GEN_EVENT, '--filter', 'common_pid == 1', text='only root')
    denied_as('B', 'enable', GEN_EVENT, '--filter', '', text='only root')
    denied_as('B', 'enable', ROOT_EVENT, '--filter', 'option == 2', text='only root')
    denied_as('B', 'enable', ROOT_EVENT, '--filter', '', text='only root')
    denied_as('B', 'enable', STREAM_ONLY, '--filter', 'level == 1', text=f'uid {uid_a} (stream)')
    denied_as('B', 'enable', GEN_EVENT, '--filter', 'common_pid == 2', text=f'uid {uid_a} (pin, stream)')
    ok_as('B', 'enable', GEN_EVENT)                      # a pin of its own: allowed, filter kept
    ok_as('B', 'disable', GEN_EVENT)                     # removes B's pin only
    ok_as('B', 'disable', ROOT_EVENT)                    # likewise
    tpd.tpctl_ok('enable', B_EVENT)                      # root relies on B's filter now
    b_filter = kernel_filter(B_EVENT)
    r = ok_as('B', 'disable', '--all', '--json')
    check(json.loads(r.stdout).get('disabled') == [B_EVENT], f'B disable --all removed {r.stdout!r}')
    after = T.tracefs_snapshot(tpd.instance_dir)
    check(before == after, f'B changed tracefs:\n{T.snapshot_diff(before, after)}')
    check(kernel_filter(GEN_EVENT) == gen_filter and kernel_filter(ROOT_EVENT) == root_filter,
          'a kernel filter changed')
    # B's filter stays while root pins the event, and goes with the last pin.
    ev = event_status(B_EVENT)
    check(ev and ev.get('pin_uids') == [0] and ev.get('filter_uid') == uid_b and kernel_filter(B_EVENT) == b_filter,
          f'{B_EVENT} after its filter\'s setter left: {ev}, kernel filter {kernel_filter(B_EVENT)!r}')
    tpd.tpctl_ok('disable', B_EVENT)
    check(kernel_filter(B_EVENT) == 'none', f'the filter outlived the last pin: {kernel_filter(B_EVENT)!r}')
    ev = event_status(ROOT_EVENT)
    check(ev and ev.get('pin_uids') == [0, uid_a] and ev.get('filter_uid') == 0, f'status of {ROOT_EVENT}: {ev}')
    ev = event_status(GEN_EVENT)
    check(ev and ev.get('pin_uids') == [uid_a] and ev.get('filter') == f'common_pid == {gen_pid}',
          f'status of {GEN_EVENT}: {ev}')

    # --- limits: streams, then connections
    check_limits(ctx, tpd, users, ok_as, denied_as, stream_as, holder_path, good)

    # --- a stalled half message is closed, an idle connection is not, others are served
    check_stall(tpd)

    # --- EMFILE on accept: no spinning
    check_emfile(tpd)

    # --- root may do what members may not
    tpd.tpctl_ok('enable', ROOT_EVENT, '--filter', 'option == 3')
    check('option == 3' in kernel_filter(ROOT_EVENT), f'root could not change its filter: {kernel_filter(ROOT_EVENT)!r}')

    # --- the good stream: exactly what the kernel wrote
    gen.wait_done(timeout=120)
    written = T.written(tpd.stats()) - written0

    def delivered_and_lost():
        recs = good.records()[delivered0:]
        return sum(1 for r in recs if 'lost' not in r), sum(r['lost'] for r in recs if 'lost' in r)
    good.drain(lambda: sum(delivered_and_lost()) >= written, timeout=30)
    good.stop()
    delivered, lost = delivered_and_lost()
    wrong = [r for r in good.records() if 'lost' not in r and r['pid'] != gen_pid]
    check(not wrong, f'the good stream got records of other pids: {wrong[:3]}')
    check(delivered + lost == written,
          f'good stream: delivered {delivered} + lost {lost} != written {written} (kernel)')
    check(delivered >= COUNT, f'good stream: {delivered} records, the generator made {COUNT} (+ probes)')
    log(f'good stream: delivered {delivered} + lost {lost} == written {written}')

    # A member records: tpctl writes the file as the member, into the member's directory (tpd never
    # opens a client's path); the outsider may not record.
    rec_dir = os.path.join(ctx.tmpdir, 'rec-A')
    os.mkdir(rec_dir, 0o700)
    os.chown(rec_dir, uid_a, users.primary['A'])
    os.chmod(ctx.tmpdir, 0o711)
    rec_out = os.path.join(rec_dir, 'a.dat')
    ok_as('A', 'record', '-o', rec_out, '-e', GEN_EVENT, '--duration', '0.5', '--no-kallsyms')
    st = os.stat(rec_out)
    check(st.st_uid == uid_a, f'the recording belongs to uid {st.st_uid}, not the member {uid_a}')
    r = subprocess.run(['trace-cmd', 'report', rec_out], capture_output=True, text=True, errors='replace', timeout=60)
    check(r.returncode == 0 and not r.stderr.strip(), f'trace-cmd report of a member\'s recording: {r.stderr!r}')
    check(sorted(os.listdir(rec_dir)) == ['a.dat'], f'a recording left files behind: {os.listdir(rec_dir)}')
    denied_as('O', 'record', '-o', os.path.join(ctx.tmpdir, 'o.dat'), '-e', GEN_EVENT, '--duration', '0.5')
    log('member A recorded into its own file; the outsider was refused')

    # Owners survive a restart; root removes any pin.
    ok_as('A', 'enable', STREAM_ONLY)
    tpd.stop(clear_pins=False)
    tpd.start(clean=False)
    ev = event_status(STREAM_ONLY)
    check(ev and ev.get('pin_uids') == [uid_a], f'after a restart, {STREAM_ONLY}: {ev}')
    ev = event_status(ROOT_EVENT)
    check(ev and ev.get('pin_uids') == [0, uid_a] and ev.get('filter_uid') == 0 and ev.get('filter') == 'option == 3',
          f'after a restart, {ROOT_EVENT}: {ev}')
    ev = event_status(GEN_EVENT)
    check(ev and ev.get('pin_uids') == [uid_a] and ev.get('filter_uid') == uid_a, f'after a restart, {GEN_EVENT}: {ev}')
    tpd.tpctl_ok('disable', STREAM_ONLY, GEN_EVENT)
    check(event_status(STREAM_ONLY) is None and event_status(GEN_EVENT) is None,
          'root\'s disable left pins of A')
    check(kernel_filter(GEN_EVENT) == 'none', 'the filter outlived the last pin')

    # A state file of a tpd before pins had owners: its pins are root's.
    tpd.stop(clear_pins=False)
    with open(tpd.state_file, 'w') as f:
        json.dump({'version': 1, 'pins': [{'event': ROOT_EVENT, 'filter': 'option == 4'}]}, f)
    tpd.start(clean=False)
    ev = event_status(ROOT_EVENT)
    check(ev and ev.get('pin_uids') == [0] and ev.get('filter_uid') == 0 and ev.get('filter') == 'option == 4',
          f'{ROOT_EVENT} from an old state file: {ev}')
    denied_as('A', 'enable', ROOT_EVENT, '--filter', 'option == 5', text='only root')
    check_scoping(ctx, tpd, stream_as)
    tpd.stop()


def check_scoping(ctx, tpd, stream_as):
    """Member A's scoped streams beside its plain one of the same event, a fork tree in a cgroup."""
    cg = ctx.cgroups(('scoped',))
    # Built with AddressSanitizer, a generator that exits forks LeakSanitizer's tracer into its
    # cgroup, a task the streams rightly select. tpd (started before) still checks.
    os.environ['ASAN_OPTIONS'] = os.environ.get('ASAN_OPTIONS', '') + ':detect_leaks=0'
    for scope in (('--with', 'cgroup'), ('-p', 'ROOT', '--follow'), ('--cgroup', cg.path('scoped'))):
        tree = ctx.gen('GEN_FORK', '--count', 200, 2)
        root, = tree.pids()
        cg.move(root, 'scoped')
        args = [str(root) if a == 'ROOT' else a for a in scope]
        plain = stream_as('A', '-e', GEN_EVENT)
        scoped = stream_as('A', '-e', GEN_EVENT, *args)
        T.confirm_live([plain, scoped], tree.probe)
        go_ts = tree.go()
        expected = tree.wait_done(timeout=60)[1]

        def calls(s):
            return [r for r in s.records() if r.get('event') == GEN_EVENT and r['ts'] >= go_ts]

        def mine():
            # The tree's calls: all the scoped stream has, but for --with cgroup (every process's).
            return [r for r in calls(scoped) if scope[0] != '--with' or r.get('cgroup') == cg.path('scoped')]

        def keys(recs):
            return {(r['ts'], r['cpu'], r['pid']) for r in recs}
        scoped.drain(lambda: len(mine()) >= expected, timeout=30)
        plain.drain(lambda: keys(mine()) <= keys(calls(plain)), timeout=30)
        plain.stop()
        scoped.stop()
        settle(tpd, {})
        events = {r.get('event') for r in scoped.records() if 'event' in r}
        check(events == {GEN_EVENT}, f'A\'s stream {" ".join(args)}: events {sorted(events)}')
        seen = keys(r for r in plain.records() if 'event' in r)
        extra = [r for r in scoped.records() if 'event' in r and (r['ts'], r['cpu'], r['pid']) not in seen]
        check(not extra, f'A\'s stream {" ".join(args)} got records its plain stream did not: {extra[:3]}')
        pids = {r['pid'] for r in mine()}
        check(len(mine()) == expected and len(pids) == 3,
              f'A\'s stream {" ".join(args)}: {len(mine())} calls of {len(pids)} processes, expected {expected} of 3')
        log(f'member A, {" ".join(args)}: {len(mine())} calls of the tree, nothing its plain stream lacks')


def check_socket_path_safety(ctx, users):
    """tpd removes a stale socket at its path, and refuses to touch anything else there."""
    run_dir = os.path.join(ctx.tmpdir, 'run')
    os.makedirs(run_dir, mode=0o755, exist_ok=True)
    path = os.path.join(run_dir, 'not-a-socket')
    with open(path, 'w') as f:
        f.write('precious\n')
    instance = ctx.unique_name('-sock')
    ctx._instances.append(os.path.join(T.TRACEFS, 'instances', instance))
    r = subprocess.run([T.env_program('TPD'), '--socket', path, '--instance', instance, '--state-dir', '',
                        '--config', os.path.join(ctx.tmpdir, 'none.conf')],
                       capture_output=True, text=True, timeout=30)
    check(r.returncode != 0 and 'not a socket' in r.stderr, f'tpd on a regular file: {r.returncode} {r.stderr!r}')
    check(T.read_text(path) == 'precious\n', 'tpd changed a file that was not its socket')

    # A socket nobody listens on (a dead tpd's) is replaced.
    stale = os.path.join(run_dir, 'stale.sock')
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(stale)
    s.close()
    t = ctx.tpd(args=['--access-group', users.group], start=False)
    t.socket = stale
    t.start()
    st = os.lstat(stale)
    check(stat.S_IMODE(st.st_mode) == 0o660 and st.st_gid == users.gid,
          f'socket replacing a stale one is {oct(st.st_mode)} gid {st.st_gid}')
    # A live one is not.
    instance = ctx.unique_name('-sock')
    ctx._instances.append(os.path.join(T.TRACEFS, 'instances', instance))
    r = subprocess.run([T.env_program('TPD'), '--socket', stale, '--instance', instance, '--state-dir', '',
                        '--config', os.path.join(ctx.tmpdir, 'none.conf')],
                       capture_output=True, text=True, timeout=30)
    check(r.returncode != 0 and 'Another tpd' in r.stderr, f'second tpd on a live socket: {r.returncode} {r.stderr!r}')
    t.call('org.varlink.service.GetInfo')
    t.stop()
    check(not os.path.exists(stale), 'tpd left its socket behind')
    log('socket path: regular file kept, stale socket replaced, live one refused')


def settle(tpd, want, timeout=10.0):
    """Waits until the connections other than root's are exactly want ({uid: n}): one-shot tpctl
    connections close asynchronously."""
    deadline = time.monotonic() + timeout
    while True:
        conns = tpd.status()['connections']
        got = {}
        for c in conns:
            if c['uid'] != 0:
                got[c['uid']] = got.get(c['uid'], 0) + 1
        roots = sum(1 for c in conns if c['uid'] == 0)
        if got == want and roots == 1:   # the status call's own
            return
        if time.monotonic() > deadline:
            fail(f'connections did not settle to {want}: {conns}')
        time.sleep(0.05)


class Holder:
    """A process of a user holding as many connections as tpd lets it open (up to n)."""

    def __init__(self, ctx, users, key, holder_path, socket_path, n):
        argv = users.setpriv(key) + ['python3', holder_path, socket_path, str(n)]
        self.proc = T.Process(ctx, f'holder-{key}-{len(ctx._processes)}', argv, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE)
        self.out = T.LineReader(self.proc.proc.stdout.fileno())
        self.refusal = None
        while True:
            line = self.out.readline(30)
            check(line is not None, f'holder exited: {self.proc.stderr_text()!r}')
            words = line.decode().split(' ', 2)
            if words[0] == 'refused':
                self.refusal = json.loads(words[2])
            if words[0] == 'holding':
                self.n = int(words[1])
                return

    def refusal_text(self):
        r = self.refusal or {}
        return r.get('parameters', {}).get('message') or json.dumps(r)

    def close(self):
        self.proc.kill()


def check_limits(ctx, tpd, users, ok_as, denied_as, stream_as, holder_path, good):
    uid_a, uid_b = users.uid['A'], users.uid['B']
    total_streams, total_conns = MAX_STREAMS, 2 * MAX_STREAMS
    member_streams, member_conns = total_streams - 4, total_conns - 4
    settle(tpd, {uid_a: 1})

    # Streams. A has 1; B takes its 2, then hits its own limit.
    def wait_streams(n, streams):
        deadline = time.monotonic() + 10
        while tpd.status()['streams'] < n:
            check(time.monotonic() < deadline, f'streams did not reach {n}: {tpd.status()["streams"]}')
            for s in streams:
                check(s.running(), f'tpctl stream {" ".join(s.args)} exited: {s.stderr_text()!r}')
            time.sleep(0.05)

    extra = [stream_as('B', '-e', SPARE_EVENT) for _ in range(STREAMS_PER_USER)]
    wait_streams(1 + STREAMS_PER_USER, extra)
    denied_as('B', 'stream', '-e', SPARE_EVENT, text='MaxStreamsPerUser')
    # A takes one more: members now hold all theirs (4 of 8), and the rest is root's.
    extra.append(stream_as('A', '-e', SPARE_EVENT))
    wait_streams(member_streams, extra)
    denied_as('B', 'stream', '-e', SPARE_EVENT, text='kept for root')
    denied_as('A', 'stream', '-e', SPARE_EVENT, text='kept for root')
    roots = [tpd.stream('-e', SPARE_EVENT) for _ in range(total_streams - member_streams)]
    wait_streams(total_streams, roots)
    r = tpd.tpctl('stream', '-e', SPARE_EVENT)
    check(r.returncode != 0 and 'at most' in r.stderr, f'root\'s stream beyond the total: {r.returncode} {r.stderr!r}')
    for s in roots:
        s.stop()
    log(f'streams: B stopped at {STREAMS_PER_USER}, members at {member_streams}, root took the last '
        f'{total_streams - member_streams}')

    # Connections. A has 2, B 2 (their streams); B fills its own limit, A the members' share.
    settle(tpd, {uid_a: 2, uid_b: 2})
    hb = Holder(ctx, users, 'B', holder_path, tpd.socket, 100)
    check(hb.n == CONNECTIONS_PER_USER - 2 and 'MaxConnectionsPerUser' in hb.refusal_text(),
          f'B held {hb.n} more connections (expected {CONNECTIONS_PER_USER - 2}); refusal: {hb.refusal}')
    settle(tpd, {uid_a: 2, uid_b: CONNECTIONS_PER_USER})
    ha = Holder(ctx, users, 'A', holder_path, tpd.socket, 100)
    want_a = member_conns - 2 - CONNECTIONS_PER_USER
    check(ha.n == want_a and 'kept for root' in ha.refusal_text(),
          f'A held {ha.n} more connections (expected {want_a}); refusal: {ha.refusal}')
    # Root still gets in, and streams.
    reply = tpd.call('org.varlink.service.GetInfo')
    check('error' not in reply, f'root refused: {reply}')
    s = tpd.stream('-e', SPARE_EVENT)
    deadline = time.monotonic() + 10
    while not any(c['uid'] == 0 and c['streaming'] for c in tpd.status()['connections']):
        check(s.running() and time.monotonic() < deadline, f'root could not stream: {s.stderr_text()!r}')
        time.sleep(0.05)
    s.stop()
    log(f'connections: B stopped at {CONNECTIONS_PER_USER}, members at {member_conns}; root connected and streamed')
    ha.close()
    hb.close()
    for s in extra:
        s.stop()
    check(good.running(), 'the good stream ended during the limit checks')
    settle(tpd, {uid_a: 1})


def check_stall(tpd):
    stalled = tpd.varlink(timeout=10)
    idle = tpd.varlink(timeout=10)
    dribble = tpd.varlink(timeout=10)
    t0 = time.monotonic()
    stalled.send_raw(b'{"method":"org.varlink.service.GetInfo"')
    stop = threading.Event()

    def drip():
        # Slowloris: one byte every 0.5 s never completes a call either.
        for ch in b'{"method":"org.varlink.service.GetInfo","parameters":{' * 4:
            if stop.wait(0.5):
                return
            try:
                dribble.send_raw(bytes([ch]))
            except OSError:
                return
    th = threading.Thread(target=drip, daemon=True)
    th.start()
    # Others are served meanwhile.
    for _ in range(5):
        t = time.monotonic()
        reply = tpd.call('org.varlink.service.GetInfo')
        check('error' not in reply and time.monotonic() - t < 1.0, f'GetInfo while a call stalls: {reply}')
        time.sleep(0.2)
    check(stalled.wait_closed(timeout=10), 'a connection stalled mid-message was not closed within 10 s')
    elapsed = time.monotonic() - t0
    check(4.0 <= elapsed <= 8.0, f'stalled connection closed after {elapsed:.1f} s, expected about 5 s')
    check(dribble.wait_closed(timeout=5), 'a connection sending a byte every 0.5 s was not closed')
    stop.set()
    th.join(5)
    reply = idle.call('org.varlink.service.GetInfo')
    check('error' not in reply, f'a connection idle between calls was closed or refused: {reply}')
    for v in (stalled, idle, dribble):
        v.close()
    log(f'stall: half a message closed after {elapsed:.1f} s; idle connection kept')


def check_emfile(tpd):
    pid = tpd.process.pid
    old = resource.prlimit(pid, resource.RLIMIT_NOFILE)
    n_fds = len(os.listdir(f'/proc/{pid}/fd'))
    resource.prlimit(pid, resource.RLIMIT_NOFILE, (n_fds + 2, old[1]))
    conns = []
    try:
        for _ in range(20):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(tpd.socket)     # waits in the backlog once tpd is out of descriptors
            conns.append(s)
        time.sleep(0.3)
        cpu0 = tpd.cpu_seconds()
        time.sleep(2.0)
        used = tpd.cpu_seconds() - cpu0
        check(used < 0.5, f'tpd used {used:.2f} s of CPU in 2 s while out of file descriptors (spinning)')
        log(f'EMFILE: {used:.2f} s CPU in 2 s')
    finally:
        resource.prlimit(pid, resource.RLIMIT_NOFILE, old)
        for s in conns:
            s.close()
    reply = tpd.call('org.varlink.service.GetInfo')
    check('error' not in reply, f'GetInfo after EMFILE: {reply}')
    warnings = tpd.log(100000).count('Failed to accept a connection')
    check(1 <= warnings <= 10, f'{warnings} warnings about accept while out of descriptors (want a few)')


if __name__ == '__main__':
    T.run(main)
