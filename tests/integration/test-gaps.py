#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""No silent gap: records tpd cannot deliver come out as lost records with their cause, exactly.

(a) trace_marker_raw writes (a 4-byte id and a payload; an event id tpd has no format for) while a
    stream of everything runs: they come out as `lost` with cause "unknown", and delivered + lost
    = the kernel's written count over the stream's life. A stream that selects an event gets
    none of them.
(b) An event enabled in tpd's instance behind its back (echo 1 > instances/NAME/events/.../enable):
    its records are "unknown" losses to the stream of everything, exactly.
(c) A 4 KiB-per-CPU buffer under a getppid storm, with a stream paused for a while: per cause,
    the stream's `overrun` = the kernel's overrun increase over its life, delivered + `client` =
    the kernel's read-events increase, and delivered + lost = written.
(d) The same with overwrite off (--buffer-overwrite no): the kernel's `dropped events` come out as
    cause "dropped", exactly.

The books open once each stream is live and tpd has read every probe out of the kernel's buffer:
the kernel's counters from there, the stream's records from the run's start time on. A probe made
before tpd registered the stream may be read while no stream exists (tpd's first flush tick, 100 ms
after its start, reads whatever is there): the kernel counts it as written, yet no stream's life
covers it.
"""

import json
import os
import signal
import struct
import time

import tpdtest as T
from tpdtest import check, log

SCALE = float(os.environ.get('TPD_TEST_SCALE', '1'))
N_RAW = 2000
N_BEHIND = max(2000, int(20_000 * SCALE))
N_STORM = max(200_000, int(2_000_000 * SCALE))


class Tally:
    """A stream's sink: counts records and losses by cause as lines arrive. Records before `cut`
    (boot-clock ns, set when the books open; every line seen before that is before it too) are
    the probes': counted apart in `early`."""

    def __init__(self, keep=False):
        self.delivered = 0
        self.early = 0
        self.cut = None
        self.lost = {}
        self.keep = keep
        self.events = set()
        self.notices = []

    def __call__(self, line):
        # tpd's notice that it repaired its instance (not a record of the kernel's, so not counted).
        if b'"notice":' in line:
            n = json.loads(line)
            if 'notice' in n:
                self.notices.append(n)
                return
        r = T.parse_record(line)
        if 'lost' in r:
            self.lost[r['cause']] = self.lost.get(r['cause'], 0) + r['lost']
        else:
            if self.cut is None or r['ts'] < self.cut:
                self.early += 1
            else:
                self.delivered += 1
            self.events.add(r['event'])


def tally(stream):
    return stream.sink.delivered, dict(stream.sink.lost)


def total_written(stats):
    return T.written(stats)


def wait_accounted(stream, target, what, timeout=60):
    def done():
        d, lost = tally(stream)
        return d + sum(lost.values()) >= target
    stream.drain(done, timeout=timeout, quiet=0.5)
    stream.stop()
    d, lost = tally(stream)
    check(d + sum(lost.values()) == target,
          f'{what}: delivered {d} + lost {lost} = {d + sum(lost.values())}, the kernel wrote {target}')
    return d, lost


def marker_probe_until_live(tpd, streams):
    n = [0]

    def probe():
        tpd.marker(f'probe {n[0]}')
        n[0] += 1
    return T.confirm_live(streams, probe)


def open_books(tpd, timeout=10.0):
    """Once the streams are live: waits until tpd has read every record out of the kernel's buffer
    (a live stream's flush tick reads partial pages) and returns the kernel's stats then. Every
    record counted in them is out of the buffer: none can be delivered, overwritten or dropped
    later, so the deltas from here are exactly the run's."""
    deadline = time.monotonic() + timeout
    while True:
        stats = tpd.stats()
        left = sum(c.get('entries', 0) for c in stats.values())
        if left == 0:
            return stats
        check(time.monotonic() < deadline, f'{left} records still in the kernel\'s buffer {timeout} s after the '
                                           f'streams were live')
        time.sleep(0.02)


def log_probes(what, made, stream):
    # A probe that did not reach a live stream was read by tpd before the stream was registered.
    log(f'{what}: {made} probe(s) before the books opened, {stream.sink.early} of them reached the stream')
    check(stream.sink.early <= made, f'{what}: {stream.sink.early} records before the run, only {made} probes made')


def unknown_ids(tpd, ctx):
    """(a) and (b) on one daemon."""
    everything = tpd.stream(sink=Tally())
    selective = tpd.stream('-e', 'ftrace:print', sink=Tally())
    probes = marker_probe_until_live(tpd, [everything, selective])
    before = open_books(tpd)
    # Nothing writes into the instance until the raw markers below.
    everything.sink.cut = selective.sink.cut = T.boottime_ns()

    # (a) trace_marker_raw: each write() is one ftrace:raw_data record.
    fd = os.open(os.path.join(tpd.instance_dir, 'trace_marker_raw'), os.O_WRONLY)
    try:
        for i in range(N_RAW):
            os.write(fd, struct.pack('<I', 0x7470 + i % 3) + b'payload %d' % i)
    finally:
        os.close(fd)

    # (b) an event tpd never loaded, enabled behind its back, for one generator's pid.
    gen = ctx.gen('GEN_GETPPID', '--count', N_BEHIND)
    pid, = gen.pids()
    ev = os.path.join(tpd.instance_dir, 'events', 'syscalls', 'sys_enter_getppid')
    T.write_text(os.path.join(ev, 'filter'), f'common_pid == {pid}')
    T.write_text(os.path.join(ev, 'enable'), '1')
    try:
        gen.go()
        gen.wait_done(timeout=120)
    finally:
        # At once: tpd's instance check (once a second) disables events enabled behind its back.
        T.write_text(os.path.join(ev, 'enable'), '0')
        T.write_text(os.path.join(ev, 'filter'), '0')
    tpd.marker('end')   # a known record after them all
    time.sleep(0.3)
    after = tpd.stats()
    written = total_written(after) - total_written(before)
    log(f'(a)+(b): the kernel wrote {written} records ({N_RAW} raw markers, {N_BEHIND} getppid behind tpd\'s back)')

    d, lost = wait_accounted(everything, written, 'stream of everything')
    log(f'(a)+(b): stream of everything: {d} delivered, lost {lost}')
    log_probes('(a)+(b)', probes, everything)
    kernel_lost = T.kernel_lost(T.stats_delta(before, after))
    if kernel_lost == 0:
        check(d == 1, f'stream of everything: {d} records delivered, expected 1 (the end marker)')
        if everything.sink.notices:
            # The instance check disabled the event mid-run (a loaded machine): its records up to
            # then are still each an unknown loss.
            log(f'note: tpd repaired its instance during (b): {everything.sink.notices}')
            check(lost.get('unknown', 0) == written - 1,
                  f'unknown losses {lost.get("unknown", 0)}, expected all but the end marker of {written}')
        else:
            check(lost.get('unknown', 0) == N_RAW + N_BEHIND,
                  f'unknown losses {lost.get("unknown", 0)}, expected {N_RAW} + {N_BEHIND}')
    check(not lost.get('decode') and not lost.get('dropped'), f'unexpected causes: {lost}')

    # The stream that selected ftrace:print sees the markers only, and no unknown losses.
    sd, slost = tally(selective)
    check('unknown' not in slost, f'a stream of ftrace:print got unknown losses: {slost}')
    selective.stop()
    check(selective.sink.events <= {'ftrace:print'}, f'a stream of ftrace:print got {selective.sink.events}')
    log(f'(a)+(b): stream of ftrace:print: {sd} delivered, lost {slost}')


def kernel_losses(ctx, overwrite=True):
    """(c) A tiny buffer: overruns (or, with overwrite off, drops); a paused stream: client
    losses; each under its own cause."""
    what = '(c)' if overwrite else '(d)'
    tpd = ctx.tpd(args=['--buffer-size-kb', '4', '--stream-queue-kb', '256']
                  + ([] if overwrite else ['--buffer-overwrite', 'no']))
    gen = ctx.gen('GEN_GETPPID', '--count', N_STORM)
    pid, = gen.pids()
    tpd.tpctl_ok('enable', 'syscalls:sys_enter_getppid', '--filter', f'common_pid == {pid}')
    if not overwrite:
        check(T.read_text(os.path.join(tpd.instance_dir, 'options', 'overwrite')).strip() == '0',
              '--buffer-overwrite no did not reach options/overwrite')
    s = tpd.stream(sink=Tally())
    T.confirm_live([s], gen.probe)
    before = open_books(tpd)

    s.signal(signal.SIGSTOP)
    s.sink.cut = gen.go()
    # Paused for the first part of the storm, then reading while it goes on.
    time.sleep(1.0)
    s.signal(signal.SIGCONT)
    gen.wait_done(timeout=120)
    time.sleep(0.5)
    after = tpd.stats()
    delta = T.stats_delta(before, after)
    written = total_written(after) - total_written(before)
    overrun = sum(c.get('overrun', 0) for c in delta.values())
    read = sum(c.get('read events', 0) for c in delta.values())
    dropped = sum(c.get('dropped events', 0) for c in delta.values())
    log(f'{what}: the kernel wrote {written}: read {read}, overrun {overrun}, dropped {dropped}, '
        f'left {sum(c.get("entries", 0) for c in after.values())}')
    check(written == N_STORM, f'{what}: the kernel wrote {written} records during the run, the generator made {N_STORM}')

    d, lost = wait_accounted(s, written, 'stream under overrun')
    log(f'{what}: stream: {d} delivered, lost {lost}')
    log_probes(what, gen.probes, s)
    check(lost.get('overrun', 0) == overrun,
          f'overrun reported {lost.get("overrun", 0)}, the kernel overwrote {overrun}')
    check(lost.get('dropped', 0) == dropped, f'dropped reported {lost.get("dropped", 0)}, the kernel {dropped}')
    check(d + lost.get('client', 0) == read,
          f'delivered {d} + client {lost.get("client", 0)} = {d + lost.get("client", 0)}, '
          f'the kernel read out {read}')
    if overwrite:
        check(overrun > 0, 'a 4 KiB buffer under a storm did not overrun: the test proved nothing')
    else:
        check(dropped > 0 and overrun == 0, f'overwrite off: dropped {dropped}, overrun {overrun}')
    tpd.stop()


def main(ctx):
    tpd = ctx.tpd()
    unknown_ids(tpd, ctx)
    tpd.stop()
    kernel_losses(ctx, overwrite=True)
    kernel_losses(ctx, overwrite=False)


if __name__ == '__main__':
    T.run(main)
