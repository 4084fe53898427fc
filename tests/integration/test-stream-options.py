#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""tpctl stream --count, --duration, --time=relative and --ordered, against a running tpd.

  - --count N stops after exactly N event records, with exit 0, while more keep coming;
    with --duration as well, whichever comes first.
  - --duration S stops after S seconds (not before, and within a bound after), with exit 0, and
    every line it printed is whole.
  - --time=relative adds "time" right after "ts": seconds since the stream began, with 9
    decimals, whose differences are exactly those of ts.
  - --ordered merges the CPUs: two trace_marker writers pinned to CPU 0 and CPU 1 at once, every
    record present (exact count, each writer's sequence numbers complete) and ts non-decreasing
    over the whole output; also when the stream is ended by SIGTERM right after the last record
    was written (what is held back for ordering still goes out).
"""

import decimal
import json
import time

import tpdtest as T
from tpdtest import check, fail, log

MARKERS = 20_000


def run_tpctl(tpd, *args, timeout=30):
    t0 = time.monotonic()
    r = tpd.tpctl(*args, timeout=timeout)
    return r, time.monotonic() - t0


def events_of(stdout):
    lines = stdout.splitlines()
    check(stdout == '' or stdout.endswith('\n'), f'output ends in a partial line: {stdout[-200:]!r}')
    return [json.loads(l) for l in lines]


def check_count_duration(ctx, tpd):
    # A steady source: markers at 2000/s for the whole section.
    gen = ctx.gen('GEN_MARKER', '--instance', tpd.instance, '--count', 100_000, '--rate', 2000, 'count')
    try:
        r, took = run_tpctl(tpd, 'stream', '-e', 'ftrace:print', '--count', '500')
        check(r.returncode == 0, f'stream --count 500 exited with {r.returncode}: {r.stderr!r}')
        recs = events_of(r.stdout)
        check(len(recs) == 500 and all('event' in x for x in recs),
              f'stream --count 500 printed {len(recs)} lines, {sum("event" in x for x in recs)} of them events')
        log(f'--count 500: 500 records, exit 0, {took:.2f} s')

        r, took = run_tpctl(tpd, 'stream', '-e', 'ftrace:print', '--count', '50', '--duration', '20')
        check(r.returncode == 0 and len(events_of(r.stdout)) == 50 and took < 10,
              f'--count 50 --duration 20: exit {r.returncode}, {len(events_of(r.stdout))} lines, {took:.1f} s')

        r, took = run_tpctl(tpd, 'stream', '-e', 'ftrace:print', '--duration', '1.5')
        check(r.returncode == 0, f'stream --duration 1.5 exited with {r.returncode}: {r.stderr!r}')
        recs = events_of(r.stdout)
        check(1.5 <= took <= 1.5 + 2 * T.SLOWDOWN, f'stream --duration 1.5 took {took:.2f} s')
        # At 2000/s, 1.5 s hold about 3000 records: well above half of that proves it streamed on.
        check(len(recs) >= 1000, f'stream --duration 1.5 printed only {len(recs)} records at 2000/s')
        log(f'--duration 1.5: {len(recs)} records, exit 0, {took:.2f} s')

        r, took = run_tpctl(tpd, 'stream', '-e', 'ftrace:print', '--count', '100000', '--duration', '0.5')
        check(r.returncode == 0 and 0.5 <= took <= 0.5 + 2 * T.SLOWDOWN,
              f'--count 100000 --duration 0.5: exit {r.returncode}, {took:.2f} s')

        for bad in (['--count', '0'], ['--count', 'x'], ['--duration', '-1'], ['--duration', '0'],
                    ['--time', 'local'], ['--ordered=0']):
            r = tpd.tpctl('stream', *bad)
            check(r.returncode == 2, f'stream {" ".join(bad)} exited with {r.returncode}, expected 2: {r.stderr!r}')
        r = tpd.tpctl('status', '--count', '1')
        check(r.returncode == 2, f'status --count 1 exited with {r.returncode}, expected 2')
    finally:
        gen.kill()


def check_relative(ctx, tpd):
    gen = ctx.gen('GEN_MARKER', '--instance', tpd.instance, '--count', 100_000, '--rate', 500, 'relative')
    try:
        t0 = T.boottime_ns()
        r, _ = run_tpctl(tpd, 'stream', '-e', 'ftrace:print', '--time=relative', '--duration', '1')
        t1 = T.boottime_ns()
    finally:
        gen.kill()
    check(r.returncode == 0, f'--time=relative exited with {r.returncode}: {r.stderr!r}')
    lines = r.stdout.splitlines()
    check(lines, 'no record with --time=relative')
    values = []
    for line in lines:
        # "time" as written, exactly: a JSON number with 9 decimals right after "ts".
        check(line.startswith('{"ts":'), f'line does not start with ts: {line[:100]!r}')
        head, _, rest = line[6:].partition(',"time":')
        check(head.isdigit(), f'"time" does not follow "ts": {line[:100]!r}')
        number = rest.split(',', 1)[0]
        check(len(number.split('.')[1]) == 9, f'relative time {number!r} has not 9 decimals')
        values.append((int(head), decimal.Decimal(number)))
    base_ts, base_t = values[0]
    for ts, t in values:
        check(t - base_t == decimal.Decimal(ts - base_ts) / decimal.Decimal(10**9),
              f'relative times do not follow ts: {ts} -> {t}, first {base_ts} -> {base_t}')
    # "time" counts from when tpd took the call: after t0, before tpctl returned. (Records read
    # after it but written before, still in the kernel's buffer, have negative times.)
    start = base_ts - int(base_t * 10**9)
    check(t0 <= start <= t1, f'the stream began at {start}, not between {t0} and {t1}')
    log(f'--time=relative: {len(values)} records, times from {values[0][1]} to {values[-1][1]} s')


def check_ordered(ctx, tpd, stop_by_signal):
    stream = tpd.stream('-e', 'ftrace:print', '--ordered=2000')
    T.confirm_live([stream], lambda: tpd.marker('probe'))
    stream.drain(lambda: True, timeout=5, quiet=0.3)
    delivered0 = tpd.status()['delivered']
    gens = [ctx.gen('GEN_MARKER', '--instance', tpd.instance, '--count', MARKERS, '--rate', 20_000,
                    '--cpu', cpu, '--seq', '--wait', f'cpu{cpu}') for cpu in (0, 1)]
    for g in gens:
        g.pids()
    for g in gens:
        g.command('go')
    for g in gens:
        g.wait_done(timeout=60)

    def count():
        return sum(1 for l in stream.lines if b'"buf":"cpu' in l)

    if stop_by_signal:
        # SIGTERM while records are still held back (2 s after their ts): they must go out before
        # tpctl exits. tpd has sent them once it counts them delivered.
        deadline = time.monotonic() + 30
        while tpd.status()['delivered'] < delivered0 + 2 * MARKERS:
            check(time.monotonic() < deadline, 'tpd did not deliver the records within 30 s')
            time.sleep(0.02)
        stream.stop()
    else:
        stream.drain(lambda: count() >= 2 * MARKERS, timeout=60)
        stream.stop()
    recs = stream.records()
    lost = [r for r in recs if 'lost' in r]
    check(not lost, f'records were lost, the count cannot be checked: {lost[:3]}')
    marks = [r for r in recs if r['event'] == 'ftrace:print' and 'probe' not in r['fields'].get('buf', '')]
    seqs = {0: [], 1: []}
    for r in marks:
        text = r['fields']['buf']
        for cpu in (0, 1):
            if text.startswith(f'cpu{cpu}'):
                seqs[cpu].append(r)
    for cpu in (0, 1):
        got = sorted(int(r['fields']['buf'].split()[1]) for r in seqs[cpu])
        check(got == list(range(MARKERS)), f'{len(got)} records of the writer on CPU {cpu}, expected '
                                           f'{MARKERS} numbered 0 to {MARKERS - 1}')
    ts = [r['ts'] for r in recs]
    bad = [(i, a, b) for i, (a, b) in enumerate(zip(ts, ts[1:])) if b < a]
    check(not bad, f'{len(bad)} places where ts goes back, first: {bad[:3]}')
    cpus = {r['cpu'] for r in marks}
    check(cpus == {0, 1}, f'the writers\' records came from CPUs {cpus}')
    switches = sum(1 for a, b in zip(marks, marks[1:]) if a['cpu'] != b['cpu'])
    check(switches > 10, f'only {switches} changes of CPU: the two writers did not run at once')
    log(f'--ordered{" (stopped by SIGTERM)" if stop_by_signal else ""}: {len(recs)} records, all present, '
        f'ts non-decreasing, {switches} changes of CPU')


def main(ctx):
    check(len(T.online_cpus()) >= 2, 'needs two CPUs')
    tpd = ctx.tpd()
    check_count_duration(ctx, tpd)
    check_relative(ctx, tpd)
    check_ordered(ctx, tpd, False)
    check_ordered(ctx, tpd, True)
    tpd.stop()


if __name__ == '__main__':
    T.run(main)
