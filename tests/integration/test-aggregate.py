#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Aggregate (include/io.tpd.tracing.varlink), spoken raw over Varlink, against references the test
computes itself. Every comparison is exact: counts, sums, least and greatest values, quantiles and
buckets.

The references come from a second tracefs instance of the test's own (trace_clock "boot", the clock
tpd is started with), which the kernel fills from the same tracepoint hits as tpd's instance. Its
`trace` file is read twice with tracing stopped: once with options/raw (pid, cpu and the timestamp in
ns) and once with options/fields (every field as a number: prev_state=0x1 (1), not "S"); the two
readings list the same records in the same order, which the test checks line by line (pid, cpu, and
the µs of the fields reading == the ns of the raw one rounded).

1. hist of sched:sched_switch prev_state "by" comm, "pids" the two gen-pingpong processes (pinned
   to one CPU): every group's count, sum, min, max, p50/p90/p99 and buckets equal those of the
   second instance's sched_switch records of those pids in [start, ts] of the final snapshot.
2. hist of ftrace:print buf (the integer the text starts with), "by" pid (two writers), log2 and
   linear {min 0, max 1000, step 100}, of known integers (with 0, 1, powers of two and their
   neighbours, negatives, values past the linear range, texts that carry no integer: no_value)
   written into both instances' trace_marker.
3. latency sched:sched_waking -> sched:sched_switch, key ["pid", "next_pid"], on the pinned
   gen-pingpong. Samples are differences of timestamps in ns; the second instance takes its own
   timestamp of each tracepoint hit (its ring buffer reads the clock when it reserves the record),
   so its ns differ from tpd's (here by up to some 20 µs either way, measured) and cannot give the
   exact samples. So: the second
   instance gives the records (the same records, event, cpu, pid, fields, in the same order per CPU
   as a tpctl stream of tpd of the same events and pids, which the test checks exactly), and that
   stream, read from tpd's own instance, gives their exact ns; the reference is computed from those
   by the rule of the interface (all CPUs in ts order, a later waking replaces an earlier one, a
   switch whose next_pid has a waiting waking is a sample and ends the wait). count, sum, min, max,
   quantiles, buckets, pending and pending_dropped are compared exactly. The second instance's own
   samples are only logged (their count is equal by construction of the first check).
4. A member of the access group (a real user through setpriv) runs Aggregate and gets the exact
   count; errors: InvalidParameter (kind, field, key, by, linear, interval_ms, duration_ms),
   NoSuchEvent, and org.varlink.service.ExpectedMore without "more".
5. Bounds: count of ftrace:print "by" buf with 1100 distinct texts, each written twice: 1024 groups,
   each of count 2, records == the sum of the groups' counts, records + keys_dropped == 2200. (A key
   is the text written, without the newline the kernel adds.)
6. A latency of 100,000 starts that never end (markers of distinct numbers): at most 65,536 wait, the
   older half dropped and counted (pending + pending_dropped == 100,000), and a fresh tpd's peak
   RSS stays within its fixed 16 MiB, one aggregation's 7 MiB and 16 MiB per decode worker.
7. tpctl count --json prints the final snapshot last (a: 30, b: 20 markers); tpctl hist draws the
   buckets and the summary of the values written; tpctl latency --key without '=' exits 2.
8. A reader stopped for 3 s with 1,000 groups every 100 ms finds a few snapshots waiting (its
   socket's buffers), not 30: tpd sends one once the last went out. Clients that go away during an
   aggregation leave tpd serving.

Where the interface leaves a value open the test does not invent it: the open end of the bucket
below a linear range or of negative values (its low) and of the one above a linear range (its high)
are checked only to hold the bucket's values (low <= least, high > greatest). The quantile's sample
is the nearest rank: the ceil(q * count)-th smallest.
"""

import collections
import json
import os
import re
import socket
import subprocess
import time

import tpdtest as T
from tpdtest import check, fail, log

METHOD = 'io.tpd.tracing.Aggregate'
INVALID = 'org.varlink.service.InvalidParameter'
GROUP_KEYS = ('key', 'count', 'sum', 'min', 'max', 'p50', 'p90', 'p99', 'buckets')
PINGPONG_N = 3000
SCHED_EVENTS = ('sched:sched_waking', 'sched:sched_switch')

# Phase 2's values: 0 and 1 (buckets of their own), powers of two and their neighbours, the ends of
# linear buckets, values past the linear range and below it (negatives), a large one.
VALUES_A = [0, 0, 1, 1, 1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 99, 100, 101, 199, 200, 255, 256, 257,
            511, 512, 513, 999, 1000, 1001, 1023, 1024, 1025, 5000, 65535, 65536, 1 << 40, -1, -2,
            -1000] + [(i * 7919) % 1300 for i in range(200)]
# The second writer's 100 values tell the nearest rank (the ceil(q * n)-th) from the next one: the
# 50th and 51st, 90th and 91st, 99th and 100th smallest lie in different buckets, log2 and linear.
VALUES_B = ([-7, -1] + [(i * 37) % 64 for i in range(47)] + [63] +       # ranks 1..50: at most 63
            [200 + (i * 53) % 300 for i in range(39)] + [511] +          # 51..90: 200..511
            [612 + (i * 41) % 380 for i in range(8)] + [999] +           # 91..99: 612..999
            [1024])                                                      # 100
assert len(VALUES_B) == 100
# Texts after the integer, and texts that carry none (no_value).
NO_VALUE_TEXTS = ['abc', 'x12', '-']
LINEAR = {'min': 0, 'max': 1000, 'step': 100}
BOUND_KEYS = 1100
GROUPS_MAX = 1024


# ----------------------------------------------------------------------------------------------
# the reference's buckets and groups

def log2_bucket(v):
    """(low, high) of v's log2 bucket; None for the open end of the negative one."""
    if v < 0:
        return (None, 0)
    if v == 0:
        return (0, 1)
    k = v.bit_length() - 1
    return (1 << k, 1 << (k + 1))


def linear_bucket(lin):
    lo, hi, step = lin['min'], lin['max'], lin['step']
    assert (hi - lo) % step == 0

    def bucket(v):
        if v < lo:
            return (None, lo)
        if v >= hi:
            return (hi, None)
        i = (v - lo) // step
        return (lo + i * step, lo + (i + 1) * step)
    return bucket


def expected_group(key, values, bucket=None):
    """The group the interface describes: with bucket (a function), of a hist or latency."""
    g = {'key': key, 'count': len(values)}
    if bucket is None:
        return g
    values = sorted(values)
    n = len(values)
    buckets = collections.Counter(bucket(v) for v in values)
    g.update(sum=sum(values), min=values[0], max=values[-1])
    for q in (50, 90, 99):
        rank = max(1, (q * n + 99) // 100)          # ceil(q/100 * n), nearest rank
        _, high = bucket(values[rank - 1])
        # The greatest value its bucket can hold, at most max (the open top holds any).
        g[f'p{q}'] = values[-1] if high is None else min(high - 1, values[-1])
    g['buckets'] = [(lo, hi, c, [v for v in values if bucket(v) == (lo, hi)])
                    for (lo, hi), c in sorted(buckets.items(), key=lambda kv: (kv[0][0] is not None, kv[0][0] or 0))]
    return g


def compare_groups(what, snap, expected):
    """Compares the snapshot's groups with the expected ones ({key: group}); fails saying what differs."""
    groups = snap['groups']
    keys = [g.get('key') for g in groups]
    check(len(keys) == len(set(keys)), f'{what}: keys repeat in the groups: {keys}')
    got = {g['key']: g for g in groups}
    check(set(got) == set(expected), f'{what}: group keys {sorted(got)}, expected {sorted(expected)}')
    problems = []
    for key, exp in expected.items():
        g = got[key]
        unknown = set(g) - set(GROUP_KEYS)
        if unknown:
            problems.append(f'group {key!r} has unknown members {sorted(unknown)}')
        for name in ('count', 'sum', 'min', 'max', 'p50', 'p90', 'p99'):
            if g.get(name) != exp.get(name):
                problems.append(f'group {key!r}: {name} = {g.get(name)!r}, expected {exp.get(name)!r}')
        if 'buckets' not in exp:
            if g.get('buckets') is not None:
                problems.append(f'group {key!r}: buckets {g.get("buckets")!r}, expected none')
            continue
        gb = g.get('buckets') or []
        if any(not isinstance(b, dict) or set(b) != {'low', 'high', 'count'} for b in gb):
            problems.append(f'group {key!r}: malformed buckets {gb!r}')
            continue
        gb = sorted(gb, key=lambda b: b['low'])
        eb = exp['buckets']
        if len(gb) != len(eb):
            problems.append(f'group {key!r}: {len(gb)} buckets {[(b["low"], b["high"], b["count"]) for b in gb]}, '
                            f'expected {len(eb)} {[(lo, hi, c) for lo, hi, c, _ in eb]} (None: an open end)')
            continue
        for b, (lo, hi, c, vals) in zip(gb, eb):
            ok = b['count'] == c
            ok = ok and (b['low'] == lo if lo is not None else b['low'] <= vals[0])
            ok = ok and (b['high'] == hi if hi is not None else b['high'] > vals[-1])
            if not ok:
                problems.append(f'group {key!r}: bucket {b}, expected low {lo} high {hi} count {c} '
                                f'(None: open, holding {vals[0]}..{vals[-1]})')
    check(not problems, f'{what}: the snapshot differs from the reference:\n  ' + '\n  '.join(problems[:40]))
    total = sum(g['count'] for g in groups)
    check(snap['records'] == total, f'{what}: records {snap["records"]} != {total}, the sum of the groups\' counts')


# ----------------------------------------------------------------------------------------------
# the second instance

RAW_RE = re.compile(r'^(\d+) (\d+) (\d+) (.*)$')
TEXT_RE = re.compile(r'^\s*(?P<comm>.*)-(?P<pid>\d+)\s+\[(?P<cpu>\d+)\]\s+\S+\s+(?P<sec>\d+)\.(?P<usec>\d{6}): '
                     r'(?P<rest>.*)$')
NUM_FIELD_RE = re.compile(r'(\w+)=0x[0-9a-f]+ \((-?\d+)\)')


def read_reference(inst):
    """Every record of the instance (tracing must be stopped): dicts of pid, cpu, ts (ns), event,
    fields (numbers, for sched events) or text (for ftrace:print)."""
    ids = {}
    for name in SCHED_EVENTS:
        system, event = name.split(':')
        ids[int(T.read_text(os.path.join(inst, 'events', system, event, 'id')))] = name
    raw = T.trace_lines(inst, 'raw')
    text = T.trace_lines(inst, 'fields')
    check(len(raw) == len(text), f'{inst}: {len(raw)} lines read with options/raw, {len(text)} with options/fields')
    out = []
    for r, t in zip(raw, text):
        m, n = RAW_RE.match(r), TEXT_RE.match(t)
        check(m and n, f'{inst}: cannot parse the line pair {r!r} / {t!r}')
        pid, cpu, ts = int(m[1]), int(m[2]), int(m[3])
        usec = int(n['sec']) * 1_000_000 + int(n['usec'])
        check(int(n['pid']) == pid and int(n['cpu']) == cpu and (ts + 500) // 1000 == usec,
              f'{inst}: the raw and fields readings disagree: {r!r} / {t!r}')
        rest = m[4]
        rec = {'pid': pid, 'cpu': cpu, 'ts': ts}
        if rest.startswith('type: '):
            rec['event'] = ids.get(int(rest[6:]), f'type {rest[6:]}')
            check(n['rest'].startswith(rec['event'].split(':')[1] + ':'), f'{inst}: event mismatch: {r!r} / {t!r}')
            rec['fields'] = {k: int(v) for k, v in NUM_FIELD_RE.findall(n['rest'])}
        elif rest.startswith('# '):
            rec['event'] = 'ftrace:print'
            parts = rest.split(' ', 2)
            rec['text'] = parts[2] if len(parts) > 2 else ''
        else:
            fail(f'{inst}: unknown raw line {r!r}')
        out.append(rec)
    return out


def reset_reference(inst, events=()):
    T.write_text(os.path.join(inst, 'events', 'enable'), '0')
    for name in events:
        system, event = name.split(':')
        T.write_text(os.path.join(inst, 'events', system, event, 'enable'), '1')
    T.write_text(os.path.join(inst, 'tracing_on'), '1')
    with open(os.path.join(inst, 'trace'), 'w'):
        pass                                        # O_TRUNC: the buffers and counters reset


def stop_reference(inst):
    T.write_text(os.path.join(inst, 'tracing_on'), '0')
    stats = T.read_cpu_stats(inst)
    lost = T.kernel_lost(stats)
    check(lost == 0, f'the reference instance lost {lost} records (buffer too small?): {stats}')


# ----------------------------------------------------------------------------------------------
# Aggregate calls

class Aggregation:
    """One Aggregate call with "more" on a connection of its own."""

    def __init__(self, tpd, params, what):
        self.params, self.what, self.tpd = params, what, tpd
        self.v = T.Varlink(tpd.socket, timeout=10)
        self.t0 = T.boottime_ns()
        self.v.send(METHOD, params, more=True)
        self.snapshots = []
        self.notices = []
        self.final = None

    def _next(self, timeout):
        reply = self.v.recv(timeout)
        check(reply is not None, f'{self.what}: tpd closed the connection before the final snapshot; '
                                 f'log:\n{self.tpd.log(2000)}')
        check('error' not in reply, f'{self.what}: Aggregate {json.dumps(self.params)} failed: {reply}')
        p = reply.get('parameters')
        check(isinstance(p, dict), f'{self.what}: reply without parameters: {reply}')
        if 'record' in p:
            self.notices.append(p['record'])
            log(f'{self.what}: notice {p["record"]}')
            return self._next(timeout)
        for name in ('kind', 'start', 'ts', 'records', 'lost', 'keys_dropped', 'groups'):
            check(name in p, f'{self.what}: snapshot without {name}: {reply}')
        check(p['kind'] == self.params['kind'], f'{self.what}: kind {p["kind"]!r}, asked {self.params["kind"]!r}')
        check(p['start'] <= p['ts'], f'{self.what}: start {p["start"]} after ts {p["ts"]}')
        if self.snapshots:
            first = self.snapshots[0]
            check(p['start'] == first['start'], f'{self.what}: start changed from {first["start"]} to {p["start"]}')
            check(p['ts'] >= self.snapshots[-1]['ts'], f'{self.what}: ts went back: {self.snapshots[-1]["ts"]} -> {p["ts"]}')
        if p.get('final'):
            check(not reply.get('continues'), f'{self.what}: the final reply says "continues": {reply}')
        else:
            check(reply.get('continues') is True, f'{self.what}: a snapshot that is not final lacks "continues": {reply}')
        self.snapshots.append(p)
        return p

    def first(self, timeout=10.0):
        """Waits for the first snapshot (the aggregation runs): start lies between the call and it."""
        p = self._next(timeout)
        t1 = T.boottime_ns()
        check(self.t0 <= p['start'] <= t1, f'{self.what}: start {p["start"]} is not between the call ({self.t0}) '
                                           f'and its first reply ({t1}) on the boot clock')
        return p

    def wait_final(self, timeout=30.0):
        deadline = time.monotonic() + timeout
        while not self.snapshots or not self.snapshots[-1].get('final'):
            left = deadline - time.monotonic()
            check(left > 0, f'{self.what}: no final snapshot within {timeout} s')
            self._next(left)
        self.final = p = self.snapshots[-1]
        check(p['lost'] == 0, f'{self.what}: {p["lost"]} records lost; the reference cannot be compared')
        log(f'{self.what}: final after {len(self.snapshots)} snapshots, window [{p["start"]}, {p["ts"]}] '
            f'({(p["ts"] - p["start"]) / 1e6:.1f} ms), {p["records"]} records, {len(p["groups"])} groups')
        self.v.close()
        return p


def in_window(snap, recs):
    return [r for r in recs if snap['start'] <= r['ts'] <= snap['ts']]


# ----------------------------------------------------------------------------------------------
# 1 and 3: sched_switch prev_state, and runqlat-like latency, on gen-pingpong

def latency_reference(recs):
    """Samples by the interface's rule: records in ts order (stable: on one CPU the write order),
    a waking stores its ts under its pid field, a switch with a stored next_pid is a sample."""
    waiting = {}
    samples = []
    for r in sorted(recs, key=lambda r: r['ts']):
        if r['event'] == 'sched:sched_waking':
            waiting[r['fields']['pid']] = r['ts']
        elif r['event'] == 'sched:sched_switch':
            t = waiting.pop(r['fields']['next_pid'], None)
            if t is not None:
                samples.append(r['ts'] - t)
    return samples, len(waiting)


def sig(r):
    """What must be equal of a record in both instances (all but the ts)."""
    f = r['fields']
    if r['event'] == 'sched:sched_switch':
        return (r['event'], r['cpu'], r['pid'], f['prev_pid'], f['prev_state'], f['next_pid'])
    return (r['event'], r['cpu'], r['pid'], f['pid'])


def check_sched(ctx, tpd, ref):
    cpu = max(T.online_cpus())
    gen = ctx.gen('GEN_PINGPONG', '--count', PINGPONG_N, '--cpu', cpu)
    parent, child = gen.pids()
    pids = [parent, child]
    comms = {parent: 'tpd-pp-parent', child: 'tpd-pp-child'}

    # tpd's own ns of the same records: a stream of the same events and pids (and of the test's
    # markers, to know when it is live).
    me = os.getpid()
    stream = tpd.stream('-e', SCHED_EVENTS[0], '-e', SCHED_EVENTS[1], '-e', 'ftrace:print',
                        '-p', str(parent), '-p', str(child), '-p', str(me))
    T.confirm_live([stream], lambda: tpd.marker('live'))
    log(f'gen-pingpong {parent} {child} on CPU {cpu}; tpd\'s stream of them is live')

    reset_reference(ref, SCHED_EVENTS)
    common = {'pids': pids, 'interval_ms': 100, 'duration_ms': 3000}
    hist = Aggregation(tpd, dict(common, kind='hist', events=['sched:sched_switch'], field='prev_state', by='comm'),
                       'hist prev_state by comm')
    lat = Aggregation(tpd, dict(common, kind='latency', events=list(SCHED_EVENTS), key=['pid', 'next_pid']),
                      'latency waking->switch')
    hist.first()
    lat.first()
    go_ts = gen.go()
    gen.wait_done(timeout=60)
    end_ts = T.boottime_ns()                       # both processes are gone: no record of them after this
    h, l = hist.wait_final(), lat.wait_final()
    for a, p in ((hist, h), (lat, l)):
        check(p['start'] < go_ts and end_ts < p['ts'],
              f'{a.what}: the workload [{go_ts}, {end_ts}] is not inside the window [{p["start"]}, {p["ts"]}]: '
              f'the test\'s timing failed, duration_ms too short for this machine?')
    stop_reference(ref)
    recs = [r for r in read_reference(ref) if r['pid'] in pids and r['event'] in SCHED_EVENTS]

    def streamed():
        return sum(1 for line in stream.lines if b'"event":"sched:' in line and
                   json.loads(line)['pid'] in pids)
    # Not drain(): the test's own pid is streamed too (for the probe), its sleeps never let it be quiet.
    stream.wait_for(lambda: streamed() >= len(recs), 30, f'the {len(recs)} records of the pingpong')
    time.sleep(0.5)                                 # any record too many would arrive now
    stream.stop()
    log(f'{len(recs)} records of the pingpong in the reference instance, {streamed()} sched records streamed')
    inside = in_window(h, recs)
    check(len(inside) == len(recs), f'{len(recs) - len(inside)} of the pingpong\'s {len(recs)} records in the '
                                    f'reference instance lie outside the window [{h["start"]}, {h["ts"]}]')
    switches = [r for r in recs if r['event'] == 'sched:sched_switch']
    check(len(switches) >= 2 * PINGPONG_N, f'only {len(switches)} sched_switch records of the pingpong '
                                           f'in the reference, expected at least {2 * PINGPONG_N}')

    # 1: prev_state by comm.
    by = collections.defaultdict(list)
    for r in switches:
        by[comms[r['pid']]].append(r['fields']['prev_state'])
    expected = {k: expected_group(k, v, log2_bucket) for k, v in by.items()}
    log(f'reference prev_state: ' + ', '.join(f'{k}: {dict(collections.Counter(v))}' for k, v in by.items()))
    compare_groups('hist prev_state by comm', h, expected)
    check(h['keys_dropped'] == 0 and h.get('no_value', 0) == 0,
          f'hist prev_state: keys_dropped {h["keys_dropped"]}, no_value {h.get("no_value")}')
    log(f'1. hist prev_state: {h["records"]} records, groups equal to the reference')

    # 3: the stream's records are the reference's, one for one (per CPU, in order)...
    srecs = [r for r in stream.records() if 'event' in r and r['event'] in SCHED_EVENTS and r['pid'] in pids]
    lost = [r for r in stream.records() if 'lost' in r]
    check(not lost, f'the stream of tpd lost records: {lost[:3]}')
    srecs = in_window(l, srecs)
    for c in sorted({r['cpu'] for r in srecs} | {r['cpu'] for r in recs}):
        a = [sig(r) for r in recs if r['cpu'] == c]
        b = [sig(r) for r in srecs if r['cpu'] == c]
        if a != b:
            i = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
            fail(f'CPU {c}: tpd\'s stream and the reference instance differ at record {i} of {len(a)}/{len(b)}: '
                 f'reference {a[i:i + 3]}, stream {b[i:i + 3]}')
    # ... and give the exact ns of tpd's instance.
    samples, pending = latency_reference(srecs)
    ref_samples, ref_pending = latency_reference(recs)
    check(samples, 'the pingpong gave no latency sample: is it pinned to one CPU?')
    diffs = [a - b for a, b in zip(samples, ref_samples)]
    log(f'latency: {len(samples)} samples, {pending} waiting; the reference instance\'s own samples: '
        f'{len(ref_samples)}, {ref_pending} waiting, differing from tpd\'s by {min(diffs)}..{max(diffs)} ns')
    compare_groups('latency waking->switch', l, {'': expected_group('', samples, log2_bucket)})
    check(l.get('pending') == pending and l.get('pending_dropped') == 0 and l['keys_dropped'] == 0,
          f'latency: pending {l.get("pending")} (expected {pending}), pending_dropped {l.get("pending_dropped")} '
          f'(expected 0), keys_dropped {l["keys_dropped"]}')
    g = l['groups'][0]
    log(f'3. latency: {g["count"]} samples, sum {g["sum"]} ns, min {g["min"]}, max {g["max"]}, '
        f'p50/p90/p99 {g["p50"]}/{g["p90"]}/{g["p99"]}: equal to the reference')


# ----------------------------------------------------------------------------------------------
# 2: hist of a marker's integer

def leading_int(text):
    m = re.match(r'-?\d+', text)
    return int(m[0]) if m else None


def marker_texts(values, tag):
    # Some with text after the integer, as a trace_marker line of an application carries it.
    return [f'{v}' if i % 3 else f'{v} {tag} {i}' for i, v in enumerate(values)]


def check_markers(ctx, tpd, ref):
    reset_reference(ref)
    tpd_fd = os.open(os.path.join(tpd.instance_dir, 'trace_marker'), os.O_WRONLY | os.O_CLOEXEC)
    ref_fd = os.open(os.path.join(ref, 'trace_marker'), os.O_WRONLY | os.O_CLOEXEC)

    def write_both(texts):
        for t in texts:
            for fd in (tpd_fd, ref_fd):
                os.write(fd, t.encode())

    common = {'events': ['ftrace:print'], 'field': 'buf', 'interval_ms': 100, 'duration_ms': 2000}
    by_pid = Aggregation(tpd, dict(common, kind='hist', by='pid'), 'hist buf by pid')
    linear = Aggregation(tpd, dict(common, kind='hist', by='pid', linear=LINEAR), 'hist buf linear by pid')
    by_pid.first()
    linear.first()
    texts_a = marker_texts(VALUES_A, 'apples') + NO_VALUE_TEXTS
    texts_b = marker_texts(VALUES_B, 'pears')
    write_both(texts_a)
    pid = os.fork()
    if pid == 0:
        try:
            write_both(texts_b)
            os._exit(0)
        except BaseException:       # noqa: B036 - the child must never return into the test
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    check(status == 0, f'the second marker writer failed: status {status}')
    t_end = T.boottime_ns()
    os.close(tpd_fd)
    os.close(ref_fd)
    b, li = by_pid.wait_final(), linear.wait_final()
    stop_reference(ref)
    check(t_end < b['ts'] and t_end < li['ts'], f'the markers were written until {t_end}, after the window\'s end')

    recs = [r for r in read_reference(ref) if r['event'] == 'ftrace:print']
    inside = in_window(b, recs)
    check(len(inside) == len(recs) == len(texts_a) + len(texts_b),
          f'the reference has {len(recs)} markers, {len(inside)} in the window; written {len(texts_a) + len(texts_b)}')
    by = collections.defaultdict(list)
    no_value = 0
    for r in recs:
        v = leading_int(r['text'])
        if v is None:
            no_value += 1
        else:
            by[str(r['pid'])].append(v)
    # The reference's own sanity: it holds what was written.
    check(sorted(by[str(os.getpid())]) == sorted(VALUES_A) and sorted(by[str(pid)]) == sorted(VALUES_B)
          and no_value == len(NO_VALUE_TEXTS), 'the reference instance does not hold the markers written')

    compare_groups('hist buf by pid', b, {k: expected_group(k, v, log2_bucket) for k, v in by.items()})
    compare_groups('hist buf linear by pid', li,
                   {k: expected_group(k, v, linear_bucket(LINEAR)) for k, v in by.items()})
    all_values = [v for vs in by.values() for v in vs]
    for name, p in (('by pid', b), ('linear', li)):
        check(p.get('no_value') == no_value and p['keys_dropped'] == 0,
              f'hist buf {name}: no_value {p.get("no_value")} (expected {no_value}), keys_dropped {p["keys_dropped"]}')
    log(f'2. hist of marker integers: {len(all_values)} values of 2 writers, {no_value} without one: log2 and '
        f'linear {LINEAR} by pid equal to the reference')


# ----------------------------------------------------------------------------------------------
# 4: a member, and errors

MEMBER_SCRIPT = r'''
import json, socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(sys.argv[1])
s.sendall(json.dumps({"method": "io.tpd.tracing.Aggregate", "parameters": json.loads(sys.argv[2]),
                      "more": True}).encode() + b"\0")
buf = b""
while True:
    chunk = s.recv(65536)
    if not chunk:
        break
    buf += chunk
    while b"\0" in buf:
        msg, _, buf = buf.partition(b"\0")
        print(msg.decode(), flush=True)
        m = json.loads(msg)
        if "error" in m or m.get("parameters", {}).get("final"):
            sys.exit(0)
'''


def check_member(ctx, tpd, users):
    path = os.path.join(ctx.tmpdir, 'member-aggregate.py')
    with open(path, 'w') as f:
        f.write(MEMBER_SCRIPT)
    os.chmod(path, 0o644)
    params = {'kind': 'count', 'events': ['ftrace:print'], 'interval_ms': 100, 'duration_ms': 1500}
    argv = users.setpriv('A') + ['python3', path, tpd.socket, json.dumps(params)]
    proc = T.Process(ctx, 'member-aggregate', argv, stdout=subprocess.PIPE)
    out = T.LineReader(proc.proc.stdout.fileno())
    replies = []

    def next_reply():
        try:
            line = out.readline(10)
        except TimeoutError:
            fail(f'member A\'s Aggregate: no reply within 10 s after {replies}; stderr {proc.stderr_text()!r}')
        check(line is not None, f'member A\'s Aggregate ended without a final reply: {replies}; '
                                f'stderr {proc.stderr_text()!r}')
        reply = json.loads(line)
        check('error' not in reply, f'member A\'s Aggregate {params} failed: {reply}')
        replies.append(reply)
        return reply['parameters']

    while 'record' in next_reply():
        pass
    n = 25
    for i in range(n):
        tpd.marker(f'member {i}')
    while not (p := next_reply()).get('final'):
        pass
    check(proc.wait(10) == 0, f'the member\'s script exited with {proc.proc.returncode}: {proc.stderr_text()!r}')
    check(p['records'] == n and len(p['groups']) == 1 and p['groups'][0].get('key') == '' and
          p['groups'][0].get('count') == n and all(p['groups'][0].get(k) is None for k in GROUP_KEYS[2:]),
          f'member A\'s count of {n} markers: expected records {n} and one group {{"key": "", "count": {n}}}, got {p}')
    log(f'4. member A: Aggregate count of {n} markers: {p["records"]}')


def check_errors(tpd):
    base = {'kind': 'hist', 'events': ['ftrace:print'], 'field': 'buf', 'duration_ms': 1000}
    cases = [
        ('unknown kind', dict(base, kind='median'), INVALID, 'kind'),
        ('hist without field', {k: v for k, v in base.items() if k != 'field'}, INVALID, 'field'),
        ('hist of a field the event lacks', dict(base, field='no_such_field'), INVALID, 'field'),
        ('by a field the event lacks', dict(base, by='no_such_field'), INVALID, 'by'),
        ('latency key of one element', {'kind': 'latency', 'events': list(SCHED_EVENTS), 'key': ['pid']},
         INVALID, 'key'),
        ('latency key of a field events[0] lacks', {'kind': 'latency', 'events': list(SCHED_EVENTS),
                                                    'key': ['no_such_field', 'next_pid']}, INVALID, 'key'),
        ('linear with step 0', dict(base, linear={'min': 0, 'max': 100, 'step': 0}), INVALID, 'linear'),
        ('linear of 2000 buckets', dict(base, linear={'min': 0, 'max': 2000, 'step': 1}), INVALID, 'linear'),
        ('interval_ms 5', dict(base, interval_ms=5), INVALID, 'interval_ms'),
        ('interval_ms 3600001', dict(base, interval_ms=3600001), INVALID, 'interval_ms'),
        ('duration_ms -1', dict(base, duration_ms=-1), INVALID, 'duration_ms'),
        ('unknown event', dict(base, events=['no_such:event']), 'io.tpd.tracing.NoSuchEvent', None),
    ]
    with tpd.varlink() as v:
        for what, params, error, parameter in cases:
            reply = v.call(METHOD, params, more=True)
            check(reply.get('error') == error and
                  (parameter is None or reply.get('parameters', {}).get('parameter') == parameter),
                  f'Aggregate, {what} ({json.dumps(params)}): expected {error}'
                  f'{f" of {parameter}" if parameter else ""}, got {reply}')
            check('error' not in v.call('org.varlink.service.GetInfo'), f'GetInfo failed after: {what}')
        reply = v.call(METHOD, {'kind': 'count', 'events': ['ftrace:print'], 'duration_ms': 1000})
        check(reply.get('error') == 'org.varlink.service.ExpectedMore',
              f'Aggregate without "more": expected org.varlink.service.ExpectedMore, got {reply}')
    log(f'4. errors: {len(cases)} bad calls refused as the interface says, ExpectedMore without "more"')


# ----------------------------------------------------------------------------------------------
# 5: bounds of the groups

def marker_key(key):
    """The text written of a key by buf: the kernel ends every trace_marker line with a newline, which
    a key leaves out (include/io.tpd.tracing.varlink, AggregateGroup)."""
    return key


def check_bounds(tpd):
    agg = Aggregation(tpd, {'kind': 'count', 'events': ['ftrace:print'], 'by': 'buf', 'interval_ms': 100,
                            'duration_ms': 2500}, 'count by buf')
    agg.first()
    texts = [f'k{i}' for i in range(BOUND_KEYS)]
    fd = os.open(os.path.join(tpd.instance_dir, 'trace_marker'), os.O_WRONLY | os.O_CLOEXEC)
    try:
        for _ in range(2):
            for t in texts:
                os.write(fd, t.encode())
    finally:
        os.close(fd)
    t_end = T.boottime_ns()
    p = agg.wait_final()
    check(t_end < p['ts'], f'the markers were written until {t_end}, after the window\'s end {p["ts"]}')
    groups = p['groups']
    keys = [marker_key(g['key']) for g in groups]
    total = sum(g['count'] for g in groups)
    bad = [g for g in groups if g['count'] != 2 or marker_key(g['key']) not in set(texts)]
    check(len(groups) == GROUPS_MAX and len(set(keys)) == GROUPS_MAX and not bad and
          p['records'] == total == 2 * GROUPS_MAX and p['records'] + p['keys_dropped'] == 2 * BOUND_KEYS,
          f'count by buf of {BOUND_KEYS} texts written twice: {len(groups)} groups ({len(set(keys))} keys), '
          f'expected {GROUPS_MAX}; records {p["records"]}, sum of counts {total}, expected {2 * GROUPS_MAX}; '
          f'keys_dropped {p["keys_dropped"]}, expected {2 * (BOUND_KEYS - GROUPS_MAX)}; groups not of count 2 or '
          f'of an unknown key: {bad[:5]}')
    log(f'5. bounds: {len(groups)} groups, records {p["records"]} + keys_dropped {p["keys_dropped"]} '
        f'== {2 * BOUND_KEYS} markers')


PENDING_MAX = 65536
PENDING_KEYS = 100000
# What an aggregation may add to tpd's fixed part (docs/design.md §5 "Memory bound", §9), and the
# fixed part itself.
AGGREGATION_MIB, FIXED_MIB, WORKER_MIB = 7, 16, 16


def check_pending_bound(tpd):
    """A latency whose starts never end: 100,000 distinct keys (a marker both starts and ends, each
    of its own number). At most 65,536 wait; the older half goes when more come, counted, and tpd's
    memory stays within its bound."""
    agg = Aggregation(tpd, {'kind': 'latency', 'events': ['ftrace:print', 'ftrace:print'], 'key': ['buf', 'buf'],
                            'interval_ms': 500, 'duration_ms': 6000}, 'latency with 100,000 keys')
    agg.first()
    fd = os.open(os.path.join(tpd.instance_dir, 'trace_marker'), os.O_WRONLY | os.O_CLOEXEC)
    try:
        for i in range(PENDING_KEYS):
            os.write(fd, str(i).encode())
    finally:
        os.close(fd)
    p = agg.wait_final(30)
    check(p['records'] == 0 and p['lost'] == 0 and p['pending'] <= PENDING_MAX and p['pending_dropped'] > 0 and
          p['pending'] + p['pending_dropped'] == PENDING_KEYS,
          f'{PENDING_KEYS} starts without an end: pending {p["pending"]} (at most {PENDING_MAX}) + pending_dropped '
          f'{p["pending_dropped"]} should be {PENDING_KEYS}, records {p["records"]} and lost {p["lost"]} 0')
    hwm = T.vm_kb(tpd.process.pid, 'VmHWM')
    if T.ASAN:
        log(f'6. pending bound: pending {p["pending"]}, dropped {p["pending_dropped"]}; sanitizer build: '
            f'RSS not checked (peak {hwm} KiB)')
        return
    # The bound counts 16 MiB for each decode worker (the workers setup of the tests runs two).
    workers = tpd.status()['decoding']['workers']
    bound = FIXED_MIB + AGGREGATION_MIB + WORKER_MIB * workers
    check(hwm < bound * 1024,
          f'tpd\'s peak RSS {hwm} KiB, above {FIXED_MIB} MiB + one aggregation\'s {AGGREGATION_MIB} MiB + '
          f'{workers} decode workers × {WORKER_MIB} MiB')
    log(f'6. pending bound: pending {p["pending"]}, dropped {p["pending_dropped"]}; tpd\'s peak RSS {hwm} KiB')


def check_tpctl(tpd):
    """tpctl count and hist make the call and print its last snapshot: --json as the reply's
    parameters, text as bars and a summary; usage errors exit 2 before any call."""
    def run(args, texts):
        proc = subprocess.Popen([T.env_program('TPCTL'), '--socket', tpd.socket, *args], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        # Written once the aggregation runs: its first snapshot is printed with --json, and text
        # waits; a second is enough time for the call on any build.
        time.sleep(1.0 * T.SLOWDOWN)
        fd = os.open(os.path.join(tpd.instance_dir, 'trace_marker'), os.O_WRONLY | os.O_CLOEXEC)
        try:
            for t in texts:
                os.write(fd, t.encode())
        finally:
            os.close(fd)
        out, err = proc.communicate(timeout=30)
        check(proc.returncode == 0, f'tpctl {" ".join(args)} exited with {proc.returncode}: {err!r}')
        return out

    dur = str(3 * T.SLOWDOWN)
    out = run(['count', 'ftrace:print', '--by', 'buf', '--duration', dur, '--json'], ['a'] * 30 + ['b'] * 20)
    lines = out.splitlines()
    last = json.loads(lines[-1])
    counts = {g['key']: g['count'] for g in last['groups']}
    check(last.get('final') is True and counts == {'a': 30, 'b': 20} and last['records'] == 50,
          f'tpctl count --json: the last line is not the final snapshot of a: 30, b: 20: {lines[-1][:300]}')
    out = run(['hist', 'ftrace:print', '--field', 'buf', '--duration', dur], ['5', '6', '7', '100'])
    check('[4, 8)' in out and re.search(r'count 4\s+p50 7\s+p90 100\s+p99 100\s+max 100', out),
          f'tpctl hist: no bucket [4, 8) or no summary "count 4  p50 7  p90 100  p99 100  max 100" (a quantile is at most the max) in:\n{out}')
    r = tpd.tpctl('latency', 'sched:sched_waking', 'sched:sched_switch', '--key', 'pid')
    check(r.returncode == 2 and 'key' in r.stderr,
          f'tpctl latency --key without "=": expected exit 2 naming --key, got {r.returncode}: {r.stderr!r}')
    log('7. tpctl count --json and hist: their last snapshots as tpd gave them; a usage error exits 2')


STOPPED_S = 3


def check_stopped_reader(tpd):
    """A client that stops reading gets no pile of snapshots: tpd sends the next only once the last
    went out (they are cumulative), so it holds one at most. The snapshots of 1,000 groups every
    100 ms that a stopped reader finds waiting are the few its socket's buffers hold, not one per
    interval. Clients that go away while snapshots are due leave tpd serving."""
    def write_keys():
        fd = os.open(os.path.join(tpd.instance_dir, 'trace_marker'), os.O_WRONLY | os.O_CLOEXEC)
        try:
            for i in range(1000):
                os.write(fd, f'stopped-reader-key-{i:06d}'.encode())
        finally:
            os.close(fd)

    v = T.Varlink(tpd.socket, timeout=10)
    v.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    v.send(METHOD, {'kind': 'count', 'events': ['ftrace:print'], 'by': 'buf', 'interval_ms': 100}, more=True)
    check(v.recv(10).get('parameters', {}).get('records') == 0, 'stopped reader: no first snapshot')
    # 1,000 groups: each snapshot some 50 kB, more than the socket's buffers hold a few of.
    write_keys()
    time.sleep(STOPPED_S)
    write_keys()
    # What waited: read until a snapshot counts the markers written after the stop.
    waited, seen = 0, 0
    while seen < 2000:
        reply = v.recv(10)
        check(reply is not None and 'error' not in reply, f'stopped reader: {reply}')
        waited += 1
        seen = reply['parameters'].get('records', 0)
    v.close()
    per_interval = STOPPED_S * 10
    check(waited <= 10, f'a reader stopped for {STOPPED_S} s found {waited} snapshots waiting before the one '
                        f'after it came back: tpd kept more than the last (one per 100 ms would be {per_interval})')
    for i in range(20):
        c = T.Varlink(tpd.socket)
        c.send(METHOD, {'kind': 'latency', 'events': ['sched:sched_waking', 'sched:sched_switch'],
                        'key': ['pid', 'next_pid'], 'interval_ms': 100}, more=True)
        if i % 2:
            c.recv(5)
        time.sleep(0.015 * (i % 7))
        c.close()
    check('error' not in tpd.call('org.varlink.service.GetInfo'), 'tpd does not answer after 20 clients went away')
    log(f'8. a reader stopped for {STOPPED_S} s: {waited} snapshots waited (the socket\'s buffers), not '
        f'{per_interval}; 20 clients gone mid-aggregation, tpd still serves')


# ----------------------------------------------------------------------------------------------

def main(ctx):
    check(len(T.online_cpus()) >= 2, 'needs two CPUs')
    with T.TestUsers(ctx, 'tpag', members=('A',)) as users:
        tpd = users.tpd()
        ref, clock = ctx.reference_instance(tpd, '-agg')
        # tpdtest starts tpd with --clock boot: the windows are boot clock times.
        check(clock == 'boot', f'tpd\'s instance runs on the {clock} clock, not boot: the windows cannot be compared')
        check_errors(tpd)
        check_sched(ctx, tpd, ref)
        check_markers(ctx, tpd, ref)
        check_member(ctx, tpd, users)
        check_bounds(tpd)
        check_tpctl(tpd)
        check_stopped_reader(tpd)
        # A fresh tpd: its peak memory is this aggregation's alone.
        tpd.stop()
        tpd.start()
        check_pending_bound(tpd)
        tpd.stop()


if __name__ == '__main__':
    T.run(main)
