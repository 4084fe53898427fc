#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""CPUs that come and go (docs/design.md §1): tpd reads the online CPUs, starts on one that comes online,
drains and stops one that goes offline, and never spins.

1. cpu1 offline when tpd starts (its trace_pipe_raw then has no ring buffer and polls ready
   forever): tpd idles at <= 0.1 % CPU over a few seconds, says little about CPU 1, and GetStatus
   reports cpu1 offline.
2. cpu1 back online: within about a second GetStatus says so. 1.5 s after it came online, 100,000
   getppid calls pinned to cpu1 at full speed reach a stream writing to a file, all of them: none
   lost (the whole burst is read from the new CPU's buffer, decoded, into the stream's queue).
   Then a larger storm is streamed exactly (delivered + lost = written, per CPU), without
   restarting tpd.
3. cpu1 taken offline in the middle of a paced run on cpu1 (the kernel moves the generator to
   cpu0): tpd drains what cpu1's buffer held, does not spin while cpu1 is away, and
   delivered + lost = what the kernel wrote, on each CPU.

Takes cpu1 offline twice, for about four and three seconds; whatever happens it is put back
online (other tests on the machine use it). Skips when cpu1 cannot be taken offline here.
"""

import atexit
import glob
import os
import re
import time

import tpdtest as T
from tpdtest import check, log

CPU = 1
ONLINE = f'/sys/devices/system/cpu/cpu{CPU}/online'
EVENT = 'syscalls:sys_enter_getppid'
SCALE = float(os.environ.get('TPD_TEST_SCALE', 1))
IDLE_SECONDS = 3.0
IDLE_MAX_SHARE = 0.001 * T.SLOWDOWN  # docs/performance.md: idle <= 0.1 % CPU (a spin is 100 %)
STORM_N = int(200_000 * SCALE)
ONLINE_N = 100_000              # the lossless run 1.5 s after cpu1 came online
ONLINE_DELAY = 1.5
PACED_RATE = 20_000
PACED_N = int(30_000 * SCALE)   # 1.5 s at PACED_RATE


class Cpu:
    """Takes one CPU offline and always puts it back (also from atexit, should the test die)."""

    def __init__(self, cpu):
        self.cpu = cpu
        self.path = f'/sys/devices/system/cpu/cpu{cpu}/online'
        self.offline_since = None
        atexit.register(self.restore)

    def online(self):
        return T.read_text(self.path).strip() == '1'

    def set(self, online):
        if online and self.offline_since is None:
            return
        T.write_text(self.path, '1' if online else '0')
        if online:
            log(f'cpu{self.cpu} online again after {time.monotonic() - self.offline_since:.2f} s offline')
            self.offline_since = None
        else:
            self.offline_since = time.monotonic()
            log(f'cpu{self.cpu} offline')

    def restore(self):
        if self.offline_since is None:
            return
        for _ in range(50):
            try:
                T.write_text(self.path, '1')
                self.offline_since = None
                return
            except OSError as e:
                err = e
                time.sleep(0.1)
        print(f'FAIL: could not bring cpu{self.cpu} back online: {err}', flush=True)


def cpu_ns(pid):
    """CPU time of every thread of pid in ns (schedstat: exact, where /proc/PID/stat has 10 ms ticks)."""
    total = 0
    for path in glob.glob(f'/proc/{pid}/task/*/schedstat'):
        try:
            total += int(T.read_text(path).split()[0])
        except (OSError, ValueError, IndexError):
            pass
    return total


def cpu_share(tpd, seconds):
    ns0, t0 = cpu_ns(tpd.process.pid), time.monotonic()
    time.sleep(seconds)
    ns1, t1 = cpu_ns(tpd.process.pid), time.monotonic()
    return (ns1 - ns0) / ((t1 - t0) * 1e9)


def line_count(stream):
    with open(stream.out_path, 'rb') as f:
        return f.read().count(b'\n')


def cpu_lines(tpd):
    return [line for line in tpd.log(1 << 20).splitlines() if re.search(rf'\bCPU {CPU}\b', line)]


def status_online(tpd):
    st = tpd.status()
    cpus = {c['cpu']: c for c in st['cpus']}
    for c in cpus.values():
        check(isinstance(c.get('online'), bool), f'GetStatus cpu entry without a boolean "online": {c}')
    return {n: c['online'] for n, c in cpus.items()}


class Tally:
    def __init__(self, pid):
        self.pid = pid
        self.delivered = {}
        self.lost = {}
        self.causes = {}
        self.errors = []
        self.last_ts = {}
        self.since = 0

    def total(self, d):
        return sum(d.values())

    def feed(self, line):
        rec = T.parse_record(line)
        cpu = rec['cpu']
        if 'lost' in rec:
            self.lost[cpu] = self.lost.get(cpu, 0) + rec['lost']
            self.causes[rec['cause']] = self.causes.get(rec['cause'], 0) + rec['lost']
            return
        if rec['event'] != EVENT or rec['pid'] != self.pid:
            # Between two runs the instance may record another process's getppid calls for a
            # moment (the old stream's hold on the event ends after its kernel filter is gone);
            # they were written before this run's "go" and are not part of the books.
            if rec['ts'] < self.since:
                return
            if len(self.errors) < 5:
                self.errors.append(f'record not from the generator (pid {self.pid}): {line!r}')
            return
        if rec['ts'] < self.last_ts.get(cpu, 0) and len(self.errors) < 5:
            self.errors.append(f'ts went backwards on CPU {cpu}: {self.last_ts[cpu]} then {line!r}')
        self.last_ts[cpu] = rec['ts']
        # A probe made before the books opened may still be on its way: count the run only.
        if rec['ts'] >= self.since:
            self.delivered[cpu] = self.delivered.get(cpu, 0) + 1

    def start(self, go_ts):
        """Counts records from go_ts on (gen.go()'s time, just before the run's first call)."""
        self.since = go_ts
        self.delivered.clear()
        self.lost.clear()
        self.causes.clear()


def check_exact(tally, before, after, n, label):
    """delivered + lost = written, in total (= n) and on each CPU."""
    delta = T.stats_delta(before, after)
    written = {c: T.written(delta, c) for c in delta}
    log(f'{label}: delivered {tally.delivered}, lost {tally.lost}, kernel written {written}')
    check(not tally.errors, 'bad records:\n  ' + '\n  '.join(tally.errors))
    check(sum(written.values()) == n, f'{label}: kernel stats say {sum(written.values())} written, expected {n}')
    for c in sorted(set(written) | set(tally.delivered) | set(tally.lost)):
        got = tally.delivered.get(c, 0) + tally.lost.get(c, 0)
        check(got == written.get(c, 0),
              f'{label}: CPU {c}: {tally.delivered.get(c, 0)} delivered + {tally.lost.get(c, 0)} lost = {got}, '
              f'but the kernel wrote {written.get(c, 0)} there')
    left = {c: s.get('entries', 0) for c, s in after.items() if s.get('entries', 0)}
    check(not left, f'{label}: records left unread in the ring buffers: {left}')


def storm_on_cpu(ctx, tpd, n, not_before=0.0):
    """n getppid calls at full speed on CPU into a stream writing to a file, from not_before (a
    time.monotonic()) on; returns the tally and the kernel's stats before and after."""
    gen = ctx.gen('GEN_GETPPID', '--count', n, '--cpu', CPU)
    pid, = gen.pids()
    tpd.tpctl_ok('enable', EVENT, '--filter', f'common_pid == {pid}')
    tally = Tally(pid)
    stream = tpd.stream('-e', EVENT, sink=tally.feed)
    # The probes come from cpu1: a delivered one proves tpd reads the CPU that came online.
    T.confirm_live([stream], gen.probe)
    check(set(tally.delivered) == {CPU}, f'probe records from CPUs {sorted(tally.delivered)}, expected only {CPU}')
    tally.first_s = time.monotonic()
    before = tpd.stats()
    time.sleep(max(0.0, not_before - time.monotonic()))
    tally.go_s = time.monotonic()
    tally.start(gen.go())
    gen.wait_done(timeout=120)
    stream.drain(lambda: tally.total(tally.delivered) + tally.total(tally.lost) >= n, timeout=60)
    after = tpd.stats()
    stream.stop()
    tpd.tpctl_ok('disable', EVENT)
    return tally, before, after


def main(ctx):
    if not os.path.exists(ONLINE):
        raise T.TestSkip(f'{ONLINE} does not exist: cpu{CPU} cannot be taken offline here')
    if not os.access(ONLINE, os.W_OK):
        raise T.TestSkip(f'{ONLINE} is not writable')
    cpu = Cpu(CPU)
    if not cpu.online():
        raise T.TestSkip(f'cpu{CPU} is offline already; not touching a CPU someone else took away')

    try:
        run(ctx, cpu)
    finally:
        cpu.restore()


def run(ctx, cpu):
    # --- 1. offline at start
    cpu.set(False)
    try:
        tpd = ctx.tpd()
        online = status_online(tpd)
        share = cpu_share(tpd, IDLE_SECONDS)
        lines = cpu_lines(tpd)
    finally:
        # Back at once: the checks below need no offline CPU.
        t_on = time.monotonic()
        cpu.set(True)
    check(online.get(0) is True and online.get(CPU) is False,
          f'GetStatus online flags {online}, expected cpu0 online and cpu{CPU} offline')
    log(f'tpd with cpu{CPU} offline: {share * 100:.4f} % CPU over {IDLE_SECONDS} s; '
        f'{len(lines)} log lines about CPU {CPU}: {lines}')
    check(share <= IDLE_MAX_SHARE,
          f'tpd used {share * 100:.3f} % CPU while idle with cpu{CPU} offline (at most {IDLE_MAX_SHARE * 100} %)')
    check(len(lines) <= 3, f'{len(lines)} log lines about CPU {CPU} in {IDLE_SECONDS} s: {lines[:5]}')

    # --- 2. online: read within about a second, exactly
    while True:
        online = status_online(tpd)
        if online.get(CPU):
            break
        check(time.monotonic() - t_on < 1.5, f'cpu{CPU} came online, but GetStatus still says {online} '
                                              f'after {time.monotonic() - t_on:.2f} s')
        time.sleep(0.05)
    log(f'GetStatus says cpu{CPU} online {time.monotonic() - t_on:.2f} s after it came online')

    # A full-speed burst into the buffer of the CPU that came online: every record reaches the
    # stream. None may be lost for want of room in the stream's queue: the reader takes the whole
    # burst out of the kernel's buffer in one go, and the queue must hold it while tpctl catches up.
    tally, before, after = storm_on_cpu(ctx, tpd, ONLINE_N, t_on + ONLINE_DELAY)
    log(f'first record from cpu{CPU} {tally.first_s - t_on:.2f} s, run {tally.go_s - t_on:.2f} s after it came online')
    check_exact(tally, before, after, ONLINE_N, f'{ONLINE_N} getppid {ONLINE_DELAY} s after cpu{CPU} came online')
    check(tally.total(tally.lost) == 0 and tally.total(tally.delivered) == ONLINE_N,
          f'{tally.total(tally.delivered)} of {ONLINE_N} delivered, lost by cause {tally.causes} '
          f'(kernel: {T.stats_delta(before, after).get(CPU)})')

    tally, before, after = storm_on_cpu(ctx, tpd, STORM_N)
    check_exact(tally, before, after, STORM_N, f'{STORM_N} getppid on the CPU that came online')
    check(set(tally.delivered) <= {CPU}, f'records from CPUs {sorted(tally.delivered)}, expected only {CPU}')

    # --- 3. offline in the middle of a paced run on cpu1
    gen = ctx.gen('GEN_GETPPID', '--count', PACED_N, '--rate', PACED_RATE, '--cpu', CPU)
    pid, = gen.pids()
    tpd.tpctl_ok('enable', EVENT, '--filter', f'common_pid == {pid}')
    tally = Tally(pid)
    stream = tpd.stream('-e', EVENT, sink=tally.feed)
    T.confirm_live([stream], gen.probe)
    lines_before = len(cpu_lines(tpd))
    before = tpd.stats()
    tally.start(gen.go())
    time.sleep(PACED_N / PACED_RATE / 3)
    cpu.set(False)
    try:
        # The generator goes on on cpu0 for the rest of its run (slow enough to keep up on one
        # loaded CPU); what it wrote on cpu1 before must come out of cpu1's buffer all the same.
        gen.wait_done(timeout=30)
        # Only what needs cpu1 away happens while it is: tpd takes out what its buffer held (the
        # stream's records are counted after cpu1 is back, where reading them costs nobody a CPU).
        deadline = time.monotonic() + 3.0
        while tpd.stats()[CPU].get('entries', 0) and time.monotonic() < deadline:
            time.sleep(0.05)
        drained = tpd.stats()[CPU]
        log(f'cpu{CPU} buffer while offline: {drained}')
        # Let the stream's records land (counted as lines, not parsed) so that the CPU time below
        # is the daemon's own with nothing to do.
        while line_count(stream) < PACED_N and time.monotonic() < deadline + 3.0:
            time.sleep(0.05)
        # With cpu1 still away and no traffic, a drained reader must not spin. The stream's flush
        # timer runs (10 Hz): allow a little more than idle.
        share = cpu_share(tpd, 1.0)
        online = status_online(tpd)
    finally:
        cpu.set(True)
    check(drained.get('entries', 0) == 0, f'tpd did not drain cpu{CPU} within 3 s of its going offline: {drained}')
    stream.drain(lambda: tally.total(tally.delivered) + tally.total(tally.lost) >= PACED_N, timeout=30)
    after = tpd.stats()
    log(f'tpd with cpu{CPU} offline and a stream open: {share * 100:.4f} % CPU over 1 s')
    check(online.get(CPU) is False, f'GetStatus online flags {online} while cpu{CPU} was offline')
    check(share <= 0.01 * T.SLOWDOWN, f'tpd used {share * 100:.3f} % CPU with cpu{CPU} offline after the run (spinning?)')
    check_exact(tally, before, after, PACED_N, f'{PACED_N} getppid, cpu{CPU} taken offline mid-run')
    check(tally.delivered.get(CPU, 0) + tally.lost.get(CPU, 0) > 0,
          f'nothing was written on cpu{CPU} before it went offline: the test did not test the drain')
    lines = cpu_lines(tpd)[lines_before:]
    check(len(lines) <= 4, f'{len(lines)} log lines about CPU {CPU} around its going offline: {lines[:6]}')

    # Back online: read again, and the daemon stops cleanly.
    deadline = time.monotonic() + 1.5
    while not status_online(tpd).get(CPU):
        check(time.monotonic() < deadline, f'cpu{CPU} back online, but GetStatus does not say so after 1.5 s')
        time.sleep(0.05)
    stream.stop()
    tpd.stop()


if __name__ == '__main__':
    T.run(main)
