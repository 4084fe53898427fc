#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""`tpctl replay`: captures printed again as `tpctl stream` prints records.

1. A trace-cmd data file written by Debian's `trace-cmd record` (version 6 and the default 7,
   compressed) of N getppid calls of one generator (kernel filter on its pid), M numbered
   trace_marker writes and the machine's sched_switch:
   - every line is a record of stream's shape, in time order (ties by CPU);
   - per event, as many records as `trace-cmd report` lists; exactly N getppid of the generator;
     the markers' text in order;
   - with --print, each record's "print" is the text `trace-cmd report -N` prints for it, and the
     sched_switch fields are the values that text shows;
   - -e, -p, -c and --filter select exactly what stream's rules select from the whole replay, byte
     for byte; a filter that does not apply, an unknown event: exit 1 (on the version 6 file).
   And a capture under overrun (16 KiB buffers): records plus the replay's "overrun" losses are the
   calls made, and the losses are the kernel's overrun counter that trace-cmd saved.
2. A live `tpctl stream` of a real tpd (getppid and markers), saved as NDJSON: its replay is the
   file byte for byte; replayed with -e/-p/-c it is the file's lines of that selection, and a
   second live stream with -e and -p got exactly what the replay of the first one selects.
3. Errors: no such file, not a capture, a truncated data file (exit 1); --filter or --print on
   NDJSON, no FILE (exit 2).
"""

import json
import os
import re
import shutil
import signal
import subprocess
import time

import tpdtest as T
from tpdtest import check, log

EVENT = 'syscalls:sys_enter_getppid'
N = 20_000
M = 200
N_OVERRUN = 150_000
MARKER = 'replay-marker'
# trace-cmd report's short names, as tpctl names them.
LONG_NAMES = {'sys_enter_getppid': EVENT, 'sched_switch': 'sched:sched_switch', 'print': 'ftrace:print'}
# "[INSTANCE:] COMM-PID [CPU] TS: NAME: TEXT" (trace-cmd report -N -t).
REPORT_RE = re.compile(r'^(?:\S+: )?\s*(.*)-(\d+)\s+\[(\d+)\]\s*(\d+): (\w+):(.*)$')
SWITCH_RE = re.compile(r'^prev_comm=(.*) prev_pid=(-?\d+) prev_prio=(-?\d+) prev_state=\S+ ==> '
                       r'next_comm=(.*) next_pid=(-?\d+) next_prio=(-?\d+)$')


def tpctl(*args, env=None):
    return subprocess.run([T.env_program('TPCTL'), *args], capture_output=True, timeout=120, env=env)


def replay_ok(*args):
    r = tpctl('replay', *args)
    check(r.returncode == 0, f'tpctl replay {" ".join(args)} exited with {r.returncode}: {r.stderr[-2000:]!r}')
    return r.stdout


def lines_of(data):
    check(data == b'' or data.endswith(b'\n'), f'output does not end with a newline: {data[-200:]!r}')
    return data.split(b'\n')[:-1]


def trace_cmd_record(ctx, dat, pid, args):
    """trace-cmd record of pid's getppid calls (and args), in an instance of its own.
    Returns (instance name, its path, the trace-cmd process)."""
    name = ctx.unique_name('-tc')
    path = os.path.join(T.TRACEFS, 'instances', name)
    ctx._instances.append(path)   # removed on cleanup whatever happens
    # On a kernel locked down for the function tracer, trace-cmd needs -k -d -B (it touches
    # function-tracer files otherwise).
    argv = ['trace-cmd', 'record', '-k', '-d', '-B', name, '-C', 'boot', '-e', EVENT, '-f', f'common_pid == {pid}',
            '-o', dat, *args]
    tc = T.Process(ctx, f'trace-cmd-{os.path.basename(dat)}', argv, stdout=subprocess.DEVNULL)
    # Recording: the event is on with its filter, tracing is on, and the per-CPU recorders run.
    event_dir = os.path.join(path, 'events', *EVENT.split(':'))
    deadline = time.monotonic() + 30
    while True:
        try:
            ready = (T.read_text(os.path.join(event_dir, 'enable')).strip() == '1'
                     and str(pid) in T.read_text(os.path.join(event_dir, 'filter'))
                     and T.read_text(os.path.join(path, 'tracing_on')).strip() == '1'
                     and len(subprocess.run(['pgrep', '-P', str(tc.pid)], capture_output=True,
                                            text=True).stdout.split()) >= len(T.online_cpus()))
        except OSError:
            ready = False
        if ready:
            break
        check(tc.running(), f'trace-cmd record exited with {tc.proc.returncode}: {tc.stderr_text()!r}')
        check(time.monotonic() < deadline, f'trace-cmd record not recording within 30 s: {tc.stderr_text()!r}')
        time.sleep(0.05)
    return name, path, tc


def record_dat(ctx, dat, args, count=N, markers=True, switches=False):
    """Records count getppid calls (and M markers, and the generator's sched_switch) with trace-cmd
    into dat; returns the generator's pid."""
    gen = ctx.gen('GEN_GETPPID', '--count', count, '--cpu', T.online_cpus()[0])
    pid, = gen.pids()
    if switches:
        # Only the generator's: the machine's own (other tests' ping-pong) could overrun the buffer.
        args = ['-e', 'sched:sched_switch', '-f', f'prev_pid == {pid} || next_pid == {pid}', *args]
    name, path, tc = trace_cmd_record(ctx, dat, pid, args)
    if markers:
        # On another CPU than the generator's, so that -c selects part of the capture.
        marker = ctx.gen('GEN_MARKER', '--instance', name, '--count', M, '--cpu', T.online_cpus()[-1], '--seq',
                         MARKER)
    gen.go()
    gen.wait_done(timeout=60)
    if markers:
        marker.pids()
        done = marker.wait_done(timeout=60)
        check(done[1] == M, f'gen-marker wrote {done[1]} markers, expected {M}')
    tc.signal(signal.SIGINT)
    rc = tc.wait(60)
    check(rc == 0, f'trace-cmd record exited with {rc}: {tc.stderr_text()!r}')
    err = T.remove_instance(path)
    check(err is None, err)
    return pid


def report(dat):
    r = subprocess.run(['trace-cmd', 'report', '-N', '-t', '-i', dat], capture_output=True, timeout=120)
    check(r.returncode == 0, f'trace-cmd report exited with {r.returncode}: {r.stderr[-500:]!r}')
    out = []
    for line in r.stdout.decode(errors='replace').splitlines():
        if line.startswith('cpus=') or not line.strip() or re.search(r'CPU:\d+ \[(\d+ )?EVENTS DROPPED\]$', line):
            continue
        m = REPORT_RE.match(line)
        check(m, f'cannot read trace-cmd report line {line!r}')
        comm, pid, cpu, ts, name, text = m.groups()
        out.append({'pid': int(pid), 'cpu': int(cpu), 'ts': int(ts), 'event': LONG_NAMES.get(name, name),
                    'text': text.strip()})
    return out


def check_dat(dat, pid, selection=True):
    full = replay_ok(dat)
    lines = lines_of(full)
    recs = [T.parse_record(line) for line in lines]
    events = [r for r in recs if 'lost' not in r]
    check(len(events) == len(recs), f'{dat}: lost records in a capture without losses: '
                                    f'{[r for r in recs if "lost" in r][:3]}')
    keys = [(r['ts'], r['cpu']) for r in recs]
    check(keys == sorted(keys), f'{dat}: records not in time order (ties by CPU)')

    rep = report(dat)
    for name in sorted({r['event'] for r in rep} | {r['event'] for r in events}):
        a = sum(r['event'] == name for r in events)
        b = sum(r['event'] == name for r in rep)
        check(a == b, f'{dat}: {a} {name} records replayed, trace-cmd report lists {b}')
    mine = [r for r in events if r['event'] == EVENT and r['pid'] == pid]
    check(len(mine) == N, f'{dat}: {len(mine)} getppid records of the generator, expected {N}')
    texts = [r['fields']['buf'] for r in events if r['event'] == 'ftrace:print']
    check(texts == [f'{MARKER} {i}\n' for i in range(M)],
          f'{dat}: marker texts {texts[:3]}... ({len(texts)}), expected "{MARKER} 0".."{MARKER} {M - 1}" in order')

    # --print: the kernel's text of each record, as trace-cmd report prints it; the same records.
    printed = [json.loads(line) for line in lines_of(replay_ok(dat, '--print'))]
    check(len(printed) == len(rep), f'{dat}: {len(printed)} records with --print, report lists {len(rep)}')
    switches = 0
    for p, r, plain in zip(printed, rep, recs):
        check((p['ts'], p['cpu'], p['pid'], p['event']) == (r['ts'], r['cpu'], r['pid'], r['event']),
              f'{dat}: replay {p} and trace-cmd report {r} differ')
        check({k: v for k, v in p.items() if k != 'print'} == plain, f'{dat}: --print changed the record {p}')
        if p['event'] == 'ftrace:print':
            # tpd names no kernel symbols, live or in a replay; trace-cmd report does from kallsyms.
            f = p['fields']
            check(p['print'] == f'0x{f["ip"]:x}: {f["buf"]}' and r['text'] == f'tracing_mark_write: {f["buf"].strip()}',
                  f'{dat}: print {p["print"]!r}, trace-cmd report {r["text"]!r}')
        else:
            check(p['print'].strip() == r['text'], f'{dat}: print {p["print"]!r}, trace-cmd report {r["text"]!r}')
        if p['event'] == 'sched:sched_switch':
            m = SWITCH_RE.match(r['text'])
            check(m, f'cannot read sched_switch text {r["text"]!r}')
            f = p['fields']
            want = (f['prev_comm'], str(f['prev_pid']), str(f['prev_prio']), f['next_comm'], str(f['next_pid']),
                    str(f['next_prio']))
            check(m.groups() == want, f'{dat}: sched_switch fields {want}, trace-cmd report {m.groups()}')
            switches += 1
    check(switches > 0, f'{dat}: no sched_switch records to compare')

    log(f'{dat}: {len(recs)} records, {len(mine)} getppid, {len(texts)} markers, {switches} sched_switch: '
        f'all as trace-cmd report lists them')
    if not selection:
        return

    # Selection: exactly stream's rules applied to the whole replay, byte for byte.
    cpu0 = T.online_cpus()[0]
    cases = [
        (['-e', EVENT], lambda r: r['event'] == EVENT),
        ([EVENT, 'ftrace:print'], lambda r: r['event'] in (EVENT, 'ftrace:print')),
        (['-e', 'ftrace:*'], lambda r: r['event'] == 'ftrace:print'),
        (['-p', str(pid)], lambda r: r['pid'] == pid),
        (['-c', str(cpu0)], lambda r: r['cpu'] == cpu0),
        (['-e', 'sched:sched_switch', '--filter', f'next_pid == {pid}'],
         lambda r: r['event'] == 'sched:sched_switch' and r['fields']['next_pid'] == pid),
        (['--filter', f'common_pid == {pid}'], lambda r: r['pid'] == pid),
    ]
    for args, want in cases:
        got = lines_of(replay_ok(dat, *args))
        expected = [line for line, r in zip(lines, recs) if want(r)]
        check(got == expected, f'{dat}: replay {" ".join(args)}: {len(got)} lines, expected {len(expected)}')
        check(0 < len(got) < len(lines) or (args[0] == '-c' and len(T.online_cpus()) == 1),
              f'{dat}: replay {" ".join(args)} selects {len(got)} of {len(lines)}')
        log(f'{dat}: replay {" ".join(args)}: {len(got)} records')
    check(len(lines_of(replay_ok(dat, '-e', EVENT, '-p', str(pid)))) == N, f'{dat}: -e -p: not {N} records')

    for args, what in ((['--filter', 'no_such_field == 1'], 'a filter of no event'),
                       (['-e', EVENT, '--filter', 'prev_pid == 0'], 'a filter of another event'),
                       (['-e', 'sched:no_such_event'], 'an event not in the capture')):
        r = tpctl('replay', dat, *args)
        check(r.returncode == 1 and r.stderr and not r.stdout,
              f'{dat}: {what}: exit {r.returncode}, stdout {r.stdout[:200]!r}, stderr {r.stderr!r}')


def overrun(ctx):
    """A capture with losses: trace-cmd's pages flag them without a count (they are full), and the
    file keeps the kernel's overrun counter; replay reports exactly that many."""
    dat = os.path.join(ctx.tmpdir, 'overrun.dat')
    # 16 KiB buffers and a generator at full speed: trace-cmd's reader usually falls behind.
    pid = record_dat(ctx, dat, ['-b', '16'], count=N_OVERRUN, markers=False)
    recs = [json.loads(line) for line in lines_of(replay_ok(dat))]
    got = sum(r.get('event') == EVENT and r['pid'] == pid for r in recs)
    lost = sum(r['lost'] for r in recs if r.get('cause') == 'overrun')
    check(all(r.get('event') == EVENT or r.get('cause') == 'overrun' for r in recs),
          f'unexpected records: {[r for r in recs if r.get("event") != EVENT and "lost" not in r][:3]}')
    r = subprocess.run(['trace-cmd', 'report', '--stat', '-i', dat],
                       capture_output=True, text=True, errors='replace', timeout=60)
    kernel = sum(int(x) for x in re.findall(r'^overrun: (\d+)$', r.stdout, re.M))
    check(got + lost == N_OVERRUN and lost == kernel,
          f'overrun capture: {got} records + {lost} lost, expected {N_OVERRUN} with {kernel} lost (kernel)')
    rep = sum(1 for r in report(dat) if r['event'] == EVENT)
    check(rep == got, f'overrun capture: {got} records replayed, trace-cmd report lists {rep}')
    log(f'overrun capture: {got} records + {lost} lost = {N_OVERRUN}, as the kernel counted')


def live(ctx):
    tpd = ctx.tpd()
    cpu = T.online_cpus()[-1]
    gen = ctx.gen('GEN_GETPPID', '--count', N, '--cpu', cpu)
    pid, = gen.pids()
    tpd.tpctl_ok('enable', EVENT, '--filter', f'common_pid == {pid}')
    everything = tpd.stream()
    selected = tpd.stream('-e', EVENT, '-p', str(pid))
    T.confirm_live([everything, selected], gen.probe)
    go = gen.go()
    for i in range(M):
        tpd.marker(f'{MARKER} {i}')
    gen.wait_done(timeout=60)

    def run(s, want):
        return [line for line in s.lines if json.loads(line).get('ts', 0) >= go and want(json.loads(line))]
    everything.drain(lambda: len(run(everything, lambda r: r.get('event') == EVENT)) >= N, timeout=60)
    selected.drain(lambda: len(run(selected, lambda r: True)) >= N, timeout=60)
    everything.stop()
    selected.stop()
    tpd.stop()

    with open(everything.out_path, 'rb') as f:
        data = f.read()
    check(len(run(everything, lambda r: r.get('event') == EVENT)) == N, f'live stream: not {N} getppid records')
    got = replay_ok(everything.out_path)
    check(got == data, f'replay of the live NDJSON ({len(data)} bytes) is not the file byte for byte '
                       f'({len(got)} bytes)')
    lines = lines_of(data)
    recs = [json.loads(line) for line in lines]
    for args, want in ((['-e', EVENT], lambda r: r.get('event', EVENT) == EVENT),
                       (['-e', 'ftrace:print'], lambda r: r.get('event', 'ftrace:print') == 'ftrace:print'),
                       (['-c', str(cpu)], lambda r: r.get('cpu', cpu) == cpu),
                       (['-p', str(pid)], lambda r: r.get('pid', pid) == pid)):
        got = lines_of(replay_ok(everything.out_path, *args))
        expected = [line for line, r in zip(lines, recs) if want(r)]
        check(got == expected, f'NDJSON replay {" ".join(args)}: {len(got)} lines, expected {len(expected)}')
    # The second live stream selected what a replay of the first one selects.
    got = [line for line in lines_of(replay_ok(everything.out_path, '-e', EVENT, '-p', str(pid)))
           if json.loads(line)['ts'] >= go]
    check(got == run(selected, lambda r: True), f'live stream -e -p ({len(run(selected, lambda r: True))} '
                                                f'records) differs from the replay of stream ({len(got)})')
    log(f'live stream: {len(lines)} lines replayed byte for byte; -e -p: {len(got)} records, as live')

    for args in (['--filter', f'common_pid == {pid}'], ['--print']):
        r = tpctl('replay', everything.out_path, *args)
        check(r.returncode == 2 and b'data file' in r.stderr and not r.stdout,
              f'NDJSON replay {args}: exit {r.returncode}, stderr {r.stderr!r}')


def errors(ctx, dat):
    missing = os.path.join(ctx.tmpdir, 'missing.dat')
    text = os.path.join(ctx.tmpdir, 'text.txt')
    with open(text, 'w') as f:
        f.write('not a capture\n')
    with open(dat, 'rb') as f:
        data = f.read()
    bad = os.path.join(ctx.tmpdir, 'bad.ndjson')
    with open(bad, 'w') as f:
        f.write('{"ts":1,"cpu":0,"lost":2,"cause":"overrun"}\nnot JSON\n')
    cases = [([missing], 1, b'cannot open'), ([text], 1, b'not a capture'), ([ctx.tmpdir], 1, b'directory'),
             ([bad], 1, b'bad.ndjson:2: not a record'), ([], 2, b'needs an argument')]
    # Cut inside the records of the last CPU, and inside the headers.
    for i, size in enumerate((len(data) - 100, len(data) - 5000, 4096)):
        cut = os.path.join(ctx.tmpdir, f'cut-{i}.dat')
        with open(cut, 'wb') as f:
            f.write(data[:size])
        cases.append(([cut], 1, b'cut-'))
    # libtracecmd itself crashes on some cut files; tpctl reports that, and an ASan build must let the
    # crash happen rather than report it as a fault of tpctl's.
    env = dict(os.environ, ASAN_OPTIONS=os.environ.get('ASAN_OPTIONS', '') + ':handle_segv=0:handle_sigbus=0')
    empty = os.path.join(ctx.tmpdir, 'empty.ndjson')
    open(empty, 'w').close()
    check(replay_ok(empty) == b'', 'the replay of an empty capture printed something')
    r = tpctl('replay', bad)
    check(r.stdout == b'{"ts":1,"cpu":0,"lost":2,"cause":"overrun"}\n',
          f'the lines before a bad one are not replayed: {r.stdout!r}')
    for args, rc, msg in cases:
        r = tpctl('replay', *args, env=env)
        check(r.returncode == rc and msg in r.stderr,
              f'replay {args}: exit {r.returncode} (expected {rc}), stderr {r.stderr[-500:]!r} '
              f'(expected {msg!r}), stdout {len(r.stdout)} bytes')
        log(f'replay {[os.path.basename(a) for a in args]}: exit {rc}: {r.stderr.decode().strip()[-150:]}')


def main(ctx):
    if not shutil.which('trace-cmd'):
        raise T.TestSkip('trace-cmd is not installed')
    v6 = os.path.join(ctx.tmpdir, 'v6.dat')
    v7 = os.path.join(ctx.tmpdir, 'v7.dat')
    pid = record_dat(ctx, v6, ['--file-version', '6'], switches=True)
    check_dat(v6, pid)
    pid = record_dat(ctx, v7, [], switches=True)
    check_dat(v7, pid, selection=False)
    overrun(ctx)
    live(ctx)
    errors(ctx, v6)


if __name__ == '__main__':
    T.run(main)
