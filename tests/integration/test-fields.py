#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Field truth: tpd's sched:sched_switch records equal what the kernel itself prints.

A pipe ping-pong between two known processes (pinned to CPU 0) runs while sched:sched_switch is
recorded twice: by tpd (a `tpctl stream -e sched:sched_switch --print`) and by a second tracefs
instance the test drives by hand (same 'boot' clock, kernel filter on the two pids). The reference
instance's `trace` file is read three times, zipped record by record:
  - options/raw: pid, cpu and the timestamp in full nanoseconds;
  - options/fields: every field as a number (prev_state numerically, "another route");
  - default text: prev_state in the kernel's letter form and the whole formatted line.
For the records of the two pids within the same time window, per CPU and in order, tpd must have
exactly the same records: cpu, pid, every field, and ts close to the kernel's (each instance reads
the clock for its own copy of an event: every record within 5 ms, the median within 10 us); the kernel's letters must equal tpd's
integer prev_state mapped with the rules of the event's print fmt; tpd's `print` text must equal
the kernel's, and `comm` (when tpd gives one) the kernel's saved comm (the process's own name where
the kernel's table no longer has it: '<...>').
"""

import os
import re
import time

import tpdtest as T
from tpdtest import check, fail, log

EVENT = 'sched:sched_switch'
ROUND_TRIPS = 10_000
# Each instance has its own ring buffer and reads the clock for its own copy of the event, so the
# two timestamps of one record differ: typically by under 2 us, up to ~30 us when an interrupt
# comes in between, and in a VM a preempted vCPU can stretch that further. So: every record within
# 5 ms, and the median within 10 us. A wrong clock, a mishandled time-extend (multiples of 2^27 ns)
# or a drifting delta sum are all far outside that.
TS_SKEW_MAX_NS = 5_000_000
TS_SKEW_MEDIAN_MAX_NS = 10_000
FIELDS = ['prev_comm', 'prev_pid', 'prev_prio', 'prev_state', 'next_comm', 'next_pid', 'next_prio']

TEXT_RE = re.compile(r'^\s*(?P<comm>.*)-(?P<pid>\d+)\s+\[(?P<cpu>\d+)\]\s+(?P<flags>\S+\s+)?'
                     r'(?P<sec>\d+)\.(?P<usec>\d{6}): sched_switch: (?P<body>.*)$')
BODY_RE = re.compile(r'^prev_comm=(?P<prev_comm>.*) prev_pid=(?P<prev_pid>-?\d+) prev_prio=(?P<prev_prio>-?\d+) '
                     r'prev_state=(?P<prev_state>\S+) ==> next_comm=(?P<next_comm>.*) '
                     r'next_pid=(?P<next_pid>-?\d+) next_prio=(?P<next_prio>-?\d+)$')
NUM = r'0x[0-9a-f]+ \((-?\d+)\)'
FIELDS_BODY_RE = re.compile(rf'^prev_comm=(.*) prev_pid={NUM} prev_prio={NUM} prev_state={NUM} '
                            rf'next_comm=(.*) next_pid={NUM} next_prio={NUM}$')
RAW_RE = re.compile(r'^(\d+) (\d+) (\d+) type: (\d+)')


def balanced(text, start):
    """The text of the parenthesised group opening at text[start] == '('."""
    depth = 0
    for i in range(start, len(text)):
        depth += {'(': 1, ')': -1}.get(text[i], 0)
        if depth == 0:
            return text[start:i + 1]
    raise ValueError('unbalanced parentheses')


def int_expr(expr):
    # Only integer constants and | + - << ( ) from the print fmt; nothing else reaches eval.
    check(re.fullmatch(r'[0-9a-fA-Fx|+\-<>() ]+', expr), f'unexpected expression in print fmt: {expr!r}')
    return eval(expr, {'__builtins__': {}})  # noqa: S307 - validated above


def prev_state_rules(format_text):
    """From the event's print fmt: (mask, [(bit, letter)...], preempt_bit), the kernel's rules for
    printing prev_state: letters of the bits in mask joined by '|', 'R' if none, '+' if preempt_bit."""
    fmt = format_text.split('print fmt:', 1)[1]
    i = fmt.index('(REC->prev_state & (')
    mask = int_expr(balanced(fmt, i + len('(REC->prev_state & ')))
    flags = [(int(b, 16), letter) for b, letter in re.findall(r'\{ (0x[0-9a-fA-F]+), "([A-Za-z]+)" \}', fmt)]
    j = fmt.rindex('REC->prev_state & (')
    preempt = int_expr(balanced(fmt, j + len('REC->prev_state & ')))
    check(mask and flags and preempt, f'cannot read the prev_state rules from the print fmt: {fmt!r}')
    return mask, flags, preempt


def state_letters(value, rules):
    """What the kernel's __print_flags(prev_state & mask, "|", ...) : "R", then "+" prints."""
    mask, flags, preempt = rules
    v = value & mask
    if v:
        out = []
        for bit, letter in flags:
            if bit and (v & bit) == bit:
                out.append(letter)
                v &= ~bit
        if v:
            out.append('0x%x' % v)
        s = '|'.join(out)
    else:
        s = 'R'
    return s + ('+' if value & preempt else '')


def read_reference(inst):
    """Zips the three renderings of the reference instance's buffer into records."""
    header = T.read_text(os.path.join(inst, 'trace')).splitlines()[:4]
    text, num, raw = T.trace_lines(inst), T.trace_lines(inst, 'fields'), T.trace_lines(inst, 'raw')
    check(len(text) == len(num) == len(raw),
          f'reference reads differ in length: text {len(text)}, fields {len(num)}, raw {len(raw)}')
    m = re.search(r'entries-in-buffer/entries-written: (\d+)/(\d+)', '\n'.join(header))
    check(m and m.group(1) == m.group(2), f'reference instance lost records, cannot compare: {header}')

    out = []
    for t, n, r in zip(text, num, raw):
        mt, mn, mr = TEXT_RE.match(t), TEXT_RE.match(n), RAW_RE.match(r)
        check(mt and mn and mr, f'cannot parse reference lines:\n  {t}\n  {n}\n  {r}')
        body, nb = BODY_RE.match(mt['body']), FIELDS_BODY_RE.match(mn['body'])
        check(body and nb, f'cannot parse reference bodies:\n  {t}\n  {n}')
        pid, cpu, ts = int(mr[1]), int(mr[2]), int(mr[3])
        usec = int(mt['sec']) * 1_000_000 + int(mt['usec'])
        # The three reads walk the same buffer: the same record on each line.
        check(int(mt['pid']) == int(mn['pid']) == pid and int(mt['cpu']) == int(mn['cpu']) == cpu
              and (ts + 500) // 1000 == usec,
              f'reference reads out of step:\n  {t}\n  {n}\n  {r}')
        fields = {
            'prev_comm': nb[1], 'prev_pid': int(nb[2]), 'prev_prio': int(nb[3]), 'prev_state': int(nb[4]),
            'next_comm': nb[5], 'next_pid': int(nb[6]), 'next_prio': int(nb[7]),
        }
        for name in FIELDS:
            if name != 'prev_state':
                check(str(fields[name]) == body[name], f'reference text and fields disagree on {name}:\n  {t}\n  {n}')
        out.append({'ts': ts, 'cpu': cpu, 'pid': pid, 'comm': mt['comm'], 'fields': fields,
                    'letters': body['prev_state'], 'print': mt['body']})
    return out


def main(ctx):
    fmt_path = os.path.join(T.TRACEFS, 'events', 'sched', 'sched_switch', 'format')
    format_text = T.read_text(fmt_path)
    rules = prev_state_rules(format_text)
    log(f'prev_state rules from print fmt: mask {rules[0]:#x}, preempt bit {rules[2]:#x}, flags {rules[1]}')

    tpd = ctx.tpd()
    stream = tpd.stream('-e', EVENT, '--print')
    # sched_switch happens all the time on a live machine: the first record proves the stream live.
    stream.wait_for(lambda: stream.nlines > 0, 10, 'a first sched_switch record')

    gen = ctx.gen('GEN_PINGPONG', '--count', ROUND_TRIPS, '--cpu', 0)
    pids = set(gen.pids())
    check(len(pids) == 2, f'ping-pong pids {pids}')
    log(f'ping-pong pids {sorted(pids)}')
    # Their names, for records the kernel's text names '<...>': its table of saved command lines
    # (128 entries by default, machine-wide) lost them by the time the text was read, while tpd
    # still knew them. Then tpd's must be the process's own.
    names = {pid: T.read_text(f'/proc/{pid}/comm').strip() for pid in pids}

    ref = ctx.make_instance('-ref')
    T.write_text(os.path.join(ref, 'trace_clock'), 'boot')
    # Two CPUs' worth of 2 x ROUND_TRIPS records must fit without overwriting.
    T.write_text(os.path.join(ref, 'buffer_size_kb'), '8192')
    flt = ' || '.join(f'{f} == {p}' for p in sorted(pids) for f in ('prev_pid', 'next_pid'))
    T.write_text(os.path.join(ref, 'events', 'sched', 'sched_switch', 'filter'), flt)
    T.write_text(os.path.join(ref, 'events', 'sched', 'sched_switch', 'enable'), '1')
    # Both recorders are on from here: compare only records from t0 on.
    t0 = T.boottime_ns()

    gen.go()
    gen.wait_done(timeout=60)     # the child is reaped and the parent has exited
    t1 = T.boottime_ns()
    T.write_text(os.path.join(ref, 'tracing_on'), '0')

    reference = [r for r in read_reference(ref)
                 if t0 <= r['ts'] <= t1 and (r['fields']['prev_pid'] in pids or r['fields']['next_pid'] in pids)]
    log(f'reference instance: {len(reference)} records of the ping-pong pids')
    check(len(reference) >= 2 * ROUND_TRIPS,
          f'only {len(reference)} reference records for {ROUND_TRIPS} round trips: the workload did not run as meant')

    def relevant(recs):
        return [r for r in recs if 'lost' not in r and t0 <= r['ts'] <= t1 and
                (r['fields'].get('prev_pid') in pids or r['fields'].get('next_pid') in pids)]

    # Drain: until tpd delivered as many of the pids' records as the kernel holds, then a little
    # longer, so that extra or duplicated records would show up too.
    seen = count = 0
    deadline = time.monotonic() + 30
    while count < len(reference) and time.monotonic() < deadline:
        stream.poll()
        count += len(relevant(T.parse_record(line) for line in stream.lines[seen:]))
        seen = len(stream.lines)
        time.sleep(0.05)
    time.sleep(0.5)
    stream.stop()

    records = stream.records()
    lost = [r for r in records if 'lost' in r]
    check(not lost, f'tpd reported lost records, the comparison would be meaningless: {lost[:3]}')
    mine = relevant(records)
    log(f'tpd: {len(records)} sched_switch records, {len(mine)} of the ping-pong pids')

    # Shape: exactly the format's non-common fields, in format order.
    for r in mine:
        check(r['event'] == EVENT, f'unexpected event in an -e {EVENT} stream: {r}')
        check(list(r['fields']) == FIELDS, f'fields {list(r["fields"])}, expected {FIELDS}')
        check('print' in r, f'--print stream record without "print": {r}')

    # Per CPU, in order: tpd keeps each CPU's order (docs/design.md §3); the kernel's trace file merges CPUs
    # by time but keeps each CPU's own order too.
    def per_cpu(recs):
        out = {}
        for r in recs:
            out.setdefault(r['cpu'], []).append(r)
        return out

    ref_cpu, mine_cpu = per_cpu(reference), per_cpu(mine)
    check(sorted(ref_cpu) == sorted(mine_cpu),
          f'records on CPUs {sorted(mine_cpu)} in tpd but {sorted(ref_cpu)} in the kernel')
    mismatches = []
    skews = []
    for cpu in sorted(ref_cpu):
        a, b = ref_cpu[cpu], mine_cpu[cpu]
        if len(a) != len(b):
            mismatches.append(f'CPU {cpu}: kernel has {len(a)} records, tpd {len(b)}')
        for i, (k, t) in enumerate(zip(a, b)):
            diffs = []
            if isinstance(t['ts'], int):
                skews.append(abs(t['ts'] - k['ts']))
                if i and t['ts'] < b[i - 1]['ts']:
                    diffs.append(f'ts {t["ts"]} before the previous record\'s {b[i - 1]["ts"]} on the same CPU')
            if not isinstance(t['ts'], int) or abs(t['ts'] - k['ts']) > TS_SKEW_MAX_NS:
                diffs.append(f'ts {t["ts"]} != {k["ts"]} (more than {TS_SKEW_MAX_NS} ns apart)')
            if t['pid'] != k['pid']:
                diffs.append(f'pid {t["pid"]} != {k["pid"]}')
            for name in FIELDS:
                if t['fields'][name] != k['fields'][name]:
                    diffs.append(f'{name} {t["fields"][name]!r} != {k["fields"][name]!r}')
            letters = state_letters(t['fields']['prev_state'], rules) if isinstance(t['fields']['prev_state'], int) else None
            if letters != k['letters']:
                diffs.append(f'prev_state {t["fields"]["prev_state"]!r} maps to {letters!r}, kernel prints {k["letters"]!r}')
            if t.get('print') != k['print']:
                diffs.append(f'print {t.get("print")!r} != kernel {k["print"]!r}')
            if t['pid'] in pids and 'comm' in t:
                want = names[t['pid']] if k['comm'] == '<...>' else k['comm']
                if t['comm'] != want:
                    diffs.append(f'comm {t["comm"]!r} != kernel saved comm {k["comm"]!r} (the process\'s: '
                                 f'{names[t["pid"]]!r})')
            if diffs:
                mismatches.append(f'CPU {cpu} record {i} (ts {k["ts"]}): ' + '; '.join(diffs))
        if len(mismatches) > 10:
            break
    skews.sort()
    median = skews[len(skews) // 2] if skews else 0
    if not mismatches and median > TS_SKEW_MEDIAN_MAX_NS:
        mismatches.append(f'median ts difference {median} ns > {TS_SKEW_MEDIAN_MAX_NS} ns: not the same clock?')
    if mismatches:
        fail(f'{len(mismatches)}+ differences between tpd and the kernel (tpd value != kernel value):\n  '
             + '\n  '.join(mismatches[:10]))
    states = sorted({k['letters'] for k in reference})
    log(f'all {len(reference)} records equal; ts apart by median {median} ns, max {skews[-1]} ns; '
        f'prev_state forms seen: {states}')

    tpd.stop()


if __name__ == '__main__':
    T.run(main)
