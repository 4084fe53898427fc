#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""The kernel's losses, told to whom they concern and counted across clears of the buffer.

1. CPU selection: a getppid storm on CPU 1 overruns its buffer while tpd is stopped (SIGSTOP), and
   a few thousand calls on CPU 0 fit in CPU 0's buffer. A stream and a recording of CPU 0 only
   (-c 0) get every call of CPU 0 and not one loss; a stream of every CPU beside them counts
   delivered + lost = written, the overrun of CPU 1 included.
2. A clock change during overruns, set by tpd (Configure {"clock":"mono"}, sent while tpd is
   stopped with an overrun not read yet) and behind tpd's back (trace_clock written in its
   instance, which tpd then puts back): each clears the buffer and sets the kernel's per-CPU
   counters back to zero. Storms overrun the buffer before and after each clear. A stream counts
   delivered + lost = written over the whole run, written summed over the lives of the buffer
   from the kernel's stats read right before and after each clear (nothing writes in between),
   and its overrun equals the kernel's. A recording beside it (through tpd's repair too) counts
   recorded + lost = written too, and its file carries the kernel's loss mark after each storm
   (trace-cmd report's "EVENTS DROPPED"); and calls on CPU 1 that fit in its buffer, made before
   the Configure (unread when it comes: tpd reads the buffers out before it clears them) and
   after, reach a stream of CPU 1 every one, without a loss.

A clear tpd does not make itself is seen by the counters going back: the storm after the foreign
clear is smaller than the one before, so the overrun counter is below its old value when tpd
wakes (a clear followed by more growth than the whole life before it is not seen: docs/design.md §3).
"""

import importlib
import os
import signal
import time

import tpdtest as T
from tpdtest import check, log

# test-record.py's recording driver; test-gaps.py's wait until tpd has read every record out of
# the buffers (which returns the kernel's stats then).
R = importlib.import_module('test-record')
settle = importlib.import_module('test-gaps').open_books

EVENT = 'syscalls:sys_enter_getppid'
N_CPU0 = 5_000
N_STORM = 300_000
N_SMALLER = 120_000
N_QUIET = 1_000


class Count:
    """A stream's sink: getppid records (unless count_all, those before `cut`, boot-clock ns, apart:
    the probes'), losses by cause and CPU; other records (marker probes) and notices are not
    counted."""

    def __init__(self, count_all=False):
        self.count_all = count_all
        self.getppid = 0
        self.early = 0
        self.cut = None
        self.lost = {}
        self.lost_cpus = set()
        self.by_cpu = {}
        self.notices = 0

    def __call__(self, line):
        if b'"notice":' in line:
            self.notices += 1
            return
        r = T.parse_record(line)
        if 'lost' in r:
            self.lost[r['cause']] = self.lost.get(r['cause'], 0) + r['lost']
            self.lost_cpus.add(r['cpu'])
        elif r['event'] == EVENT:
            if self.count_all or (self.cut is not None and r['ts'] >= self.cut):
                self.getppid += 1
                self.by_cpu[r['cpu']] = self.by_cpu.get(r['cpu'], 0) + 1
            else:
                self.early += 1

    def accounted(self):
        return self.getppid + sum(self.lost.values())


def over_lives(count, lives):
    """count(stats) summed over the lives of a buffer, each [stats at its start, stats at its end]."""
    return sum(count(end) - count(start) for start, end in lives)


def storm_stopped(tpd, gen):
    """Runs gen's calls while tpd is stopped: the buffer overruns before tpd can read it."""
    tpd.process.signal(signal.SIGSTOP)
    try:
        gen.go()
        gen.wait_done(timeout=120)
    finally:
        tpd.process.signal(signal.SIGCONT)


def wait_stream(stream, target, what, timeout=60):
    stream.drain(lambda: stream.sink.accounted() >= target, timeout=timeout, quiet=0.5)
    c = stream.sink
    check(c.accounted() == target,
          f'{what}: delivered {c.getppid} (per CPU {c.by_cpu}) + lost {c.lost} = {c.accounted()}, '
          f'the kernel wrote {target}')


def cpu_selection(ctx):
    log('--- CPU selection: a stream and a recording of CPU 0 hear nothing of CPU 1\'s overrun')
    cpus = T.online_cpus()
    if 0 not in cpus or 1 not in cpus:
        raise T.TestSkip(f'needs CPUs 0 and 1 online, has {cpus}')
    tpd = ctx.tpd(args=['--buffer-size-kb', '256'])
    gen0 = ctx.gen('GEN_GETPPID', '--count', N_CPU0, '--cpu', 0)
    gen1 = ctx.gen('GEN_GETPPID', '--count', N_STORM, '--cpu', 1)
    pid0, = gen0.pids()
    pid1, = gen1.pids()
    tpd.tpctl_ok('enable', EVENT, '--filter', f'common_pid == {pid0} || common_pid == {pid1}')
    everything = tpd.stream('-e', EVENT, sink=Count())
    cpu0 = tpd.stream('-e', EVENT, '-c', '0', sink=Count())
    probes = T.confirm_live([everything, cpu0], gen0.probe)
    # After the probes: the recording starts with them read, none of them is its.
    out = os.path.join(ctx.tmpdir, 'cpu0.dat')
    rec = R.Recording(ctx, tpd, out, '-c', '0', '-e', EVENT)
    rec.wait_started()
    before = settle(tpd)
    everything.sink.cut = cpu0.sink.cut = T.boottime_ns()

    tpd.process.signal(signal.SIGSTOP)
    try:
        gen1.go()
        gen0.go()
        gen1.wait_done(timeout=120)
        gen0.wait_done(timeout=120)
    finally:
        tpd.process.signal(signal.SIGCONT)
    time.sleep(0.5)
    after = settle(tpd)
    delta = T.stats_delta(before, after)
    written = T.written(after) - T.written(before)
    overrun = {c: delta[c].get('overrun', 0) for c in delta}
    log(f'the kernel wrote {written}, overrun per CPU {overrun}')
    check(written == N_CPU0 + N_STORM, f'the kernel wrote {written}, the generators made {N_CPU0} + {N_STORM}')
    check(overrun.get(1, 0) > 0, 'CPU 1 did not overrun: the test proved nothing')
    check(overrun.get(0, 0) == 0, f'CPU 0 overran ({overrun.get(0)}) though its calls fit in its buffer')

    wait_stream(everything, written, 'stream of every CPU')
    wait_stream(cpu0, N_CPU0, 'stream of CPU 0')
    for s in (everything, cpu0):
        s.stop()
    e, c = everything.sink, cpu0.sink
    log(f'stream of every CPU: {e.getppid} delivered, lost {e.lost}; of CPU 0: {c.getppid} delivered, lost {c.lost} '
        f'({probes} probes, {c.early} reached it)')
    check(e.lost.get('overrun', 0) == overrun[1], f'stream of every CPU: overrun {e.lost}, the kernel {overrun}')
    check(c.getppid == N_CPU0 and not c.lost and set(c.by_cpu) == {0},
          f'stream of CPU 0: {c.getppid} calls of CPUs {sorted(c.by_cpu)}, lost {c.lost} (CPUs {c.lost_cpus}); '
          f'CPU 0 made {N_CPU0} and lost none')

    recorded, files, lost = rec.stop()
    log(f'recording of CPU 0: {recorded} records, {lost} lost')
    check(recorded == N_CPU0 and lost == 0, f'recording of CPU 0: {recorded} records and {lost} lost; '
                                            f'CPU 0 made {N_CPU0} and lost none')
    records, dropped = T.trace_cmd_report(out)
    check(len(records) == N_CPU0 and {r['cpu'] for r in records} == {0},
          f'trace-cmd report: {len(records)} records of CPUs {sorted({r["cpu"] for r in records})}')
    check(not dropped, f'trace-cmd report shows losses in a recording of CPU 0: {dropped[:4]}')
    tpd.stop()


def clock_change(ctx, behind):
    if 1 not in T.online_cpus():
        raise T.TestSkip(f'needs CPU 1 online, has {T.online_cpus()}')
    what = 'trace_clock written behind tpd\'s back' if behind else 'Configure clock'
    log(f'--- clock change during overruns: {what}')
    tpd = ctx.tpd(args=['--buffer-size-kb', '64'])
    gens = [ctx.gen('GEN_GETPPID', '--count', n, '--cpu', 0) for n in (N_STORM, N_SMALLER, N_SMALLER)]
    # Where tpd sets the clock, calls on CPU 1 that fit in its buffer, before and after: tpd reads
    # them out before it clears the buffer, so a stream of CPU 1 gets each of them.
    quiet = [] if behind else [ctx.gen('GEN_GETPPID', '--count', N_QUIET, '--cpu', 1) for _ in range(2)]
    pids = [g.pids()[0] for g in gens + quiet]
    tpd.tpctl_ok('enable', EVENT, '--filter', ' || '.join(f'common_pid == {p}' for p in pids))
    s = tpd.stream('-e', EVENT, '-e', 'ftrace:print', sink=Count(count_all=True))
    streams = [s]
    if quiet:
        streams.append(tpd.stream('-e', EVENT, '-e', 'ftrace:print', '-c', '1', sink=Count(count_all=True)))
    n = [0]

    def probe():
        # From CPU 1, so that the stream of CPU 1 sees the markers too.
        cpus = os.sched_getaffinity(0)
        os.sched_setaffinity(0, {1})
        try:
            tpd.marker(f'probe {n[0]}')
        finally:
            os.sched_setaffinity(0, cpus)
        n[0] += 1
    T.confirm_live(streams, probe)
    # A recording beside the stream, through tpd's clock change or its repair of one made behind
    # its back (the repair's notice reaches the recording as a frame of its own).
    out = os.path.join(ctx.tmpdir, 'clock-behind.dat' if behind else 'clock.dat')
    rec = R.Recording(ctx, tpd, out, '-e', EVENT)
    rec.wait_started()
    lives = [[settle(tpd)]]     # per life of the buffer: its stats at the start, then at the end
    status_before = tpd.status()['cpus']
    clock_path = os.path.join(tpd.instance_dir, 'trace_clock')

    def written():
        return over_lives(T.written, lives)

    def overrun():
        return over_lives(T.kernel_lost, lives)

    if not behind:
        # The call waits in the socket while tpd is stopped with the overrun unread: tpd reads it
        # out before setting the clock, or counts what it did not read as lost.
        tpd.process.signal(signal.SIGSTOP)
        try:
            for g in (gens[0], quiet[0]):
                g.go()
                g.wait_done(timeout=120)
            v = tpd.varlink(timeout=30)
            v.send('io.tpd.tracing.Configure', {'clock': 'mono'})
            lives[-1].append(tpd.stats())
        finally:
            tpd.process.signal(signal.SIGCONT)
        reply = v.recv(timeout=30)
        v.close()
        check(reply is not None and 'error' not in reply, f'Configure clock mono: {reply}')
        lives.append([tpd.stats()])
        check('[mono]' in T.read_text(clock_path), f'trace_clock after Configure: {T.read_text(clock_path)!r}')
        quiet[1].go()
        storm_stopped(tpd, gens[1])
        quiet[1].wait_done(timeout=120)
        time.sleep(0.5)
        lives[-1].append(settle(tpd))
    else:
        storm_stopped(tpd, gens[0])
        time.sleep(0.5)
        # tpd has read the counters of this life (its stream counted every record) before the clear.
        lives[-1].append(settle(tpd))
        wait_stream(s, written(), 'stream before the clear')
        tpd.process.signal(signal.SIGSTOP)
        try:
            T.write_text(clock_path, 'mono')
            lives.append([tpd.stats()])
            gens[1].go()
            gens[1].wait_done(timeout=120)
            # The last stats of this life: tpd puts its clock back once it runs again, and
            # nothing writes in between.
            lives[-1].append(tpd.stats())
        finally:
            tpd.process.signal(signal.SIGCONT)
        deadline = time.monotonic() + 10
        while '[boot]' not in T.read_text(clock_path):
            check(time.monotonic() < deadline, f'tpd did not put its clock back: {T.read_text(clock_path)!r}')
            time.sleep(0.05)
        time.sleep(0.2)
        lives.append([tpd.stats()])
        storm_stopped(tpd, gens[2])
        time.sleep(0.5)
        lives[-1].append(settle(tpd))

    total = written()
    made = N_STORM + N_SMALLER * (2 if behind else 1) + N_QUIET * len(quiet)
    log(f'{what}: the kernel wrote {total} in {len(lives)} lives of the buffer, overrun {overrun()}; '
        f'per life {[T.written(b) - T.written(a) for a, b in lives]}')
    check(total == made, f'the kernel wrote {total}, the generators made {made}')
    check(all(T.kernel_lost(b) - T.kernel_lost(a) > 0 for a, b in lives if T.written(b) > T.written(a)),
          'a storm did not overrun the buffer: the test proved nothing')

    status_counters(status_before, tpd.status()['cpus'], total, overrun(), what)

    wait_stream(s, total, f'stream, {what}')
    s.stop()
    log(f'stream: {s.sink.getppid} delivered, lost {s.sink.lost}')
    check(s.sink.lost.get('overrun', 0) == overrun(), f'stream: overrun {s.sink.lost}, the kernel {overrun()}')
    if quiet:
        c = streams[1]
        wait_stream(c, N_QUIET * len(quiet), 'stream of CPU 1')
        c.stop()
        log(f'stream of CPU 1: {c.sink.getppid} delivered, lost {c.sink.lost}')
        check(c.sink.getppid == N_QUIET * len(quiet) and not c.sink.lost and set(c.sink.by_cpu) == {1},
              f'stream of CPU 1: {c.sink.getppid} calls of CPUs {sorted(c.sink.by_cpu)}, lost {c.sink.lost}; '
              f'CPU 1 made {N_QUIET * len(quiet)} and lost none')
    recording_after_clears(rec, out, lives)
    tpd.stop()


def status_counters(before, after, written, overrun, what):
    """GetStatus's per-CPU counters go on across the clears: they grew by what the kernel wrote and
    overwrote in all the buffer's lives, and no CPU's went back (the raw ones drop to 0)."""
    def total(cpus, key):
        return sum(c[key] for c in cpus)
    went_back = [(a['cpu'], key, a[key], b[key]) for a, b in zip(before, after)
                 for key in ('written', 'overrun', 'read', 'dropped') if b[key] < a[key]]
    log(f'GetStatus across the clears: written grew by {total(after, "written") - total(before, "written")}, '
        f'overrun by {total(after, "overrun") - total(before, "overrun")}')
    check(not went_back, f'{what}: GetStatus counters went back (cpu, counter, before, after): {went_back}')
    check(total(after, 'written') - total(before, 'written') == written,
          f'{what}: GetStatus written grew by {total(after, "written") - total(before, "written")}, '
          f'the kernel wrote {written}')
    check(total(after, 'overrun') - total(before, 'overrun') == overrun,
          f'{what}: GetStatus overrun grew by {total(after, "overrun") - total(before, "overrun")}, '
          f'the kernel overwrote {overrun}')


def recording_after_clears(rec, out, lives):
    total = over_lives(T.written, lives)
    recorded, _, lost = rec.stop()
    log(f'recording: {recorded} records, {lost} lost')
    check(recorded + lost == total, f'recording: {recorded} recorded + {lost} lost != {total} written')
    records, dropped = T.trace_cmd_report(out)
    check(len(records) == recorded, f'trace-cmd report lists {len(records)} records, tpctl said {recorded}')
    storms = sum(1 for a, b in lives if T.written(b) > T.written(a))
    check(len(dropped) >= storms, f'trace-cmd report shows {len(dropped)} losses {dropped}, {storms} storms overran')


def main(ctx):
    cpu_selection(ctx)
    clock_change(ctx, behind=False)
    clock_change(ctx, behind=True)


if __name__ == '__main__':
    T.run(main)
