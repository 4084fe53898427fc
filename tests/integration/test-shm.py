#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""The shared-memory transport from tpd's side, read by a client written from the layout alone
(shmring.py), on real tracefs:

(a) exact: a selective shm stream (-p) and a shm stream of every record, beside a socket stream
    (tpctl), each get exactly the generator's N calls, and the shm lines equal the socket's byte
    for byte; GetStatus shows each stream's transport;
(b) WAIT and WAKE: a WAIT for an entry already published is answered at once, one for a future
    entry only when it is published; anything else ends that stream and nothing else;
(c) a reader that never reads holds nobody up: the others get every record;
(d) a notice (the instance changed behind tpd's back) reaches the ring;
(e) the ring is retired when its last stream ends, closed when tpd stops: a mapping kept after
    shows the state; ShmTransport=no and an unknown transport;
(f) a member's fds are read-only every way: no writable mapping, no write, no truncate, no seal,
    no read-write reopen through /proc.
"""

import json
import mmap
import os
import struct
import subprocess
import time

import tpdtest as T
from shmring import RING_EVENT, RING_LOST, RING_NOTICE, ShmStream
from tpdtest import check, fail, log

# Markers of tpd's own instance: records no other process on the machine adds to its ring (a
# syscall event would bring every getppid storm of tests running beside this one).
EVENT = 'ftrace:print'
# An event nobody here calls, for the tests that need one to hold.
QUIET = 'syscalls:sys_enter_getpgid'
N = int(200_000 * float(os.environ.get('TPD_TEST_SCALE', '1')))


def markers(ctx, tpd, n, *args):
    """gen-marker into tpd's instance, waiting for a line on stdin; returns it and its pid."""
    gen = ctx.gen('GEN_MARKER', '--instance', tpd.instance, '--count', n, '--seq', '--wait', *args, 'm')
    return gen, int(gen.readline().split()[0])


def probe(tpd):
    T.write_text(os.path.join(tpd.instance_dir, 'trace_marker'), 'probe')


def events_of(entries, pid):
    return [e for e in entries if e['type'] == RING_EVENT and e['pid'] == pid]


def lost_of(entries):
    # A kernel loss (the generator outran tpd, as under a sanitizer) is a LOST entry: it may be any
    # pid's, so a stream of one pid counts it as a bound, not exactly.
    return sum(e['lost'] for e in entries if e['type'] == RING_LOST)


def complete(want, pid):
    return lambda e: len(events_of(e, pid)) + lost_of(e) >= want


def state(m):
    return struct.unpack_from('=I', m, 96)[0]


def test_exact(ctx, tpd):
    # Under a sanitizer tpd decodes several times slower than the generator writes: paced, so that
    # the kernel keeps every record and the lines can be compared.
    gen, pid = markers(ctx, tpd, N, *(('--rate', 50_000) if T.ASAN else ()))
    sel = ShmStream(tpd.socket, {'events': [EVENT], 'pids': [pid]})
    check(sel.reply.get('parameters', {}).get('transport') == 'shm', f'Stream reply: {sel.reply}')
    every = ShmStream(tpd.socket, {})
    check(every.page_all == 1 and sel.page_all == 0, 'page "all" flags')
    sock = T.Stream(ctx, tpd, ['--transport=socket', '-e', EVENT])
    T.confirm_live([sock], lambda: probe(tpd))
    gen.command('go')
    gen.readline(timeout=120, what='done')
    got_sel = sel.collect(complete(N, pid), timeout=60)
    got_all = every.collect(complete(N, pid), timeout=60)
    check(sock.drain(lambda: len([r for r in sock.records() if r.get('pid') == pid]) >= N) or lost_of(got_sel),
          f'socket stream incomplete: {len(sock.records())} lines')
    with T.Varlink(tpd.socket) as v:
        conns = v.call('io.tpd.tracing.GetStatus')['parameters']['connections']
    transports = sorted(c.get('transport', '-') for c in conns if c['streaming'])
    check(transports == ['shm', 'shm', 'socket'], f'transports in GetStatus: {transports}')
    sock.stop()
    if lost_of(got_sel) or lost_of(got_all):
        # Not the transport's: the kernel's (tpd's reads were too slow). Counts only.
        log(f'kernel losses: {lost_of(got_sel)} (selective), {lost_of(got_all)}; comparing counts only')
        check(len(events_of(got_sel, pid)) == len(events_of(got_all, pid)), 'the shm streams differ')
        sel.close()
        every.close()
        return

    lines_sock = [ln + b'\n' for ln in sock.lines if T.parse_record(ln).get('pid') == pid]
    lines_sel = [e['line'] for e in events_of(got_sel, pid)]
    lines_all = [e['line'] for e in events_of(got_all, pid)]
    log(f'{len(lines_sel)} selective, {len(lines_all)} of every record, {len(lines_sock)} socket')
    check(len(lines_sel) == N, f'selective shm stream got {len(lines_sel)}, expected {N}')
    check(len(lines_all) == N, f'shm stream of everything got {len(lines_all)} of the pid, expected {N}')
    check(not [e for e in got_sel if e['type'] == RING_EVENT and e['pid'] != pid],
          'the selective stream read records of another pid as selected')
    check(len([e for e in got_all if e['type'] == RING_EVENT]) > N, 'the stream of everything missed the probes')
    check(lines_sel == lines_sock, 'shm lines differ from the socket stream\'s')
    check(lines_sel == lines_all, 'the two shm streams read different lines')
    sel.close()
    every.close()


def test_wait_wake(ctx, tpd):
    gen, pid = markers(ctx, tpd, 10)
    s = ShmStream(tpd.socket, {'events': [EVENT], 'pids': [pid]})
    other = ShmStream(tpd.socket, {'events': [EVENT], 'pids': [pid]})
    # A WAIT for an entry far ahead is not answered (the ring is shared: others' records move it).
    s.sock.sendall(struct.pack('=IIIIQ', 6, 8, 0, 0, s.seq + 10**12))
    s.sock.settimeout(0.5)
    try:
        early = s.sock.recv(24)
        fail(f'a WAKE came for an entry not published: {early!r}')
    except TimeoutError:
        pass
    # One for the next entry is, once it is published, with the head past it.
    s.sock.sendall(struct.pack('=IIIIQ', 6, 8, 0, 0, s.seq))
    gen.command('go')
    seq = s.recv_wake(timeout=5)
    check(seq is not None and seq > s.seq, f'WAKE seq {seq}, reader at {s.seq}')
    # Already published: at once.
    s.sock.sendall(struct.pack('=IIIIQ', 6, 8, 0, 0, 0))
    t0 = time.monotonic()
    check(s.recv_wake(timeout=2) is not None, 'no WAKE for an entry already published')
    log(f'WAKE for a published entry after {1000 * (time.monotonic() - t0):.1f} ms')
    got = s.collect(lambda e: len(events_of(e, pid)) >= 10)
    check(len(events_of(got, pid)) == 10, f'{len(events_of(got, pid))} of 10 records')
    # A WAIT sent with the call itself is answered too.
    gen2, pid2 = markers(ctx, tpd, 3)
    early = ShmStream(tpd.socket, {'events': [EVENT], 'pids': [pid2]},
                      then=struct.pack('=IIIIQ', 6, 8, 0, 0, 0))
    gen2.command('go')
    check(early.recv_wake(timeout=5) is not None, 'a WAIT sent with the Stream call was not answered')
    early.close()
    # STATS: the reader's word, shown as its stream's and not in tpd's totals.
    s.sock.sendall(struct.pack('=IIIIQQ', 8, 16, 0, 0, 5, 7))
    deadline = time.monotonic() + 5
    while True:
        with T.Varlink(tpd.socket) as v:
            st = v.call('io.tpd.tracing.GetStatus')['parameters']
        mine = [c for c in st['connections'] if c.get('reader_delivered') == 5]
        if mine or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    check(mine and mine[0]['lost_client'] == 7, f'STATS not shown: {st["connections"]}')
    check(st['lost']['client'] == 0, f'a reader\'s STATS went into tpd\'s totals: {st["lost"]}')
    # Garbage ends this stream only.
    s.sock.sendall(b'\xff' * 24)
    with T.Varlink(tpd.socket):
        pass
    s.sock.settimeout(3)
    closed = False
    try:
        closed = s.sock.recv(64) == b''
    except ConnectionResetError:
        closed = True
    check(closed, 'tpd did not close a stream that sent a frame other than WAIT')
    got = other.collect(lambda e: len(events_of(e, pid)) >= 10)
    check(len(events_of(got, pid)) == 10, 'the other stream lost records')
    s.close()
    other.close()


def test_stopped_reader(ctx, tpd):
    gen, pid = markers(ctx, tpd, N, *(('--rate', 50_000) if T.ASAN else ()))
    idle = ShmStream(tpd.socket, {'events': [EVENT], 'pids': [pid]})   # never reads
    s = ShmStream(tpd.socket, {'events': [EVENT], 'pids': [pid]})
    gen.command('go')
    got = s.collect(complete(N, pid), timeout=60)
    n, lost = len(events_of(got, pid)), lost_of(got)
    # Kernel losses (a loaded machine) are LOST entries of every pid: a bound, then.
    check(n == N if not lost else n + lost >= N,
          f'a reader beside one that never reads got {n} of {N} (kernel losses {lost})')
    idle.close()
    s.close()


def test_notice(ctx, tpd):
    s = ShmStream(tpd.socket, {'events': [QUIET]})
    # Behind tpd's back: tpd repairs it within a second and tells every stream.
    T.write_text(os.path.join(tpd.instance_dir, 'events', *QUIET.split(':'), 'enable'), '0')
    got = s.collect(lambda e: any(x['type'] == RING_NOTICE for x in e), timeout=10)
    notices = [json.loads(x['line']) for x in got if x['type'] == RING_NOTICE]
    check(notices and notices[0]['notice'] == 'instance-changed', f'notices: {notices}')
    s.close()


def test_retire_and_fallback(ctx, tpd):
    s = ShmStream(tpd.socket, {'events': [QUIET]})
    check(state(s.ring) == 0, 'a live ring is not "live"')
    # fds kept after the stream hold no memory: tpd empties ring and page when the stream ends.
    kept = [os.dup(s.ring_fd), os.dup(s.page_fd)]
    s.close()
    deadline = time.monotonic() + 5
    while any(os.fstat(fd).st_size for fd in kept) and time.monotonic() < deadline:
        time.sleep(0.05)
    sizes = [os.fstat(fd).st_size for fd in kept]
    check(sizes == [0, 0], f'ring and page of an ended stream still hold {sizes} bytes')
    for fd in kept:
        os.close(fd)

    with T.Varlink(tpd.socket) as v:
        r = v.call('io.tpd.tracing.Stream', {'events': [QUIET], 'transport': 'carrier-pigeon'}, upgrade=True)
    check(r.get('error') == 'org.varlink.service.InvalidParameter' and
          r['parameters'].get('parameter') == 'transport', f'unknown transport: {r}')

    off = ctx.tpd(args=['--shm-transport', 'no'])
    s = ShmStream(off.socket, {'events': [QUIET]})
    check(s.reply['parameters'].get('transport') == 'socket' and not s.fds,
          f'ShmTransport=no answered {s.reply} with {len(s.fds)} fds')
    s.close()

    # A stream alive when tpd stops: its ring says "closed".
    s = ShmStream(tpd.socket, {'events': [QUIET]})
    tpd.stop()
    check(state(s.ring) == 1, f'the ring after tpd stopped has state {state(s.ring)}, expected 1 (closed)')
    s.close()


def member_child(sock, uid, gid, groups, out):
    report = {}
    try:
        os.setgroups(groups)
        os.setgid(gid)
        os.setuid(uid)
        s = ShmStream(sock, {'events': [QUIET]})
        report['transport'] = s.reply.get('parameters', {}).get('transport')
        for name, fd in (('ring', s.ring_fd), ('page', s.page_fd)):
            size = s.ring_size if name == 'ring' else s.params['page']['size']
            tries = {
                'mmap-write': lambda: mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE),
                'write': lambda: os.write(fd, b'x'),
                'pwrite': lambda: os.pwrite(fd, b'x', 0),
                'ftruncate': lambda: os.ftruncate(fd, 0),
                'reopen-rdwr': lambda: os.open(f'/proc/self/fd/{fd}', os.O_RDWR),
                'seal': lambda: __import__('fcntl').fcntl(fd, 1033, 1),   # F_ADD_SEALS, F_SEAL_SEAL
            }
            for what, fn in tries.items():
                try:
                    fn()
                    report[f'{name}:{what}'] = 'allowed'
                except OSError as e:
                    report[f'{name}:{what}'] = e.errno
        s.close()
    except Exception as e:   # reported, not raised: the child must report
        report['error'] = repr(e)
    os.write(out, json.dumps(report).encode())
    os.close(out)


def test_member(ctx):
    with T.TestUsers(ctx, 'tshm', ['A']) as users:
        tpd = users.tpd()
        pid, fd = T.fork_child(member_child, tpd.socket, users.uid['A'], users.primary['A'],
                               [users.gid], )
        report = T.collect_child(pid, fd, 20)
        log(f'member: {report}')
        check('error' not in report, f'member child: {report}')
        check(report['transport'] == 'shm', f'a member got transport {report["transport"]}')
        allowed = [k for k, v in report.items() if v == 'allowed']
        check(not allowed, f'a member could {allowed}')
        tpd.stop()


def main(ctx):
    # A ring that holds the whole run: the Python reader is slower than the generator.
    tpd = ctx.tpd(args=['--shm-ring-kb', str(max(65536, N * 512 // 1024))])
    test_exact(ctx, tpd)
    test_wait_wake(ctx, tpd)
    test_stopped_reader(ctx, tpd)
    test_notice(ctx, tpd)
    test_retire_and_fallback(ctx, tpd)
    test_member(ctx)


T.run(main)
