#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Readable values: `tpctl stream --symbolic` adds "sym", and its texts are the kernel's own.

Each event is recorded twice, by tpd (a `--symbolic` stream) and by a second tracefs instance the
test drives by hand; the reference instance's `trace` file is read as text (what the kernel prints)
and with options/raw (pid, cpu, ts in ns), zipped record by record.

  - sched:sched_switch prev_state (a __print_flags inside a ternary, then a "+" from another
    argument): a pipe ping-pong of two known pids, the kernel filter on them; per CPU and in order,
    tpd's "sym" equals the kernel's prev_state text for every record, and "fields" keeps the number.
  - kmem:mm_page_alloc gfp_flags (__print_flags inside a ternary) and raw_syscalls ids and returns:
    a child process that allocates memory and makes failing system calls, kernel filter on its pid
    (tpd: a stream filter); per CPU and in order, the same records; gfp_flags as the kernel prints
    it; raw_syscalls ids as the kernel names them in its syscalls:sys_enter_NAME events (recorded
    by the reference instance for the same pid), negative returns as the errno names of errno(3).
  - irq:softirq_entry vec (__print_symbolic): whatever softirqs run; every tpd record in the
    window matches a reference record of the same CPU and vec within 1 ms, and "sym" equals the
    kernel's action text.
  - A stream without --symbolic has no "sym"; a tpd with Symbolic=yes (--symbolic=yes) gives
    "sym" to a stream that does not ask, shows it in GetStatus settings, and "symbolic":false in
    the call turns it off.
"""

import errno
import json
import os
import re
import subprocess
import sys
import time

import tpdtest as T
from tpdtest import check, fail, log

ROUND_TRIPS = 3000
TEXT_RE = re.compile(r'^\s*(?P<comm>.*)-(?P<pid>\d+)\s+\[(?P<cpu>\d+)\]\s+(?P<flags>\S+\s+)?'
                     r'(?P<sec>\d+)\.(?P<usec>\d{6}): (?P<rest>.*)$')
RAW_RE = re.compile(r'^(\d+) (\d+) (\d+) type: (\d+)')

CHILD = r'''
import os, sys
sys.stdout.write('ready\n')
sys.stdout.flush()
sys.stdin.readline()
for i in range(200):
    for call in (lambda: os.stat('/nonexistent/symbolic'), lambda: os.read(987, 1),
                 lambda: os.open('/etc/passwd/x', os.O_RDONLY)):
        try:
            call()
        except OSError:
            pass
    os.getppid()
    b = bytearray(256 * 1024)
    for k in range(0, len(b), 4096):
        b[k] = 1
    del b
sys.stdout.write('done\n')
sys.stdout.flush()
'''


def event_ids():
    """Event names by id, from tracefs (the same ids in every instance)."""
    ids = {}
    for system in ('sched', 'raw_syscalls', 'kmem', 'irq', 'syscalls'):
        d = os.path.join(T.TRACEFS, 'events', system)
        for name in os.listdir(d):
            if os.path.exists(os.path.join(d, name, 'id')):
                ids[int(T.read_text(os.path.join(d, name, 'id')))] = name
    return ids


def read_reference(inst, ids):
    """The reference instance's records: text and raw reads zipped. "body" is the text after
    "event: " (a syscalls:* event prints its own shape, which is not needed here)."""
    def lines(option=None):
        if option:
            T.write_text(os.path.join(inst, 'options', option), '1')
        try:
            return [l for l in T.read_text(os.path.join(inst, 'trace')).splitlines() if l and not l.startswith('#')]
        finally:
            if option:
                T.write_text(os.path.join(inst, 'options', option), '0')

    header = T.read_text(os.path.join(inst, 'trace')).splitlines()[:4]
    text, raw = lines(), lines('raw')
    check(len(text) == len(raw), f'reference reads differ in length: text {len(text)}, raw {len(raw)}')
    m = re.search(r'entries-in-buffer/entries-written: (\d+)/(\d+)', '\n'.join(header))
    check(m and m.group(1) == m.group(2), f'reference instance lost records, cannot compare: {header}')
    out = []
    for t, r in zip(text, raw):
        mt, mr = TEXT_RE.match(t), RAW_RE.match(r)
        check(mt and mr, f'cannot parse reference lines:\n  {t}\n  {r}')
        pid, cpu, ts, event = int(mr[1]), int(mr[2]), int(mr[3]), ids.get(int(mr[4]), mr[4])
        check(int(mt['pid']) == pid and int(mt['cpu']) == cpu, f'reference reads out of step:\n  {t}\n  {r}')
        body = mt['rest'][len(event) + 2:] if mt['rest'].startswith(event + ': ') else mt['rest']
        out.append({'ts': ts, 'cpu': cpu, 'pid': pid, 'event': event, 'body': body})
    return out


def per_cpu(recs):
    out = {}
    for r in recs:
        out.setdefault(r['cpu'], []).append(r)
    return out


def zip_per_cpu(what, ref, mine, compare):
    """Per CPU and in order, the same records; compare(kernel, tpd) returns a list of differences."""
    rc, mc = per_cpu(ref), per_cpu(mine)
    check(sorted(rc) == sorted(mc), f'{what}: records on CPUs {sorted(mc)} in tpd, {sorted(rc)} in the kernel')
    diffs = []
    for cpu in sorted(rc):
        if len(rc[cpu]) != len(mc[cpu]):
            diffs.append(f'CPU {cpu}: kernel has {len(rc[cpu])} records, tpd {len(mc[cpu])}')
            continue
        for i, (k, t) in enumerate(zip(rc[cpu], mc[cpu])):
            d = compare(k, t)
            if abs(k['ts'] - t['ts']) > 5_000_000:
                d.append(f'ts {t["ts"]} vs kernel {k["ts"]}: not the same record')
            if d:
                diffs.append(f'CPU {cpu} record {i}: ' + '; '.join(d) + f'\n    kernel: {k["body"]}\n    tpd: {t}')
    if diffs:
        fail(f'{what}: {len(diffs)} differences between tpd and the kernel:\n  ' + '\n  '.join(diffs[:8]))


def wait_streams(tpd, n, timeout=10.0):
    """Until tpd serves n streams (a stream with a pid filter has no record to prove it live)."""
    deadline = time.monotonic() + timeout
    while tpd.status().get('streams', 0) < n:
        check(time.monotonic() < deadline, f'tpd does not serve {n} streams within {timeout} s')
        time.sleep(0.02)


def drain(stream, count, what):
    if not stream.drain(lambda: stream.nlines >= count, timeout=30):
        fail(f'{what}: tpd delivered {stream.nlines} records, the kernel has {count}')


def check_sched_switch(ctx, tpd):
    gen = ctx.gen('GEN_PINGPONG', '--count', ROUND_TRIPS, '--cpu', 0)
    pids = set(gen.pids())
    flt = ' || '.join(f'{f} == {p}' for p in sorted(pids) for f in ('prev_pid', 'next_pid'))
    # The same filter in tpd keeps the streams to the records compared, on a busy machine too.
    streams = tpd.status().get('streams', 0)
    stream = tpd.stream('-e', 'sched:sched_switch', '-f', flt, '--symbolic')
    plain = tpd.stream('-e', 'sched:sched_switch', '-f', flt)
    wait_streams(tpd, streams + 2)

    ref = ctx.make_instance('-ref')
    T.write_text(os.path.join(ref, 'trace_clock'), 'boot')
    T.write_text(os.path.join(ref, 'buffer_size_kb'), '8192')
    T.write_text(os.path.join(ref, 'events', 'sched', 'sched_switch', 'filter'), flt)
    T.write_text(os.path.join(ref, 'events', 'sched', 'sched_switch', 'enable'), '1')
    t0 = T.boottime_ns()
    gen.go()
    gen.wait_done(timeout=60)
    t1 = T.boottime_ns()
    T.write_text(os.path.join(ref, 'tracing_on'), '0')

    def relevant(recs):
        return [r for r in recs if 'lost' not in r and t0 <= r['ts'] <= t1 and
                (r['fields']['prev_pid'] in pids or r['fields']['next_pid'] in pids)]

    reference = [r for r in read_reference(ref, event_ids()) if t0 <= r['ts'] <= t1]
    check(len(reference) >= 2 * ROUND_TRIPS, f'only {len(reference)} reference records of {ROUND_TRIPS} round trips')
    for s in (stream, plain):
        seen = count = 0

        def done():
            nonlocal seen, count
            count += len(relevant(T.parse_record(line) for line in s.lines[seen:]))
            seen = len(s.lines)
            return count >= len(reference)

        s.drain(done, timeout=30)
        s.stop()
    mine, others = relevant(stream.records()), relevant(plain.records())
    check(not [r for r in stream.records() if 'lost' in r], 'tpd lost sched_switch records: cannot compare')
    check(all('sym' not in r for r in plain.records()), 'a stream without --symbolic has "sym"')

    def compare(k, t):
        m = re.search(r' prev_state=(\S+) ==> ', k['body'])
        d = []
        if not m:
            return [f'cannot read prev_state from {k["body"]!r}']
        if not isinstance(t['fields']['prev_state'], int):
            d.append(f'fields.prev_state {t["fields"]["prev_state"]!r} is not a number')
        if t.get('sym') != {'prev_state': m[1]}:
            d.append(f'sym {t.get("sym")!r}, kernel prints prev_state={m[1]}')
        return d

    zip_per_cpu('sched_switch', reference, mine, compare)
    check([r['fields'] for r in others] == [r['fields'] for r in mine],
          'the plain stream\'s fields differ from the --symbolic stream\'s')
    forms = sorted({r['sym']['prev_state'] for r in mine})
    log(f'sched_switch: {len(mine)} records, prev_state "sym" equal to the kernel\'s text; forms {forms}')


def check_syscalls_pages_softirqs(ctx, tpd):
    child = subprocess.Popen([sys.executable, '-c', CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True)
    try:
        pid = child.pid
        # From here until "go" the child waits in read(): nothing of it before both recorders run.
        check(child.stdout.readline() == 'ready\n', 'the child did not start')
        streams = tpd.status().get('streams', 0)
        flt = f'common_pid == {pid}'
        events = ['raw_syscalls:sys_enter', 'raw_syscalls:sys_exit', 'kmem:mm_page_alloc']
        # A kernel filter in tpd's instance too: system calls of the whole machine could
        # overrun its buffer while others build.
        tpd.tpctl_ok('enable', '-f', flt, *events)
        own = tpd.stream(*[a for e in events for a in ('-e', e)], '-f', flt, '--symbolic')
        soft = tpd.stream('-e', 'irq:softirq_entry', '--symbolic')
        wait_streams(tpd, streams + 2)

        ref = ctx.make_instance('-ref')
        T.write_text(os.path.join(ref, 'trace_clock'), 'boot')
        T.write_text(os.path.join(ref, 'buffer_size_kb'), '8192')
        for e in events:
            d = os.path.join(ref, 'events', *e.split(':'))
            T.write_text(os.path.join(d, 'filter'), flt)
            T.write_text(os.path.join(d, 'enable'), '1')
        # The kernel's own names of system calls: its syscalls:sys_enter_NAME events.
        T.write_text(os.path.join(ref, 'events', 'syscalls', 'filter'), flt)
        for name in os.listdir(os.path.join(ref, 'events', 'syscalls')):
            if name.startswith('sys_enter_'):
                T.write_text(os.path.join(ref, 'events', 'syscalls', name, 'enable'), '1')
        T.write_text(os.path.join(ref, 'events', 'irq', 'softirq_entry', 'enable'), '1')
        soft.wait_for(lambda: soft.nlines > 0, 10, 'a first softirq_entry record')
        t0 = T.boottime_ns()

        child.stdin.write('go\n')
        child.stdin.flush()
        check(child.stdout.readline() == 'done\n', 'the child did not finish its work')
        check(child.wait(30) == 0, 'the child failed')
        time.sleep(0.3)     # softirqs on every CPU in the window
        t1 = T.boottime_ns()
        T.write_text(os.path.join(ref, 'tracing_on'), '0')
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()

    reference = read_reference(ref, event_ids())
    kernel = [r for r in reference if r['pid'] == pid and r['event'] in ('sys_enter', 'sys_exit', 'mm_page_alloc')]
    names = {}
    for r in reference:
        if r['pid'] == pid and r['event'].startswith('sys_enter_'):
            m = re.match(r'^sys_enter_(\w+)', r['event'])
            names[m[1]] = True
    drain(own, len(kernel), 'raw_syscalls and mm_page_alloc of the child')
    own.stop()
    soft.stop()
    mine = [r for r in own.records() if 'lost' not in r]
    tpd.tpctl_ok('disable', *events)
    lost = [r for r in own.records() if 'lost' in r]
    check(not lost, f'tpd lost records of the child: cannot compare: {lost[:3]}')

    # The kernel's names by number: each syscalls:sys_enter_NAME record of the child follows its
    # raw_syscalls:sys_enter record on the same CPU ("NR 39 (...)").
    by_nr = {}
    last = {}
    for r in reference:
        if r['pid'] != pid:
            continue
        if r['event'] == 'sys_enter':
            last[r['cpu']] = int(re.match(r'^NR (\d+) ', r['body'])[1])
        elif r['event'].startswith('sys_enter_') and r['cpu'] in last:
            by_nr.setdefault(last.pop(r['cpu']), set()).add(r['event'][len('sys_enter_'):])
    ambiguous = {nr: n for nr, n in by_nr.items() if len(n) != 1}
    check(not ambiguous, f'the kernel named a system call number twice: {ambiguous}')
    by_nr = {nr: n.pop() for nr, n in by_nr.items()}
    check(len(by_nr) >= 4, f'too few system calls named by the kernel: {by_nr}')

    def compare(k, t):
        d = []
        event = t['event'].split(':')[1]
        if event != k['event']:
            return [f'event {event} != kernel {k["event"]}']
        sym = t.get('sym')
        if event == 'mm_page_alloc':
            m = re.search(r' gfp_flags=(\S+)$', k['body'])
            if not m or sym != {'gfp_flags': m[1]}:
                d.append(f'sym {sym!r}, kernel prints {m and m[1]!r}')
            return d
        m = re.match(r'^NR (-?\d+) (?:= (-?\d+)|\()', k['body'])
        nr, ret = int(m[1]), m[2] and int(m[2])
        if t['fields']['id'] != nr:
            d.append(f'id {t["fields"]["id"]} != kernel {nr}')
        want = {}
        if nr in by_nr:
            want['id'] = by_nr[nr]
        elif isinstance(sym, dict) and 'id' in sym:
            want['id'] = sym['id']      # a number the kernel named nowhere in this run
        if event == 'sys_exit':
            if t['fields']['ret'] != ret:
                d.append(f'ret {t["fields"]["ret"]} != kernel {ret}')
            if -4095 <= ret < 0:
                want['ret'] = errno.errorcode[-ret]
        if sym != want:
            d.append(f'sym {sym!r}, expected {want!r}')
        return d

    zip_per_cpu('raw_syscalls and mm_page_alloc', kernel, mine, compare)
    errs = sorted({r['sym']['ret'] for r in mine if 'ret' in r.get('sym', {})})
    calls = sorted({r['sym']['id'] for r in mine if 'id' in r.get('sym', {})})
    gfp = sorted({r['sym']['gfp_flags'] for r in mine if 'gfp_flags' in r.get('sym', {})})
    check({'ENOENT', 'EBADF', 'ENOTDIR'} <= set(errs), f'the child\'s errors are not all named: {errs}')
    check(gfp, 'no mm_page_alloc record of the child')
    log(f'raw_syscalls and mm_page_alloc: {len(mine)} records equal; calls {calls}; errnos {errs}; gfp {gfp}')

    # Softirqs: every tpd record well inside the window has its kernel twin nearby.
    ksoft = per_cpu([r for r in reference if r['event'] == 'softirq_entry'])
    compared = 0
    used = set()
    for t in soft.records():
        if 'lost' in t or not (t0 + 20_000_000 <= t['ts'] <= t1 - 20_000_000):
            continue
        vec = t['fields']['vec']
        cands = [(abs(k['ts'] - t['ts']), i) for i, k in enumerate(ksoft.get(t['cpu'], []))
                 if (t['cpu'], i) not in used and re.match(rf'^vec={vec} \[action=', k['body'])
                 and abs(k['ts'] - t['ts']) <= 1_000_000]
        check(cands, f'no kernel softirq_entry record near tpd\'s {t}')
        i = min(cands)[1]
        used.add((t['cpu'], i))
        action = re.match(r'^vec=\d+ \[action=(\w+)\]$', ksoft[t['cpu']][i]['body'])[1]
        check(t.get('sym') == {'vec': action}, f'softirq sym {t.get("sym")!r}, kernel prints action={action}: {t}')
        compared += 1
    check(compared >= 5, f'only {compared} softirq_entry records in the window')
    log(f'softirq_entry: {compared} records, vec "sym" equal to the kernel\'s action text')


def check_default(ctx):
    tpd = ctx.tpd(args=['--symbolic=yes'])
    settings = tpd.status().get('settings', {})
    check(settings.get('symbolic') in (True, 'yes'), f'GetStatus settings: symbolic is {settings.get("symbolic")!r}')
    on = tpd.stream('-e', 'ftrace:print')
    off = tpd.stream('-e', 'ftrace:print', '--symbolic=no')
    with tpd.varlink() as v:
        v.send('io.tpd.tracing.Stream', {'events': ['ftrace:print'], 'symbolic': False}, upgrade=True)
        reply = v.recv()
        check('error' not in reply, f'Stream with "symbolic":false failed: {reply}')
        T.confirm_live([on, off], lambda: tpd.marker('symbolic default'))
        tpd.marker('one more')
        on.wait_for(lambda: on.nlines >= 2, 10, 'two ftrace:print records')
        off.wait_for(lambda: off.nlines >= 2, 10, 'two ftrace:print records')
        data = v.buf
        deadline = time.monotonic() + 10
        while data.count(b'\n') < 2 and time.monotonic() < deadline:
            v.sock.settimeout(max(0.1, deadline - time.monotonic()))
            data += v.sock.recv(65536)
    on.stop()
    off.stop()
    check(all('sym' not in r for r in off.records()), 'Symbolic=yes: tpctl stream --symbolic=no still has "sym"')
    check(all('sym' in r for r in on.records()), 'Symbolic=yes: a stream that does not ask has no "sym"')
    lines = [json.loads(l) for l in data.split(b'\n') if l.strip()]
    check(lines and all('sym' not in r for r in lines), f'"symbolic":false still gives "sym": {lines[:2]}')
    log('Symbolic=yes is the default of streams, shown in GetStatus; "symbolic":false (--symbolic=no) '
        'overrides it')
    tpd.stop()


def main(ctx):
    tpd = ctx.tpd()
    check_sched_switch(ctx, tpd)
    check_syscalls_pages_softirqs(ctx, tpd)
    tpd.stop()
    check_default(ctx)


if __name__ == '__main__':
    T.run(main)
