#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""`tpctl top` in a real terminal (tmux), its lines when stdout is a pipe, and GetCounters' counts.

Load: generator A calls getppid paced at RATE/s; a burst of BURST trace_marker writes
(ftrace:print) right after top started; alarmtimer:alarmtimer_fired is enabled with a filter no
record passes (an enabled, silent event whose name sorts first). So the three orders differ:
  rate  (r): getppid, print, alarmtimer
  total (t): print, getppid, alarmtimer   (while A's total is below BURST)
  name  (n): alarmtimer, print, getppid
  lost  (l): no stream loses anything: ties go by total, as for t
Then:
- the screen: rows parsed from `tmux capture-pane -p`; the median rate of getppid and of A's process
  row over five refreshes is within 15 % of RATE (measured again, up to three times, when a loaded
  machine held the generator back); each key re-sorts; a smaller window gets the table cut to its
  size; `q` exits with status 0;
- a pipe: `tpctl top -n 3 -d 1` prints three blocks of key=value lines, then exits 0; the rates
  are right, every event's processes and "other" sum to its total;
- exact counts are what tpd read: a record the kernel overwrote first (a slow tpd) is an overrun;
- exact counts: generators B (no stream at all: pages are walked, not decoded) and C (with a stream
  of another event: records decoded) of N calls each are counted exactly N, under their own pid;
- a stopped stream's losses are counted under the event and the process whose records it lost,
  exactly as many as GetStatus counts;
- when tpd stops, top leaves the screen, prints why and exits with 69;
- counting stops with the last connection that asked: a new connection's first reply is all zeros,
  but not while another counting connection is open.
"""

import os
import re
import shutil
import signal
import statistics
import subprocess
import time

import tpdtest as T
from tpdtest import check, fail, log

GETPPID = 'syscalls:sys_enter_getppid'
PRINT = 'ftrace:print'
SILENT = 'alarmtimer:alarmtimer_fired'
RATE = 2000
BURST = 100_000
N = 5000
FLOOD = 300_000
TOLERANCE = 0.15

ROW = re.compile(r'^\s*(\S+)\s+(\d+)\s+(\d+)\s{2}(\S+)\s*$')
PROC_ROW = re.compile(r'^\s*(\S+)\s+(\d+)\s+(\d+)\s{4}\s*(\d+|-)\s+(.*?)\s*$')


class Tmux:
    def __init__(self, ctx, command, width=120, height=40):
        self.server = f'tpdtest-top-{os.getpid()}-{ctx.rand}'
        self.base = ['tmux', '-L', self.server, '-f', '/dev/null']
        subprocess.run([*self.base, 'new-session', '-d', '-s', 'top', '-x', str(width), '-y', str(height),
                        command], check=True, timeout=10)

    def capture(self):
        r = subprocess.run([*self.base, 'capture-pane', '-p', '-t', 'top'], capture_output=True, text=True,
                           timeout=10)
        return r.stdout if r.returncode == 0 else None

    def keys(self, *keys):
        subprocess.run([*self.base, 'send-keys', '-t', 'top', *keys], check=True, timeout=10)

    def resize(self, width, height):
        subprocess.run([*self.base, 'resize-window', '-t', 'top', '-x', str(width), '-y', str(height)],
                       check=True, timeout=10)

    def close(self):
        subprocess.run([*self.base, 'kill-server'], capture_output=True, timeout=10)


def parse_screen(text):
    """(sort key, [(name, rate, total, lost, [(pid, comm, rate, total, lost)])]) or None mid-draw."""
    if not text:
        return None
    lines = text.splitlines()
    sort = None
    for i, line in enumerate(lines):
        m = re.match(r'^Sort: (\w+)', line)
        if m:
            sort = m.group(1)
        if 'RATE/s' in line and 'EVENT' in line:
            break
    else:
        return None
    events = []
    for line in lines[i + 1:]:
        if not line.strip():
            continue
        m = ROW.match(line)
        if m and ':' in m.group(4):
            rate = None if m.group(1) == '-' else float(m.group(1))
            events.append((m.group(4), rate, int(m.group(2)), int(m.group(3)), []))
            continue
        m = PROC_ROW.match(line)
        check(m and events, f'unexpected row on the screen: {line!r}\n{text}')
        rate = None if m.group(1) == '-' else float(m.group(1))
        events[-1][4].append((m.group(4), m.group(5), rate, int(m.group(2)), int(m.group(3))))
    return sort, events


def wait_screen(tmux, pred, timeout, what):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        text = tmux.capture()
        parsed = parse_screen(text)
        if parsed and pred(parsed):
            return parsed
        last = text
        time.sleep(0.1)
    fail(f'top: {what} not shown within {timeout} s; screen:\n{last}')


def within(rate, want=RATE):
    return rate is not None and abs(rate - want) <= TOLERANCE * want


def counters(v):
    reply = v.call('io.tpd.tracing.GetCounters')
    check('error' not in reply, f'GetCounters failed: {reply}')
    return reply['parameters']


def event_of(params, name):
    for e in params['events']:
        if e.get('name') == name:
            return e
    return None


def process_records(params, name, pid):
    e = event_of(params, name)
    for p in (e or {}).get('processes', []):
        if p['pid'] == pid:
            return p['records']
    return 0


def check_sums(e, where):
    procs = sum(p['total'] for p in e['processes'])
    check(procs + e['other'] == e['total'],
          f'{where}: processes ({procs}) and other ({e["other"]}) do not sum to the total {e["total"]}: {e}')


def parse_lines(text):
    """Blocks of `tpctl top` lines: [{'top': {...}, 'events': {name: {..., 'processes': [...]}}}]."""
    blocks, block = [], None
    for line in text.splitlines():
        if not line:
            check(block is not None, f'an empty line outside a block:\n{text}')
            blocks.append(block)
            block = None
            continue
        kind, *pairs = line.split(' ')
        fields = dict(p.split('=', 1) for p in pairs)
        if kind == 'top':
            check(block is None, f'"top" line inside a block:\n{text}')
            block = {'top': fields, 'events': {}}
        elif kind == 'event':
            check(block is not None, f'"event" line outside a block: {line!r}')
            if fields['name'] == 'other':
                continue
            block['events'][fields['name']] = {'rate': float(fields['rate']), 'total': int(fields['total']),
                                               'lost': int(fields['lost']), 'processes': [], 'other': 0}
        elif kind == 'process':
            e = block['events'][fields['name']]
            if fields['pid'] == 'other':
                e['other'] = int(fields['total'])
            else:
                e['processes'].append({'pid': int(fields['pid']), 'comm': fields['comm'],
                                       'rate': float(fields['rate']), 'total': int(fields['total'])})
        else:
            fail(f'unknown line kind {kind!r}: {line!r}')
    check(block is None, f'the last block has no empty line after it:\n{text}')
    return blocks


def main(ctx):
    if not shutil.which('tmux'):
        raise T.TestSkip('tmux is not installed (Debian package tmux)')
    tpctl = T.env_program('TPCTL')
    tpd = ctx.tpd()
    cpus = T.online_cpus()
    gen_a = ctx.gen('GEN_GETPPID', '--count', RATE * 120, '--rate', RATE, '--cpu', cpus[0])
    gen_b = ctx.gen('GEN_GETPPID', '--count', N, '--cpu', cpus[-1])
    gen_c = ctx.gen('GEN_GETPPID', '--count', N, '--cpu', cpus[-1])
    gen_d = ctx.gen('GEN_GETPPID', '--count', FLOOD, '--cpu', cpus[0])
    pid_a, = gen_a.pids()
    pid_b, = gen_b.pids()
    pid_c, = gen_c.pids()
    pid_d, = gen_d.pids()
    tpd.tpctl_ok('enable', GETPPID, '--filter', f'common_pid == {pid_a} || common_pid == {pid_b} || '
                 f'common_pid == {pid_c} || common_pid == {pid_d}')
    tpd.tpctl_ok('enable', SILENT, '--filter', 'common_pid < 0')

    # --- counting is off until asked: the first reply of a connection counts from its call.
    with tpd.varlink() as v:
        first = counters(v)
        check(all(e['records'] == 0 and e['lost'] == 0 for e in first['events']),
              f'the first GetCounters reply is not all zeros: {first}')
        names = {e.get('name') for e in first['events']}
        check({GETPPID, SILENT} <= names, f'enabled events missing from GetCounters: {names}')

        # --- exact counts, no stream at all: B's N calls, every one under B's pid.
        gen_b.go()
        gen_b.wait_done(timeout=60)
        deadline = time.monotonic() + 10 * T.SLOWDOWN
        while process_records(counters(v), GETPPID, pid_b) < N and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.3)  # three flush intervals: nothing more may come
        got = counters(v)
        check(process_records(got, GETPPID, pid_b) == N and event_of(got, GETPPID)['records'] == N,
              f'without a stream: {process_records(got, GETPPID, pid_b)} records of B counted, '
              f'{event_of(got, GETPPID)["records"]} of getppid, expected {N}: {got}')
        log(f'no stream: {N} of {N} records of B counted')

        # --- the same with a stream of another event: the records are decoded, then counted.
        stream = tpd.stream('-e', PRINT)
        T.confirm_live([stream], lambda: tpd.marker('probe'))
        before = event_of(counters(v), GETPPID)['records']
        gen_c.go()
        gen_c.wait_done(timeout=60)
        deadline = time.monotonic() + 10 * T.SLOWDOWN
        while process_records(counters(v), GETPPID, pid_c) < N and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.3)
        got = counters(v)
        check(process_records(got, GETPPID, pid_c) == N and event_of(got, GETPPID)['records'] == before + N,
              f'with a stream: {process_records(got, GETPPID, pid_c)} records of C counted, expected {N}: {got}')
        stream.stop()
        log(f'with a stream: {N} of {N} records of C counted')

        # --- losses by event: a stopped stream's queue fills up; every record it loses is D's, and
        # counted under D's row exactly as GetStatus counts the stream's losses.
        lost0 = tpd.status()['lost']['client']
        overrun0 = counters(v)['overrun']
        # Over the socket: tpd counts the losses of the queues it holds; a shared-memory stream's
        # reader counts its own (its lost lines), which tpd cannot split by event.
        stalled = tpd.stream('--transport=socket', '-e', GETPPID)
        probes = T.confirm_live([stalled], gen_d.probe)
        stalled.signal(signal.SIGSTOP)

        def d_accounted():
            # What tpd read of D's records, and what the kernel overwrote before it could (a slow
            # tpd: a sanitizer build on a loaded machine); nothing else writes meanwhile.
            got = counters(v)
            return got, process_records(got, GETPPID, pid_d) + got['overrun'] - overrun0
        try:
            gen_d.go()
            gen_d.wait_done(timeout=60)
            deadline = time.monotonic() + 10 * T.SLOWDOWN
            while d_accounted()[1] < FLOOD + probes and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(0.3)
            got, accounted = d_accounted()
            lost = tpd.status()['lost']['client'] - lost0
        finally:
            stalled.signal(signal.SIGCONT)
        stalled.kill()  # its backlog is not the point: it may end mid-line
        e = event_of(got, GETPPID)
        d = [p for p in e['processes'] if p['pid'] == pid_d]
        check(d and accounted == FLOOD + probes,
              f'D wrote {FLOOD} + {probes} probe records; counted {d}, overrun {got["overrun"] - overrun0}')
        check(lost > 0, f'the stopped stream lost nothing of {FLOOD} records: the test proves nothing')
        check(e['lost'] == lost and d[0]['lost'] == lost,
              f'the stream lost {lost} records (GetStatus); GetCounters says {e["lost"]} for the event, '
              f'{d[0]["lost"]} for D')
        log(f'a stopped stream lost {lost} of D\'s {FLOOD} records ({got["overrun"] - overrun0} overrun); '
            f'counted as lost under D')

        # While this connection counts, a new one sees the running totals.
        with tpd.varlink() as w:
            check(event_of(counters(w), GETPPID)['records'] >= 2 * N + d[0]['records'],
                  'a second connection did not see the running counts')

    # Both connections closed: counting stopped, the next one starts from zero.
    deadline = time.monotonic() + 5
    while True:
        with tpd.varlink() as v:
            again = event_of(counters(v), GETPPID)
        if again['records'] == 0 or time.monotonic() > deadline:
            break
        time.sleep(0.05)  # tpd may not have seen the close yet
    check(again['records'] == 0, f'counting went on after every counting connection closed: {again}')

    # --- the screen.
    status_file = os.path.join(ctx.tmpdir, 'top-status')
    tmux = Tmux(ctx, f'{tpctl} --socket {tpd.socket} top; echo $? > {status_file}')
    try:
        wait_screen(tmux, lambda p: {e[0] for e in p[1]} >= {GETPPID, PRINT, SILENT}, 10 * T.SLOWDOWN,
                    'the three events')
        marker = ctx.gen('GEN_MARKER', '--instance', tpd.instance, '--count', BURST, 'burst')
        marker.readline(what='its pid')
        marker.wait_done(timeout=60)
        gen_a.go()

        # The rate of A, on its event's row and on its process row: the median of five refreshes. A
        # generator held off its CPU for a while (a loaded machine) catches up in a burst, so a
        # measurement that misses is repeated, up to three times; a wrong rate misses every time.
        time.sleep(2.5)
        for attempt in range(1, 4):
            event_rates, proc_rates = [], []
            seen = None
            for _ in range(5):
                sort, events = wait_screen(tmux, lambda p: p[1] and p[1][0][0] == GETPPID, 5 * T.SLOWDOWN,
                                           'getppid first by rate')
                check(sort == 'rate', f'the screen does not say it sorts by rate: {sort!r}')
                name, rate, total, lost, procs = events[0]
                event_rates.append(rate)
                rows = [p for p in procs if p[0] == str(pid_a)]
                check(rows, f'no row of process {pid_a} under {GETPPID}: {events[0]}')
                check(rows[0][1] == 'gen-getppid', f'process {pid_a} shows as {rows[0][1]!r}')
                proc_rates.append(rows[0][2])
                seen = events
                time.sleep(1.0)
            check(all(r is not None for r in event_rates + proc_rates), f'rates not shown: {event_rates}')
            er, pr = statistics.median(event_rates), statistics.median(proc_rates)
            log(f'screen, attempt {attempt}: getppid {event_rates} /s (median {er}), process {pid_a} '
                f'{proc_rates} (median {pr}); paced {RATE}/s')
            if within(er) and within(pr):
                break
        check(within(er), f'getppid shown at {er}/s (median of {event_rates}), paced at {RATE}/s')
        check(within(pr), f'process {pid_a} shown at {pr}/s (median of {proc_rates}), paced at {RATE}/s')
        order = [e[0] for e in seen]
        check(order[:3] == [GETPPID, PRINT, SILENT], f'by rate: {order}')
        prints = [e for e in seen if e[0] == PRINT][0]
        check(prints[2] >= BURST, f'{PRINT} total {prints[2]}, expected at least the burst of {BURST}')

        expected = {
            't': ('total', [PRINT, GETPPID, SILENT]),
            'n': ('name', [SILENT, PRINT, GETPPID]),
            'l': ('lost', [PRINT, GETPPID, SILENT]),
            'r': ('rate', [GETPPID, PRINT, SILENT]),
        }
        for key, (sort, want) in expected.items():
            tmux.keys(key)
            # The key redraws at once; the order by rate may also wait for the next refresh, should
            # the generator have been held off the CPU for a whole second.
            _, events = wait_screen(tmux, lambda p: p[0] == sort and [e[0] for e in p[1] if e[0] in want] == want,
                                    (3 if key == 'r' else 1) * T.SLOWDOWN, f'"Sort: {sort}" and {want} after {key!r}')
            log(f'key {key!r}: sorted by {sort}: {[e[0] for e in events]}')

        # A smaller window: the table is redrawn to its size, lines cut, not wrapped.
        tmux.resize(72, 12)
        text = None
        deadline = time.monotonic() + 3 * T.SLOWDOWN
        while time.monotonic() < deadline:
            text = tmux.capture() or ''
            lines = text.splitlines()
            if (len(lines) == 12 and lines[0].startswith('tpctl top - ') and len(lines[0]) == 72 and
                    parse_screen(text) and parse_screen(text)[1][:1] and parse_screen(text)[1][0][0] == GETPPID):
                break
            time.sleep(0.1)
        else:
            fail(f'after a resize to 72x12 the screen is:\n{text}')
        log('resized to 72x12: redrawn to fit')

        tmux.keys('q')
        deadline = time.monotonic() + 5 * T.SLOWDOWN
        while not os.path.exists(status_file) and time.monotonic() < deadline:
            time.sleep(0.05)
        check(os.path.exists(status_file), 'tpctl top did not exit after q')
        time.sleep(0.1)
        with open(status_file) as f:
            status = f.read().strip()
        check(status == '0', f'tpctl top exited with {status!r} after q')
    finally:
        tmux.close()

    # --- a pipe: three blocks of lines, then exit 0 (the rate measured again on a miss, as above).
    for attempt in range(1, 4):
        r = tpd.tpctl('top', '-n', '3', '-d', '1', timeout=30 * T.SLOWDOWN)
        check(r.returncode == 0, f'tpctl top -n 3 exited with {r.returncode}: {r.stderr!r}')
        blocks = parse_lines(r.stdout)
        check(len(blocks) == 3, f'{len(blocks)} blocks for -n 3:\n{r.stdout}')
        rates = []
        for i, b in enumerate(blocks):
            check(abs(float(b['top']['interval']) - 1.0) < 0.25 * T.SLOWDOWN, f'block {i}: interval {b["top"]}')
            e = b['events'].get(GETPPID)
            check(e is not None, f'block {i}: no {GETPPID}: {b}')
            check_sums(e, f'block {i} {GETPPID}')
            check(int(b['top']['total']) == sum(x['total'] for x in b['events'].values()),
                  f'block {i}: top total is not the sum of the events: {b}')
            check(any(p['pid'] == pid_a and p['comm'] == 'gen-getppid' for p in e['processes']),
                  f'block {i}: no process line of {pid_a}: {e}')
            rates.append(e['rate'])
            if i > 0:
                check(e['total'] >= blocks[i - 1]['events'][GETPPID]['total'], 'totals went down')
        check(SILENT in blocks[-1]['events'] and blocks[-1]['events'][SILENT]['total'] == 0,
              f'the silent event is missing or not silent: {blocks[-1]}')
        log(f'lines, attempt {attempt}: getppid at {rates} /s')
        if within(statistics.median(rates)):
            break
    check(within(statistics.median(rates)), f'lines: getppid at {rates} /s, paced at {RATE}/s')

    # --- tpd goes away under the screen: top ends with 69 and its message is shown after the screen.
    status_file = os.path.join(ctx.tmpdir, 'top-status-gone')
    tmux = Tmux(ctx, f'{tpctl} --socket {tpd.socket} top; echo $? > {status_file}; sleep 60')
    try:
        wait_screen(tmux, lambda p: any(e[0] == GETPPID for e in p[1]), 10 * T.SLOWDOWN, 'the screen')
        gen_a.kill()
        tpd.stop()
        deadline = time.monotonic() + 5 * T.SLOWDOWN
        while not os.path.exists(status_file) and time.monotonic() < deadline:
            time.sleep(0.05)
        check(os.path.exists(status_file), 'tpctl top did not exit when tpd stopped')
        time.sleep(0.1)
        with open(status_file) as f:
            status = f.read().strip()
        check(status == '69', f'tpctl top exited with {status!r} when tpd stopped, expected 69')
        text = tmux.capture() or ''
        # Which one depends on when tpd closed: before the next call, or while it waited for it.
        check(('tpctl: cannot send to tpd' in text or 'tpctl: tpd closed the connection' in text or
               'tpctl: cannot read from tpd' in text) and 'RATE/s' not in text,
              f'after tpd stopped, the terminal shows:\n{text}')
        log('tpd stopped: top exited with 69, its message on the normal screen')
    finally:
        tmux.close()


if __name__ == '__main__':
    T.run(main)
