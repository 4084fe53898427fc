#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""The shared-memory transport end to end, read by the real tpctl (`tpctl stream --transport=shm`):

1. exact at full speed: 8 shm streams of one pid beside a socket stream; each counts records +
   lost = N + the probes it saw, and with no kernel loss (the instance's stats) exactly that many
   records and no lost line; GetStatus lists 8 connections with "transport":"shm";
2. a stopped consumer (SIGSTOP, an 8 MiB ring overrun, SIGCONT) holds nobody up: 8 others get every
   record, and the stopped one counts records + lost = N + probes exactly (the reader page), its
   lost lines tpd's own, with a ts within the run; tpd's peak RSS stays under the bound;
3. the same lines as the socket: a known workload streamed both ways side by side, for several
   option sets (plain, --symbolic, --print, both, -c, --filter, --time=iso, --count); the lines
   are compared in their order, which is the publish order on both transports;
4. tpd ends: a stopped shm stream, resumed after SIGTERM (or SIGKILL) of tpd, prints everything
   tpd published and exits 69 with "tpd closed the stream";
5. ShmTransport=no: --transport=shm fails with a message, --transport=auto gets every record over
   the socket;
6. a member of the access group streams over shm and gets every record;
7. SIGINT ends a stream read line by line (--time) at once, with status 0, while tpd publishes
   faster than the stream reads;
8. a ring past tpctl's address space (RLIMIT_AS): --transport=shm fails, auto falls back to the
   socket with one warning and gets every record.
"""

import datetime
import json
import os
import resource
import signal
import subprocess
import threading
import time

import tpdtest as T
from tpdtest import check, log

EVENT = 'syscalls:sys_enter_getppid'
SCALE = float(os.environ.get('TPD_TEST_SCALE', '1'))
N_FULL = int(500_000 * SCALE)
N_STORM = int(100_000 * SCALE)
RING_KB = 8192
N_SAME = 2_000
N_END = 5_000
# Calls at full speed that outlast the wait for SIGINT by far.
N_INTERRUPT = 100_000_000
# A ring larger than the address space tpctl may have (RLIMIT_AS), which is ample for the rest.
MAP_RING_KB = 1024 * 1024
MAP_LIMIT = 512 << 20
GEN_CPU = 0
# Under a sanitizer tpd decodes several times slower than the generator calls.
FULL_RATE = 100_000 if T.ASAN else 0
# The 3 readers that run beside the stopped one read an 8 MiB ring (about 6,000 entries): paced
# so that one scheduled out for a while on a busy machine still keeps up.
STORM_RATE = 10_000 if T.ASAN else 20_000


class Tally:
    """A stream's sink for the long runs: records of the pid before and after "go" (boot ns; the
    probes are before), lost lines by cause, anything else as an error."""

    def __init__(self, pid):
        self.pid = pid
        self.go_ts = None
        self.early = 0
        self.run = 0
        self.lost = {}
        self.lost_recs = []
        self.errors = []

    def __call__(self, line):
        if line.startswith(b'{"ts":') and b'"lost":' not in line:
            rec = json.loads(line)
            if rec.get('event') != EVENT or rec.get('pid') != self.pid:
                if len(self.errors) < 5:
                    self.errors.append(f'a record not of pid {self.pid}: {line[:200]!r}')
            elif self.go_ts is not None and rec['ts'] >= self.go_ts:
                self.run += 1
            else:
                self.early += 1
            return
        rec = T.parse_record(line)
        if 'lost' not in rec:
            if len(self.errors) < 5:
                self.errors.append(f'unexpected line: {line[:200]!r}')
            return
        self.lost[rec['cause']] = self.lost.get(rec['cause'], 0) + rec['lost']
        self.lost_recs.append(rec)

    @property
    def lost_total(self):
        return sum(self.lost.values())

    @property
    def records(self):
        return self.early + self.run


def shm_stream(tpd, *args, **kw):
    return tpd.stream('--transport=shm', *args, **kw)


def pin(tpd, pid):
    """Holds EVENT with a kernel filter of the generator: the kernel's stats then count its calls
    only, the ground truth of the run."""
    tpd.tpctl_ok('enable', EVENT, '--filter', f'common_pid == {pid}')


def wait_streaming(tpd, n, timeout=20.0):
    """Until GetStatus shows n streaming connections: each one's selection is then in place, and
    every record from here on reaches it."""
    deadline = time.monotonic() + timeout
    while True:
        conns = tpd.call('io.tpd.tracing.GetStatus')['parameters']['connections']
        if sum(1 for c in conns if c['streaming']) >= n:
            return conns
        check(time.monotonic() < deadline, f'not {n} streams within {timeout} s: {conns}')
        time.sleep(0.05)


def settle_probes(streams, gen, tallies):
    """After confirm_live: one more probe, until every stream shows it; each stream's probes are
    then all in its file, and its count of them final."""
    for s in streams:
        s.poll()
    seen = [t.early for t in tallies]
    gen.probe()
    for s, t, n in zip(streams, tallies, seen):
        s.wait_for(lambda: t.early > n, 30, 'the last probe')


def test_full_speed(ctx, tpd):
    log(f'--- 1. 8 shm streams and a socket stream, {N_FULL} calls ' +
        (f'at {FULL_RATE}/s' if FULL_RATE else 'at full speed'))
    gen = ctx.gen('GEN_GETPPID', '--count', N_FULL, '--cpu', GEN_CPU, *(['--rate', FULL_RATE] if FULL_RATE else []))
    pid, = gen.pids()
    pin(tpd, pid)
    tallies = [Tally(pid) for _ in range(9)]
    streams = [shm_stream(tpd, '-e', EVENT, '-p', str(pid), sink=t) for t in tallies[:8]]
    streams.append(tpd.stream('--transport=socket', '-e', EVENT, '-p', str(pid), sink=tallies[8]))
    T.confirm_live(streams, gen.probe, timeout=30)
    settle_probes(streams, gen, tallies)
    conns = tpd.call('io.tpd.tracing.GetStatus')['parameters']['connections']
    transports = sorted(c.get('transport', '-') for c in conns if c['streaming'])
    check(transports == ['shm'] * 8 + ['socket'], f'transports in GetStatus: {transports}')

    before = tpd.stats()
    go_ts = gen.go()
    for t in tallies:
        t.go_ts = go_ts
    done_ts, count, elapsed = gen.wait_done(timeout=240)
    check(count == N_FULL, f'generator made {count} calls, expected {N_FULL}')
    log(f'generator: {N_FULL} calls in {elapsed / 1e9:.2f} s')
    for s, t in zip(streams, tallies):
        s.drain(lambda: t.run + t.lost_total >= N_FULL, timeout=180, quiet=1.0)
    end_ts = T.boottime_ns()
    delta = T.stats_delta(before, tpd.stats())
    for s in streams:
        s.stop()
    kernel_lost = T.kernel_lost(delta)
    log(f'kernel: written {T.written(delta)}, lost {kernel_lost}')
    incomplete = []
    check(T.written(delta) == N_FULL, f'kernel stats: {T.written(delta)} written during the run, expected {N_FULL}')
    for s, t in zip(streams, tallies):
        name = ' '.join(s.args)
        log(f'[{name}] {t.early} probes, {t.run} of the run, lost {t.lost}')
        check(not t.errors, f'[{name}] bad lines:\n  ' + '\n  '.join(t.errors))
        check(1 <= t.early <= gen.probes, f'[{name}] {t.early} probe records of {gen.probes} probes')
        check(t.run + t.lost_total == N_FULL,
              f'[{name}] {t.run} records + {t.lost_total} lost = {t.run + t.lost_total}, expected {N_FULL} '
              f'({"duplicates" if t.run + t.lost_total > N_FULL else "a silent gap"})')
        for rec in t.lost_recs:
            check(go_ts <= rec['ts'] <= end_ts, f'[{name}] lost record outside the run: {rec}')
        if kernel_lost == 0 and (t.lost_total or t.run != N_FULL):
            incomplete.append(f'[{name}] {t.run} records, lost {t.lost}')
    check(not incomplete, 'no kernel loss, but streams did not get every record:\n  ' + '\n  '.join(incomplete))
    if kernel_lost:
        log(f'note: the kernel lost {kernel_lost} at full speed; counts checked, not completeness')
    tpd.tpctl_ok('disable', EVENT)


def test_stopped_consumer(ctx):
    log(f'--- 2. a stopped consumer beside 8 running ones, an 8 MiB ring, {N_STORM} calls at {STORM_RATE}/s')
    tpd = ctx.tpd(args=['--shm-ring-kb', str(RING_KB)])
    gen = ctx.gen('GEN_GETPPID', '--count', N_STORM, '--cpu', GEN_CPU, '--rate', STORM_RATE)
    pid, = gen.pids()
    pin(tpd, pid)
    tallies = [Tally(pid) for _ in range(9)]
    streams = [shm_stream(tpd, '-e', EVENT, '-p', str(pid), sink=t) for t in tallies]
    T.confirm_live(streams, gen.probe, timeout=30)
    settle_probes(streams, gen, tallies)
    stopped, st = streams[0], tallies[0]
    stopped.signal(signal.SIGSTOP)
    before = tpd.stats()
    go_ts = gen.go()
    for t in tallies:
        t.go_ts = go_ts
    done_ts = gen.wait_done(timeout=240)[0]
    for s, t in zip(streams[1:], tallies[1:]):
        s.drain(lambda: t.run + t.lost_total >= N_STORM, timeout=120, quiet=0.5)
    stopped.signal(signal.SIGCONT)
    stopped.drain(lambda: st.run + st.lost_total >= N_STORM, timeout=120, quiet=1.0)
    end_ts = T.boottime_ns()
    delta = T.stats_delta(before, tpd.stats())
    # tpd's memory stays under the bound (docs/design.md "Memory bound"): the fixed part, one
    # ring, and per shared-memory stream its page (ShmRingKB / 256 and a little), no queue.
    hwm = T.vm_kb(tpd.process.proc.pid, 'VmHWM')
    bound = 16 * 1024 + RING_KB + len(streams) * (RING_KB // 256 + 64)
    log(f'tpd VmHWM {hwm} KiB, bound {bound} KiB')
    if not T.ASAN:
        check(hwm <= bound, f'tpd peak RSS {hwm} KiB over the bound {bound} KiB')
    for s in streams:
        s.stop()
    kernel_lost = T.kernel_lost(delta)
    check(T.written(delta) == N_STORM, f'kernel stats: {T.written(delta)} written, expected {N_STORM}')
    for s, t in zip(streams, tallies):
        log(f'[{"stopped" if t is st else "running"}] {t.early} probes, {t.run} of the run, lost {t.lost}')
        check(not t.errors, 'bad lines:\n  ' + '\n  '.join(t.errors))
    for t in tallies[1:]:
        check(t.run + t.lost_total == N_STORM, f'a running reader: {t.run} + lost {t.lost} != {N_STORM}')
        if kernel_lost == 0:
            check(t.run == N_STORM and not t.lost, f'a running reader beside a stopped one got {t.run} of '
                                                   f'{N_STORM}, lost {t.lost}')
    # Streams that went live earlier saw more of confirm_live()'s probes: each counts its own.
    probes = st.early
    check(st.records + st.lost_total == N_STORM + probes,
          f'the stopped reader: {st.records} records + {st.lost_total} lost = {st.records + st.lost_total}, '
          f'expected {N_STORM} + {probes} probes')
    check(st.lost.get('client', 0) > 0, f'the stopped reader reports no client loss ({st.lost}): '
                                        f'the ring was not overrun?')
    check(set(st.lost) <= {'client', 'overrun', 'dropped', 'unknown'}, f'causes {st.lost}')
    for rec in st.lost_recs:
        check(go_ts <= rec['ts'] <= end_ts, f'a lost record with ts {rec["ts"]} outside the run '
                                            f'[{go_ts}, {end_ts}] (done at {done_ts}): {rec}')
    log(f'stopped reader: lost lines {st.lost_recs}')
    tpd.stop()


def compare_same(ctx, tpd, opts, window=True):
    """A deterministic workload to a shm and a socket stream of the same options: the same lines."""
    gen = ctx.gen('GEN_GETPPID', '--count', N_SAME, '--cpu', GEN_CPU, '--rate', 20_000)
    pid, = gen.pids()
    opts = [o.replace('PID', str(pid)) for o in opts]
    args = ['-e', EVENT, '-e', 'ftrace:print', *opts]
    pin(tpd, pid)
    shm = shm_stream(tpd, *args)
    sock = tpd.stream('--transport=socket', *args)
    wait_streaming(tpd, 2)
    go_ts = gen.go()
    for i in range(50):
        tpd.marker(f'tpdtest-same {i}')
    gen.wait_done(timeout=60)
    for i in range(50, 100):
        tpd.marker(f'tpdtest-same {i}')
    end_ts = T.boottime_ns()

    def in_window(lines):
        out = []
        for ln in lines:
            rec = json.loads(ln)
            if not window or go_ts <= rec['ts'] <= end_ts:
                out.append(ln)
        return out

    counted = any(o.startswith('--count') for o in opts)
    want = N_SAME if counted else None
    if counted:
        for s in (shm, sock):
            rc = s.wait(30)
            check(rc == 0, f'tpctl stream {" ".join(s.args)} exited {rc}; stderr {s.stderr_text()!r}')
            s.poll()
    else:
        for s in (shm, sock):
            s.drain(lambda: sum(1 for ln in s.lines if f'"pid":{pid},'.encode() in ln) >= N_SAME, timeout=60)
        shm.stop()
        sock.stop()
    a, b = in_window(shm.lines), in_window(sock.lines)
    events = sum(1 for ln in a if b'"lost":' not in ln)
    log(f'{" ".join(opts) or "(no option)"}: {len(a)} shm lines, {len(b)} socket lines')
    if not any(o.startswith('--time') for o in opts):
        for ln in a:
            T.parse_record(ln)
    check(not any(b'"lost":' in ln for ln in a + b), f'{opts}: lost lines')
    if want is not None:
        check(events == want, f'{opts}: {events} records, expected {want}')
    else:
        check(events >= N_SAME, f'{opts}: {events} records, expected at least {N_SAME}')
    shm_lines = a
    if '--time=iso' in opts:
        a, b = same_but_time(a, b)
    if a != b:
        diff = next(i for i in range(min(len(a), len(b)) + 1) if i >= min(len(a), len(b)) or a[i] != b[i])
        check(False, f'{opts}: the shm lines differ from the socket\'s at line {diff} of {len(a)}/{len(b)}:\n'
                     f'  shm:    {a[diff] if diff < len(a) else None!r}\n'
                     f'  socket: {b[diff] if diff < len(b) else None!r}')
    tpd.tpctl_ok('disable', EVENT)
    return shm_lines


def iso_ns(text):
    secs, _, frac = text.rstrip('Z').partition('.')
    return int(datetime.datetime.fromisoformat(secs + '+00:00').timestamp()) * 10**9 + int(frac.ljust(9, '0'))


def same_but_time(a, b):
    """--time=iso: each stream takes the trace clock's offset to the wall clock from tpd's reply to
    its own call, measured then (between two reads of the wall clock): two streams may differ by a
    few ns of that measurement, the same for all their lines. The lines without "time" must be
    equal."""
    def split(ln):
        rec = json.loads(ln)
        t = rec.pop('time')
        return json.dumps(rec, separators=(',', ':')).encode(), iso_ns(t)
    sa, sb = [split(ln) for ln in a], [split(ln) for ln in b]
    diffs = {ta - tb for (_, ta), (_, tb) in zip(sa, sb)}
    log(f'--time=iso: the shm stream\'s "time" minus the socket stream\'s: {sorted(diffs)} ns')
    check(len(diffs) <= 1 and all(abs(d) < 100_000 for d in diffs),
          f'--time=iso: the two streams\' "time" differ by {sorted(diffs)[:10]} ns')
    return [x for x, _ in sa], [x for x, _ in sb]


def test_same_lines(ctx, tpd):
    log('--- 3. the same lines over shm and the socket')
    for opts in ([], ['--symbolic'], ['--print'], ['-c', '0'], ['--filter', 'common_pid == PID'],
                 ['--symbolic', '--print'], ['--time=iso'], [f'--count={N_SAME}']):
        lines = compare_same(ctx, tpd, opts)
        if '--time=iso' in opts:
            check(all(list(json.loads(ln))[:2] == ['ts', 'time'] for ln in lines), '--time=iso: no "time" after "ts"')
        if '--print' in opts:
            check(all(b'"print":' in ln for ln in lines), '--print: a line without "print"')
        if opts == ['-c', '0']:
            check(all(json.loads(ln)['cpu'] == 0 for ln in lines), '-c 0: a record of another CPU')


def test_tpd_ends(ctx, sig):
    log(f'--- 4. tpd ends by {signal.Signals(sig).name} while a shm stream is stopped')
    tpd = ctx.tpd()
    gen = ctx.gen('GEN_GETPPID', '--count', N_END, '--cpu', GEN_CPU, '--rate', 20_000)
    pid, = gen.pids()
    # Only the generator in the ring: another process's getppid storm would wrap it meanwhile.
    pin(tpd, pid)
    tallies = [Tally(pid) for _ in range(3)]
    plain = shm_stream(tpd, '-e', EVENT, '-p', str(pid), sink=tallies[0])
    lines = shm_stream(tpd, '-e', EVENT, '-p', str(pid), '--count=1000000000', sink=tallies[1])
    ref = tpd.stream('--transport=socket', '-e', EVENT, '-p', str(pid), sink=tallies[2])
    streams = [plain, lines, ref]
    T.confirm_live(streams, gen.probe, timeout=30)
    settle_probes(streams, gen, tallies)
    plain.signal(signal.SIGSTOP)
    lines.signal(signal.SIGSTOP)
    go_ts = gen.go()
    for t in tallies:
        t.go_ts = go_ts
    gen.wait_done(timeout=60)
    # tpd published all of it once the socket stream has it.
    ref.drain(lambda: tallies[2].run >= N_END, timeout=60)
    check(tallies[2].run == N_END, f'socket stream: {tallies[2].run} of {N_END}')
    if sig == signal.SIGKILL:
        tpd.process.signal(sig)
        check(tpd.process.wait(10) is not None, 'tpd did not die of SIGKILL')
    else:
        tpd.stop(sig, clear_pins=False)
    for s in (plain, lines):
        s.signal(signal.SIGCONT)
    for s, t in zip(streams, tallies):
        rc = s.wait(15)
        check(rc is not None, f'tpctl stream {" ".join(s.args)} still running 15 s after tpd ended')
        s.poll()
        check(not s.partial, f'{" ".join(s.args)}: a partial last line {s.partial[:200]!r}')
        err = s.stderr_text()
        check(rc == T.EXIT_DAEMON_GONE, f'tpctl stream {" ".join(s.args)} exited {rc} when tpd ended, '
                                        f'expected {T.EXIT_DAEMON_GONE}; stderr {err!r}')
        check('tpd closed the stream' in err, f'{" ".join(s.args)}: stderr {err!r}')
        check(not t.errors and not t.lost, f'{" ".join(s.args)}: {t.errors} lost {t.lost}')
        check(t.run == N_END and t.early == tallies[2].early,
              f'{" ".join(s.args)}: {t.early} probes and {t.run} records after tpd ended, expected '
              f'{tallies[2].early} and {N_END}')


def auto_over_socket(ctx, tpd, **kw):
    """A --transport=auto stream (kw to subprocess.Popen) that tpd serves over the socket gets every
    record; returns it, ended."""
    gen = ctx.gen('GEN_GETPPID', '--count', N_END, '--cpu', GEN_CPU, '--rate', 20_000)
    pid, = gen.pids()
    tally = Tally(pid)
    s = tpd.stream('--transport=auto', '-e', EVENT, '-p', str(pid), sink=tally, **kw)
    conns = wait_streaming(tpd, 1)
    check([c.get('transport') for c in conns if c['streaming']] == ['socket'], f'connections: {conns}')
    tally.go_ts = gen.go()
    gen.wait_done(timeout=60)
    s.drain(lambda: tally.run >= N_END, timeout=60)
    s.stop()
    check(tally.run == N_END and not tally.lost and not tally.errors,
          f'--transport=auto fell back and got {tally.run} of {N_END}, lost {tally.lost}, {tally.errors}')
    return s


def test_no_shm(ctx):
    log('--- 5. ShmTransport=no: --transport=shm fails, auto falls back')
    tpd = ctx.tpd(args=['--shm-transport', 'no'])
    r = tpd.tpctl('stream', '--transport=shm', '-e', EVENT, '--count=1', timeout=15)
    check(r.returncode == 1, f'--transport=shm against ShmTransport=no exited {r.returncode}; stderr {r.stderr!r}')
    check('did not agree to stream over shared memory' in r.stderr, f'stderr {r.stderr!r}')
    check(not r.stdout, f'stdout {r.stdout[:200]!r}')
    auto_over_socket(ctx, tpd)
    tpd.stop()


def test_map_refused(ctx):
    log('--- 8. a ring tpctl cannot map (RLIMIT_AS): auto falls back to the socket, shm fails')
    if T.ASAN:
        log('skipped under a sanitizer, whose shadow memory needs more address space than the limit')
        return
    tpd = ctx.tpd(args=['--shm-ring-kb', str(MAP_RING_KB)])

    def limited():
        resource.setrlimit(resource.RLIMIT_AS, (MAP_LIMIT, MAP_LIMIT))

    argv = [T.env_program('TPCTL'), '--socket', tpd.socket, 'stream', '-e', EVENT]
    r = subprocess.run(argv + ['--transport=shm', '--count=1'], capture_output=True, text=True, timeout=15,
                       preexec_fn=limited)
    check(r.returncode == 1 and "cannot map the 'ring'" in r.stderr,
          f'--transport=shm with a ring past RLIMIT_AS exited {r.returncode}; stderr {r.stderr!r}')
    s = auto_over_socket(ctx, tpd, preexec_fn=limited)
    warning = s.stderr_text().splitlines()
    check(len(warning) == 1 and 'streaming over its socket instead' in warning[0],
          f'--transport=auto fell back with stderr {warning!r}')
    tpd.stop()


def test_member(ctx):
    log('--- 6. a member of the access group streams over shm')
    with T.TestUsers(ctx, 'tshs', ['A']) as users:
        tpd = users.tpd()
        gen = ctx.gen('GEN_GETPPID', '--count', N_END, '--cpu', GEN_CPU, '--rate', 20_000)
        pid, = gen.pids()
        pin(tpd, pid)
        out_path = os.path.join(ctx.tmpdir, 'member.ndjson')
        argv = users.setpriv('A') + [T.env_program('TPCTL'), '--socket', tpd.socket, 'stream', '--transport=shm',
                                     '-e', EVENT, '-p', str(pid), f'--count={N_END}']
        with open(out_path, 'wb') as out:
            member = T.Process(ctx, 'member-stream', argv, stdout=out)
        conns = wait_streaming(tpd, 1)
        mine = [c for c in conns if c['streaming']]
        check([(c['uid'], c.get('transport')) for c in mine] == [(users.uid['A'], 'shm')],
              f'the member\'s stream in GetStatus: {mine}')
        tally = Tally(pid)
        tally.go_ts = gen.go()
        gen.wait_done(timeout=60)
        rc = member.wait(60)
        check(rc == 0, f'the member\'s tpctl stream --transport=shm exited {rc}; stderr {member.stderr_text()!r}')
        with open(out_path, 'rb') as f:
            for line in f.read().splitlines():
                tally(line)
        check(tally.run == N_END and not tally.lost and not tally.errors and not tally.early,
              f'the member got {tally.run} of {N_END}, lost {tally.lost}, {tally.errors}')
        tpd.stop()


def throttle(pid, done, share=0.03):
    """Lets process pid run only share of the time (SIGSTOP, SIGCONT), as a consumer that the
    machine schedules out, until done is set or it ends."""
    fd = os.pidfd_open(pid)
    try:
        while not done.is_set():
            signal.pidfd_send_signal(fd, signal.SIGSTOP)
            time.sleep(0.01 * (1 - share))
            signal.pidfd_send_signal(fd, signal.SIGCONT)
            time.sleep(0.01 * share)
    except ProcessLookupError:
        pass
    finally:
        os.close(fd)


def test_interrupt(ctx, tpd):
    log('--- 7. SIGINT ends a stream read line by line at once, while tpd publishes faster than it reads')
    gen = ctx.gen('GEN_GETPPID', '--count', N_INTERRUPT, '--cpu', GEN_CPU)
    pid, = gen.pids()
    argv = [T.env_program('TPCTL'), '--socket', tpd.socket, 'stream', '--transport=shm', '-e', EVENT,
            '-p', str(pid), '--time=relative']
    s = T.Process(ctx, 'interrupted-stream', argv, stdout=subprocess.DEVNULL)
    wait_streaming(tpd, 1)
    done = threading.Event()
    slow = threading.Thread(target=throttle, args=(s.pid, done))
    slow.start()
    try:
        gen.go()
        time.sleep(1)
        check(gen.running(), 'the generator ended before the signal: raise N_INTERRUPT')
        t0 = time.monotonic()
        s.signal(signal.SIGINT)
        rc = s.wait(30)
        elapsed = time.monotonic() - t0
    finally:
        done.set()
        slow.join()
        s.signal(signal.SIGCONT)
        gen.kill()
    log(f'tpctl exited {rc} {elapsed:.2f} s after SIGINT')
    check(rc == 0, f'tpctl stream exited {rc} after SIGINT; stderr {s.stderr_text()!r}')
    check(elapsed < 2, f'tpctl stream took {elapsed:.1f} s to end after SIGINT')


def main(ctx):
    tpd = ctx.tpd()
    test_same_lines(ctx, tpd)
    test_full_speed(ctx, tpd)
    tpd.stop()
    test_stopped_consumer(ctx)
    test_tpd_ends(ctx, signal.SIGTERM)
    test_tpd_ends(ctx, signal.SIGKILL)
    test_no_shm(ctx)
    test_member(ctx)
    # A small ring: what the throttled stream has left to read at the signal is at most one.
    tpd = ctx.tpd(args=['--shm-ring-kb', str(RING_KB)])
    test_interrupt(ctx, tpd)
    tpd.stop()
    test_map_refused(ctx)


if __name__ == '__main__':
    T.run(main)
