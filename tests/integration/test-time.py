#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""tpctl stream --time=iso: wall-clock times within 1 ms of CLOCK_REALTIME, also across clock steps.

Each trace_marker write is bracketed by two reads of CLOCK_REALTIME; the record's "time" (RFC 3339,
nanoseconds, "Z", right after "ts") must lie within 1 ms of that bracket. Then the wall clock is
stepped forward by 1 s with clock_settime() (time namespaces do not virtualise CLOCK_REALTIME): tpd
must notice (a timerfd with TFD_TIMER_CANCEL_ON_SET) and send a clock record whose offset moved by
1 s, and the records after it must again be within 1 ms of the (stepped) wall clock. The clock is
stepped back by the same second in every case (finally), and the same is checked once more.
"""

import calendar
import json
import re
import time

import tpdtest as T
from tpdtest import check, log

TOLERANCE_NS = 1_000_000
STEP_NS = 1_000_000_000
ISO_RE = re.compile(r'^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)\.(\d{9})Z$')


def iso_ns(text):
    m = ISO_RE.match(text)
    check(m, f'"time" is not RFC 3339 with nanoseconds and Z: {text!r}')
    return calendar.timegm(time.strptime(m[1], '%Y-%m-%dT%H:%M:%S')) * 10**9 + int(m[2])


class Reader:
    def __init__(self, stream):
        self.stream = stream
        self.seen = 0

    def next(self, pred, what, timeout=10):
        deadline = time.monotonic() + timeout
        while True:
            self.stream.poll()
            while self.seen < len(self.stream.lines):
                line = self.stream.lines[self.seen]
                self.seen += 1
                rec = json.loads(line)
                check(list(rec)[:2] == ['ts', 'time'], f'"time" does not follow "ts": {line[:200]!r}')
                if pred(rec):
                    return rec
            check(time.monotonic() < deadline, f'no {what} within {timeout} s')
            time.sleep(0.005)


def check_markers(tpd, reader, label, n=20):
    worst = 0
    for k in range(n):
        text = f'{label} {k}'
        before = time.clock_gettime_ns(time.CLOCK_REALTIME)
        tpd.marker(text)
        after = time.clock_gettime_ns(time.CLOCK_REALTIME)
        rec = reader.next(lambda r: r.get('event') == 'ftrace:print' and r['fields']['buf'].startswith(text),
                          f'record of marker {text!r}')
        t = iso_ns(rec['time'])
        off = 0 if before <= t <= after else min(abs(t - before), abs(t - after))
        check(off <= TOLERANCE_NS, f'{label}: "time" {rec["time"]} is {off / 1e6:.3f} ms outside the wall clock '
                                   f'read around the write ({before}..{after})')
        worst = max(worst, off)
    log(f'{label}: {n} markers, "time" within {worst / 1e6:.3f} ms of CLOCK_REALTIME (bound 1 ms)')


def set_clock(delta):
    now = time.clock_gettime_ns(time.CLOCK_REALTIME)
    time.clock_settime_ns(time.CLOCK_REALTIME, now + delta)


def clock_record(reader, delta, offset):
    """tpd's clock record after a step of delta ns; returns its offset."""
    rec = reader.next(lambda r: 'clock' in r, 'clock record after the step')
    check(rec['clock'] == 'boot' and isinstance(rec['realtime_offset_ns'], int), f'bad clock record: {rec}')
    moved = rec['realtime_offset_ns'] - offset
    check(abs(moved - delta) <= TOLERANCE_NS, f'the clock record moved the offset by {moved} ns, the step was {delta}')
    log(f'step of {delta / 1e9:+g} s: clock record with the offset moved by {moved} ns')
    return rec['realtime_offset_ns']


def main(ctx):
    tpd = ctx.tpd()
    with tpd.varlink() as v:
        reply = v.call('io.tpd.tracing.Stream', {'events': ['ftrace:print']}, upgrade=True)
    check('error' not in reply, f'Stream failed: {reply}')
    offset = reply['parameters'].get('realtime_offset_ns')
    check(reply['parameters'].get('clock') == 'boot' and isinstance(offset, int),
          f'the Stream reply has no realtime_offset_ns for the boot clock: {reply}')

    stream = tpd.stream('-e', 'ftrace:print', '--time=iso')
    T.confirm_live([stream], lambda: tpd.marker('probe'))
    reader = Reader(stream)
    check_markers(tpd, reader, 'before')

    stepped = False
    try:
        set_clock(STEP_NS)
        stepped = True
        offset = clock_record(reader, STEP_NS, offset)
        check_markers(tpd, reader, 'stepped')
    finally:
        if stepped:
            set_clock(-STEP_NS)
    offset = clock_record(reader, -STEP_NS, offset)
    check_markers(tpd, reader, 'restored')
    stream.stop()
    tpd.stop()


if __name__ == '__main__':
    T.run(main)
