#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""`tpctl record`: trace-cmd data files from tpd's raw pages, checked with Debian's trace-cmd.

1. Truth: a recording of getppid calls, a pipe ping-pong (sched_switch) and numbered trace_marker
   writes, selected by a per-recording filter on the workload's pids, while a second tracefs
   instance records the same events with the same filter as kernel filters. `trace-cmd report`
   reads the file with no warning; per CPU and in order its records equal the reference
   instance's `trace` text: comm, pid, event, and for sched_switch and print the whole text
   (syscall events print through the kernel's own syscall printer, which trace-cmd does not have,
   so for them comm, pid and count); timestamps within 5 ms (each instance stamps its own copy).
   Counts are exact: the file holds every getppid call and every marker, in order.
   Late names: two tasks run and exit while tpd is stopped (SIGSTOP), the second just before the
   recording ends: the file names both as the kernel's table does at the end, and each pid once;
   the same when the recording ends by itself at --size, its file within the size.
2. Overrun: tpd is stopped (SIGSTOP) during a storm into a small buffer, so the kernel overwrites
   records: `trace-cmd report` shows the losses as it does for its own files ("[... EVENTS
   DROPPED]"), and recorded + lost (tpctl's count from tpd's loss frames) equals what the kernel
   wrote.
3. Rotation: numbered markers (from one CPU: pages of different CPUs reach a file in their own
   order) into --rotate-size 1 --keep 3 files (dat and ndjson): at most 3
   files, each within the size, each read by trace-cmd, their records consecutive and in order up
   to the last one written.
4. A recording and two live streams at once, paced getppid calls: each gets every one.
5. File version 7 (compressed sections): trace-cmd reads it, every marker in it; on a terminal
   tpctl record shows a live status line on stderr.
6. Bad input and a slow recorder: Record without "upgrade", unknown events, invalid filters,
   unusable options and an output directory that cannot be written each get a clear error and
   leave nothing behind; a recorder stopped (SIGSTOP) through a storm loses records to its full
   queue, counted exactly (recorded + lost = written) and flagged in the file, and tpd's memory
   stays within its bound.
"""

import collections
import glob
import json
import os
import pty
import re
import signal
import subprocess
import time

import tpdtest as T
from tpdtest import check, fail, log

KERNEL_RE = re.compile(r'^\s*(?P<comm>.*)-(?P<pid>\d+)\s+\[(?P<cpu>\d+)\]\s+\S+\s+(?P<sec>\d+)\.(?P<usec>\d{6}): '
                       r'(?:(?P<event>\w+): ?(?P<body>.*)|(?P<syscall>sys_\w+)\(.*\))$')
RAW_RE = re.compile(r'^(\d+) (\d+) (\d+) type: (\d+)')
SUMMARY_RE = re.compile(r'tpctl: (\d+) records in (\d+) files?, (\d+) lost')
EVENTS = ['syscalls:sys_enter_getppid', 'sched:sched_switch', 'ftrace:print']
GETPPID_N = 20_000
ROUND_TRIPS = 2_000
MARKER_N = 2_000
TS_SKEW_MAX_NS = 5_000_000


class Recording(T.Process):
    def __init__(self, ctx, tpd, out, *args):
        self.out = out
        argv = [T.env_program('TPCTL'), '--socket', tpd.socket, 'record', '-o', out, *args]
        super().__init__(ctx, f'record-{len(ctx._processes)}', argv, stdout=subprocess.DEVNULL)
        self.args = args

    def wait_started(self, timeout=10.0):
        deadline = time.monotonic() + timeout
        d = os.path.dirname(self.out)
        while time.monotonic() < deadline:
            if glob.glob(os.path.join(d, '.tpctl-record-*')) or glob.glob(self.out.replace('.ndjson', '*.ndjson')):
                return
            check(self.running(), f'tpctl record exited with {self.proc.returncode}: {self.stderr_text()!r}')
            time.sleep(0.02)
        fail('tpctl record did not start')

    def stop(self, timeout=60.0):
        self.signal(signal.SIGINT)
        rc = self.wait(timeout)
        check(rc == 0, f'tpctl record {" ".join(self.args)} exited with {rc}: {self.stderr_text()!r}')
        m = SUMMARY_RE.search(self.stderr_text())
        check(m, f'no summary from tpctl record: {self.stderr_text()!r}')
        return int(m[1]), int(m[2]), int(m[3])


def reference_records(inst):
    text, raw = T.trace_lines(inst), T.trace_lines(inst, 'raw')
    check(len(text) == len(raw), f'reference reads differ: {len(text)} text, {len(raw)} raw')
    header = T.read_text(os.path.join(inst, 'trace')).splitlines()[:4]
    m = re.search(r'entries-in-buffer/entries-written: (\d+)/(\d+)', '\n'.join(header))
    check(m and m[1] == m[2], f'reference instance lost records: {header}')
    out = []
    for t, r in zip(text, raw):
        mt, mr = KERNEL_RE.match(t), RAW_RE.match(r)
        check(mt and mr, f'cannot parse reference lines:\n  {t}\n  {r}')
        # Syscall events print through the kernel's own printer: "sys_getppid()".
        event = mt['event'] or 'sys_enter_' + mt['syscall'][4:]
        out.append({'comm': mt['comm'], 'pid': int(mt['pid']), 'cpu': int(mt['cpu']), 'ts': int(mr[3]),
                    'event': event, 'body': (mt['body'] or '').strip()})
    return out


def per_cpu(records):
    out = {}
    for r in records:
        out.setdefault(r['cpu'], []).append(r)
    return out


def truth(ctx):
    log('--- truth: trace-cmd report of a recording equals the kernel\'s text')
    tpd = ctx.tpd()
    out = os.path.join(ctx.tmpdir, 'truth.dat')
    getppid = ctx.gen('GEN_GETPPID', '--count', GETPPID_N, '--cpu', 0)
    pingpong = ctx.gen('GEN_PINGPONG', '--count', ROUND_TRIPS, '--cpu', 1)
    marker = ctx.gen('GEN_MARKER', '--instance', tpd.instance, '--count', MARKER_N, '--seq', '--cpu', 1, '--wait',
                     'tpd-record')
    pids = getppid.pids() + pingpong.pids() + marker.pids()
    flt = ' || '.join(f'common_pid == {p}' for p in pids)

    ref = ctx.make_instance('-ref')
    T.write_text(os.path.join(ref, 'trace_clock'), 'boot')
    T.write_text(os.path.join(ref, 'buffer_size_kb'), '8192')
    for e in EVENTS[:2]:
        system, name = e.split(':')
        T.write_text(os.path.join(ref, 'events', system, name, 'filter'), flt)
        T.write_text(os.path.join(ref, 'events', system, name, 'enable'), '1')

    selection = [a for e in EVENTS for a in ('-e', e)] + ['--filter', flt]
    rec = Recording(ctx, tpd, out, *selection)
    live = tpd.stream(*selection)
    rec.wait_started()
    time.sleep(0.5)
    getppid.go()
    pingpong.go()
    marker.command('go')
    getppid.wait_done(60)
    pingpong.wait_done(60)
    marker.wait_done(60)
    T.write_text(os.path.join(ref, 'tracing_on'), '0')
    time.sleep(0.5)
    live.stop()
    n, files, lost = rec.stop()
    log(f'tpctl record: {n} records in {files} file, {lost} lost')
    check(files == 1 and lost == 0, f'expected 1 file and nothing lost, got {files} files, {lost} lost')

    records, dropped = T.trace_cmd_report(out)
    check(not dropped, f'trace-cmd reports dropped events: {dropped}')
    check(len(records) == n, f'trace-cmd report lists {len(records)} records, tpctl said {n}')
    mine = [r for r in records if r['pid'] in pids]
    check(len(mine) == len(records), f'records of other pids in a filtered recording: '
                                     f'{[r for r in records if r["pid"] not in pids][:3]}')
    calls = [r for r in mine if r['event'] == 'sys_enter_getppid' and r['pid'] == pids[0]]
    marks = [r for r in mine if r['event'] == 'print']
    check(len(calls) == GETPPID_N, f'{len(calls)} getppid calls in the file, {GETPPID_N} made')
    seqs = [int(re.search(r'tpd-record (\d+)', r['body'])[1]) for r in marks if 'tpd-record' in r['body']]
    check(seqs == list(range(MARKER_N)), f'markers in the file: {len(seqs)}, first {seqs[:3]}, expected 0..{MARKER_N - 1}')

    reference = reference_records(ref)
    ours = [r for r in mine if r['event'] != 'print']
    mine_cpu, ref_cpu = per_cpu(ours), per_cpu(reference)
    check(sorted(mine_cpu) == sorted(ref_cpu), f'CPUs differ: file {sorted(mine_cpu)}, kernel {sorted(ref_cpu)}')
    compared = 0
    for cpu in ref_cpu:
        a, b = mine_cpu[cpu], ref_cpu[cpu]
        check(len(a) == len(b), f'CPU {cpu}: {len(a)} records in the file, {len(b)} in the kernel\'s text')
        for x, y in zip(a, b):
            same = (x['comm'], x['pid'], x['event']) == (y['comm'], y['pid'], y['event'])
            if x['event'] != 'sys_enter_getppid':
                same = same and x['body'] == y['body']
            check(same, f'CPU {cpu}: file and kernel differ:\n  file:   {x}\n  kernel: {y}')
            check(abs(x['ts'] - y['ts']) <= TS_SKEW_MAX_NS, f'ts differ by more than 5 ms:\n  {x}\n  {y}')
            compared += 1
    switches = sum(1 for r in reference if r['event'] == 'sched_switch')
    check(switches >= 2 * ROUND_TRIPS, f'only {switches} sched_switch records for {ROUND_TRIPS} round trips')
    log(f'{compared} records equal the kernel\'s text ({switches} sched_switch), {len(marks)} markers in order')

    # The file replays as the live stream printed the same records: CPU by CPU, byte for byte.
    r = tpd.tpctl('replay', out, timeout=120)
    check(r.returncode == 0 and not r.stderr, f'tpctl replay exited {r.returncode}: {r.stderr[:500]!r}')
    replayed = [l.encode() for l in r.stdout.splitlines()]
    check(len(replayed) == n == len(live.lines), f'replay printed {len(replayed)} lines, live {len(live.lines)}, '
                                                 f'recorded {n}')

    # A file names each pid once, by its last name; a live stream names a record as of its time.
    # Records of a pid renamed during the recording are compared without "comm".
    names = {}
    for line in live.lines:
        rec = json.loads(line)
        names.setdefault(rec.get('pid'), set()).add(rec.get('comm'))
    renamed = {pid for pid, n in names.items() if len(n) > 1}
    # A task gone before tpd read its records has no name live unless the kernel's table still
    # holds it; a recording sends the name when the table, reread, has it: the file may name a pid
    # that the live stream could not.
    unnamed = {pid for pid, n in names.items() if n == {None}}

    def by_cpu(lines):
        out = {}
        for line in lines:
            rec = json.loads(line)
            if rec.get('pid') in renamed | unnamed:
                rec.pop('comm', None)
                line = json.dumps(rec, separators=(',', ':')).encode()
            out.setdefault(rec['cpu'], []).append(line)
        return out
    a, b = by_cpu(replayed), by_cpu(live.lines)
    for cpu in sorted(set(a) | set(b)):
        for i, (x, y) in enumerate(zip(a.get(cpu, []), b.get(cpu, []))):
            check(x == y, f'CPU {cpu}, record {i}: replay and live stream differ:\n  replay: {x!r}\n  live:   {y!r}')
        check(len(a.get(cpu, [])) == len(b.get(cpu, [])), f'CPU {cpu}: replay and live counts differ')
    log(f'tpctl replay of the file equals the live stream: {len(replayed)} lines, CPU by CPU '
        f'(without "comm": {len(renamed)} pids renamed while recorded, {len(unnamed)} unnamed live)')
    tpd.stop()
    return out


def stalled_storm(ctx, tpd, stalled, n, what):
    """n getppid calls on CPU 0 while `stalled` (tpd, or the recorder) is stopped, then a few more
    calls (a loss shows before the next record of its CPU, in the file as in the kernel's pages).
    Checks recorded + lost = written and that trace-cmd reports the losses; returns (lost, drop
    lines of trace-cmd report, tpd's VmHWM in kB)."""
    out = os.path.join(ctx.tmpdir, f'stalled-{what}.dat')
    gen = ctx.gen('GEN_GETPPID', '--count', n, '--cpu', 0)
    after_gen = ctx.gen('GEN_GETPPID', '--count', 100, '--cpu', 0)
    pid, pid2 = gen.pids()[0], after_gen.pids()[0]
    tpd.tpctl_ok('enable', '-f', f'common_pid == {pid} || common_pid == {pid2}', 'syscalls:sys_enter_getppid')
    rec = Recording(ctx, tpd, out, '-e', 'syscalls:sys_enter_getppid')
    rec.wait_started()
    time.sleep(0.5)
    before = tpd.stats()
    stalled = rec if stalled == 'recorder' else tpd.process
    stalled.signal(signal.SIGSTOP)
    try:
        gen.go()
        gen.wait_done(60)
        time.sleep(0.5)
        hwm = int(re.search(r'VmHWM:\s+(\d+)', open(f'/proc/{tpd.process.pid}/status').read())[1])
    finally:
        stalled.signal(signal.SIGCONT)
    time.sleep(1.0)
    after_gen.go()
    after_gen.wait_done(30)
    time.sleep(1.0)
    after = tpd.stats()
    recorded, _, lost = rec.stop()
    written = T.written(T.stats_delta(before, after))
    log(f'{what}: recorded {recorded}, lost {lost}, the kernel wrote {written}; tpd VmHWM {hwm} kB')
    check(written == n + 100, f'the kernel wrote {written} records, expected {n + 100}')
    check(lost > 0, f'{what}: nothing lost: the test did not stall anything')
    check(recorded + lost == written, f'{recorded} recorded + {lost} lost != {written} written')
    records, dropped = T.trace_cmd_report(out)
    check(len(records) == recorded, f'trace-cmd report lists {len(records)} records, tpctl said {recorded}')
    check(dropped, 'trace-cmd report shows no dropped events in a capture that lost some')
    counted = sum(c for _, c in dropped if c is not None)
    check(counted <= lost, f'trace-cmd counts {counted} dropped, more than the {lost} lost')
    log(f'trace-cmd report: {len(dropped)} drop lines ({counted} counted), e.g. {dropped[:2]}')
    return lost, dropped, hwm


def kernel_names():
    """The kernel's table of names, {pid: comm}. A name may hold a newline (any user names their
    tasks): a line that does not start with a pid goes on the name before it."""
    out, pid = {}, None
    for line in T.read_text(os.path.join(T.TRACEFS, 'saved_cmdlines')).split('\n')[:-1]:
        m = re.match(r'(\d+) (.*)', line, re.S)
        if m:
            pid = int(m[1])
            out[pid] = m[2]
        elif pid is not None:
            out[pid] += '\n' + line
    return out


def late_names(ctx, at_size=False):
    log('--- late names: tasks gone before tpd read their records are named as the kernel names them at the end'
        + (', the recording stopped by --size' if at_size else ''))
    tpd = ctx.tpd()
    out = os.path.join(ctx.tmpdir, 'late-size.dat' if at_size else 'late.dat')
    rec = Recording(ctx, tpd, out, '-e', 'syscalls:sys_enter_getppid', '--no-kallsyms',
                    *(['--size', '1'] if at_size else []))
    rec.wait_started()
    # Spawned after the start: the kernel's table sent then cannot name them.
    first = ctx.gen('GEN_GETPPID', '--count', 100, '--cpu', 0)
    last = ctx.gen('GEN_GETPPID', '--count', 100, '--cpu', 0)
    pids = first.pids() + last.pids()
    time.sleep(0.5)
    for gen, settle in ((first, 0.3), (last, 0)):
        # tpd reads the records only after the task exited: /proc cannot name it. The first one
        # makes tpd read the kernel's table; the last one exits after that read, and its recording
        # ends well before tpd would read the table again on its own.
        T.run_while_stopped(tpd.process, gen, 30)
        time.sleep(settle)
    if at_size:
        # Pages enough to reach --size at once: tpctl stops by itself, well before tpd would read
        # the kernel's table again on its own.
        flood = ctx.gen('GEN_GETPPID', '--count', 200_000, '--cpu', 0)
        flood.pids()
        flood.go()
        rc = rec.wait(30)
        check(rc == 0, f'tpctl record --size 1 exited with {rc}: {rec.stderr_text()!r}')
        check('stopped at the size limit' in rec.stderr_text(), f'no size limit in {rec.stderr_text()!r}')
        flood.wait_done(30)
        size = os.path.getsize(out)
        check(size <= 1 << 20, f'{out} is {size} bytes, beyond --size 1 MiB')
        n, files, lost = (int(x) for x in SUMMARY_RE.search(rec.stderr_text()).groups()[:3])
    else:
        n, files, lost = rec.stop()
    kernel = kernel_names()
    check(files == 1 and lost == 0, f'expected 1 file and nothing lost, got {files} files, {lost} lost')
    records, _ = T.trace_cmd_report(out)
    # One line per pid: trace-cmd sorts the lines by pid, and of two lines of a pid (tpd's, and the
    # kernel's table at the start naming an earlier task of it) may take either.
    r = subprocess.run(['trace-cmd', 'dump', '--cmd-lines', out],
                       capture_output=True, text=True, errors='replace', timeout=60)
    check(r.returncode == 0, f'trace-cmd dump --cmd-lines exited with {r.returncode}: {r.stderr[:500]!r}')
    lines = [int(l.split(' ', 1)[0]) for l in r.stdout.splitlines() if re.match(r'^\d+ ', l)]
    twice = sorted(p for p, k in collections.Counter(lines).items() if k > 1)
    check(lines and not twice, f'{len(lines)} command lines in the file, pids named more than once: {twice[:10]}')
    for pid in pids:
        check(kernel.get(pid) == 'gen-getppid', f'the kernel\'s table names pid {pid} {kernel.get(pid)!r}, '
                                                f'not gen-getppid: the test cannot tell')
        calls = [r for r in records if r['pid'] == pid and r['event'] == 'sys_enter_getppid']
        check(len(calls) == 100, f'pid {pid}: {len(calls)} getppid calls in the file, 100 made')
        named = {r['comm'] for r in calls}
        check(named == {'gen-getppid'}, f'pid {pid}: the file names it {named}, the kernel gen-getppid')
    log(f'both tasks gone before tpd read their records are named in the file ({n} records)')
    tpd.stop()


def overrun(ctx):
    log('--- overrun: losses reported as trace-cmd reports them')
    tpd = ctx.tpd(args=['--buffer-size-kb', '64'])
    stalled_storm(ctx, tpd, 'tpd', 300_000, 'overrun')
    tpd.stop()


def rotation(ctx):
    log('--- rotation: at most N files of at most the size, records consecutive')
    tpd = ctx.tpd()
    for fmt, ext in (('dat', 'dat'), ('ndjson', 'ndjson')):
        d = os.path.join(ctx.tmpdir, f'rot-{fmt}')
        os.mkdir(d)
        out = os.path.join(d, f'cap.{ext}')
        gen = ctx.gen('GEN_MARKER', '--instance', tpd.instance, '--count', 20_000, '--rate', 20_000, '--seq', '--cpu', 0,
                      '--wait',
                      'rotation-' + 'x' * 200)
        gen.pids()
        rec = Recording(ctx, tpd, out, '-e', 'ftrace:print', '--rotate-size', '1', '--keep', '3', '--no-kallsyms')
        rec.wait_started()
        time.sleep(0.5)
        gen.command('go')
        gen.wait_done(60)
        n, files, lost = rec.stop()
        check(lost == 0, f'{fmt}: {lost} lost')
        names = sorted(glob.glob(os.path.join(d, 'cap-*.' + ext)))
        check(len(os.listdir(d)) == len(names), f'{fmt}: other files left: {os.listdir(d)}')
        check(files >= 4, f'{fmt}: only {files} files for ~5 MB of markers at 1 MB a file')
        check(len(names) == 3, f'{fmt}: {len(names)} files kept, expected 3: {names}')
        seqs = []
        for name in names:
            size = os.path.getsize(name)
            check(size <= 1024 * 1024, f'{name} is {size} bytes, more than 1 MiB')
            if fmt == 'dat':
                recs, dropped = T.trace_cmd_report(name)
                check(not dropped, f'{name}: dropped {dropped}')
                texts = [r['body'] for r in recs]
            else:
                texts = [json.loads(l)['fields']['buf'] for l in open(name) if l.strip()]
            seqs += [int(t.rsplit(' ', 1)[1]) for t in texts if 'rotation-' in t]
        check(seqs and seqs[-1] == 20_000 - 1, f'{fmt}: last record {seqs[-1] if seqs else None}, expected 19999')
        check(seqs == list(range(seqs[0], 20_000)), f'{fmt}: records across the kept files are not consecutive')
        log(f'{fmt}: {files} files written, 3 kept, {len(seqs)} consecutive records in them')
    tpd.stop()


def concurrent(ctx):
    log('--- a recording and two streams at once')
    tpd = ctx.tpd()
    out = os.path.join(ctx.tmpdir, 'both.dat')
    n = 100_000
    gen = ctx.gen('GEN_GETPPID', '--count', n, '--rate', 50_000)
    pid = gen.pids()[0]
    args = ['-e', 'syscalls:sys_enter_getppid', '-p', str(pid)]
    streams = [tpd.stream(*args) for _ in range(2)]
    rec = Recording(ctx, tpd, out, *args)
    rec.wait_started()
    T.confirm_live(streams, gen.probe)
    time.sleep(0.5)
    probes = gen.probes
    gen.go()
    gen.wait_done(60)
    for s in streams:
        s.drain(lambda s=s: sum(1 for l in s.lines if b'"lost"' not in l) >= n + probes, timeout=60)
        s.stop()
    recorded, _, lost = rec.stop()
    for i, s in enumerate(streams):
        recs = s.records()
        check(not [r for r in recs if 'lost' in r], f'stream {i} lost records')
        check(len(recs) == n + probes, f'stream {i}: {len(recs)} records, expected {n} + {probes} probes')
    records, _ = T.trace_cmd_report(out)
    calls = [r for r in records if r['pid'] == pid]
    check(lost == 0, f'the recording lost {lost}')
    check(len(calls) >= n and len(calls) <= n + probes and recorded == len(records),
          f'the recording holds {len(calls)} calls, expected {n} (+ up to {probes} probes)')
    log(f'recording {len(calls)}, streams {n + probes} each')
    tpd.stop()


def version7_and_status(ctx):
    log('--- file version 7, and the status line on a terminal')
    tpd = ctx.tpd()
    out = os.path.join(ctx.tmpdir, 'v7.dat')
    gen = ctx.gen('GEN_MARKER', '--instance', tpd.instance, '--count', 500, '--rate', 200, '--seq', '--wait', 'v7')
    gen.pids()
    # stderr on a pseudo-terminal, as a person running it sees it.
    master, slave = pty.openpty()
    argv = [T.env_program('TPCTL'), '--socket', tpd.socket, 'record', '-o', out, '--file-version', '7',
            '-e', 'ftrace:print']
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=slave)
    os.close(slave)
    try:
        time.sleep(0.5)
        gen.command('go')
        gen.wait_done(30)
        time.sleep(1.5)
        proc.send_signal(signal.SIGINT)
        rc = proc.wait(30)
        text = b''
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:
                break
            if not chunk:
                break
            text += chunk
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(master)
    text = text.decode(errors='replace')
    check(rc == 0, f'tpctl record exited with {rc}: {text!r}')
    check(re.search(r'recording: \d+ records, [\d.]+ MiB, \d+ records/s, lost 0', text),
          f'no live status line on the terminal: {text!r}')
    check('tpctl: 500 records in 1 file, 0 lost' in text, f'summary: {text!r}')
    records, dropped = T.trace_cmd_report(out)
    check(not dropped and [int(r['body'].rsplit(' ', 1)[1]) for r in records] == list(range(500)),
          f'version 7 file: {len(records)} records, dropped {dropped}')
    r = subprocess.run(['trace-cmd', 'dump', '--summary', out],
                       capture_output=True, text=True, errors='replace', timeout=60)
    check(re.search(r'^\s*7\s+\[Version\]', r.stdout, re.M), f'not a version 7 file: {r.stdout[:300]!r}')
    log('version 7: 500 markers; status line seen on the terminal')
    tpd.stop()


def errors_and_slow(ctx):
    log('--- bad input, and a recorder that stops reading')
    tpd = ctx.tpd(args=['--stream-queue-kb', '1024'])
    with tpd.varlink() as v:
        reply = v.call('io.tpd.tracing.Record', {'events': ['sched:sched_switch']})
    check(reply.get('error') == 'org.varlink.service.InvalidParameter' and
          reply['parameters'].get('parameter') == 'upgrade', f'Record without upgrade: {reply}')
    d = os.path.join(ctx.tmpdir, 'bad')
    os.mkdir(d)
    cases = [
        (['-e', 'nonexistent:event'], 1, 'nonexistent:event'),
        (['-e', 'sched:sched_switch', '--filter', 'no_such_field == 1'], 1, 'no_such_field'),
        (['-e', 'sched:sched_switch', '--format', 'xml'], 2, '--format'),
        (['-e', 'sched:sched_switch', '--file-version', '5'], 2, '--file-version'),
        (['-e', 'sched:sched_switch', '--rotate-size', '-1'], 2, 'invalid size'),
    ]
    for args, code, text in cases:
        r = tpd.tpctl('record', '-o', os.path.join(d, 'x.dat'), *args)
        check(r.returncode == code and text in r.stderr,
              f'tpctl record {" ".join(args)}: exit {r.returncode} (expected {code}), stderr {r.stderr!r}')
    r = tpd.tpctl('record', '-e', 'sched:sched_switch')
    check(r.returncode == 2 and '-o' in r.stderr, f'tpctl record without -o: {r.returncode} {r.stderr!r}')
    r = tpd.tpctl('record', '-o', '/proc/no/such/dir/x.dat', '-e', 'sched:sched_switch', '--duration', '1')
    check(r.returncode == 1 and 'cannot' in r.stderr, f'unwritable output: {r.returncode} {r.stderr!r}')
    check(os.listdir(d) == [], f'failed recordings left files: {os.listdir(d)}')
    check(tpd.status()['streams'] == 0, 'a failed Record left a stream behind')

    lost, dropped, hwm = stalled_storm(ctx, tpd, 'recorder', 500_000, 'stopped recorder')
    check(hwm < 40 * 1024 * T.SLOWDOWN, f'tpd grew to {hwm} kB with a 1 MiB queue')
    # tpd had room after the data of a page that carries its own losses: the count is in the file.
    check(sum(c or 0 for _, c in dropped) == lost or any(c is None for _, c in dropped),
          f'trace-cmd counts {dropped}, tpctl {lost}')
    tpd.stop()


def main(ctx):
    errors_and_slow(ctx)
    version7_and_status(ctx)
    truth(ctx)
    late_names(ctx)
    late_names(ctx, at_size=True)
    overrun(ctx)
    rotation(ctx)
    concurrent(ctx)


if __name__ == '__main__':
    T.run(main)
