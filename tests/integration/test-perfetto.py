#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""`tpctl convert`: a recording written as a Perfetto trace, read back with protoc.

A pipe ping-pong and 1,000 numbered markers, recorded by `tpctl record` from a real tpd
(sched_switch, sched_waking, print), converted to a Perfetto trace and decoded by Debian's protoc
with tests/data/perfetto-min.proto (Perfetto's field numbers). Per CPU, the trace's events are
`tpctl replay`'s records: the same count, timestamps and pids, sched_switch's and sched_waking's
fields, the marker texts; every pid of the records but 0 is in the process tree with one of its names;
the loss statistics per CPU equal replay's lost records; the system info names this kernel. The
NDJSON of the replay, converted too, gives the same events.

Live: `tpctl record -o x.perfetto-trace` (from Record's pages, as the data file) and `tpctl stream
--format=perfetto` (from Stream's lines), run beside `tpctl record -o x.dat` and stopped by SIGINT,
give the data file's events (the Perfetto recording with --stack: the kernel's stack records are
left out of the trace); their process tree holds every
process alive throughout the start with its parent and name; the clock snapshot puts a marker
written at a known CLOCK_REALTIME within 1 ms; sched_switch's prev_state reads as trace-cmd report
prints it. A recording while tpd is stopped and the kernel overruns: per CPU, the trace's overruns
are the kernel's losses.
"""

import ast
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import tpdtest as T
from tpdtest import check, fail, log

PROTO_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'data')
EVENTS = ['sched:sched_switch', 'sched:sched_waking', 'ftrace:print']
ROUND_TRIPS = 1_000
MARKER_N = 1_000
SWITCH = ['prev_comm', 'prev_pid', 'prev_prio', 'prev_state', 'next_comm', 'next_pid', 'next_prio']
WAKING = ['comm', 'pid', 'prio', 'success', 'target_cpu']


tpctl = T.tpctl
tpctl_ok = T.tpctl_ok


def parse_text_format(text):
    """protoc --decode's text format as dicts of lists: {'packet': [{...}, ...]}."""
    stack = [{}]
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        if line == '}':
            stack.pop()
        elif line.endswith(' {'):
            child = {}
            stack[-1].setdefault(line[:-2], []).append(child)
            stack.append(child)
        else:
            key, value = line.split(': ', 1)
            if value.startswith('"'):
                value = ast.literal_eval('b' + value).decode('utf-8', 'replace')
            elif value in ('true', 'false'):
                value = value == 'true'
            else:
                value = int(value)
            stack[-1].setdefault(key, []).append(value)
    check(len(stack) == 1, 'protoc output is not balanced')
    return stack[0]


def decode(trace):
    r = subprocess.run(['protoc', '--decode=perfetto.protos.Trace', f'--proto_path={PROTO_DIR}',
                        'perfetto-min.proto'], stdin=open(trace, 'rb'), capture_output=True, timeout=300)
    check(r.returncode == 0, f'protoc cannot decode {trace}: {r.stderr[-2000:]!r}')
    check(b'invalid UTF-8' not in r.stderr, f'{trace} holds strings that are not UTF-8: {r.stderr[-2000:]!r}')
    return parse_text_format(r.stdout.decode())


def one(m, key, default=None):
    return m.get(key, [default])[0]


def events_per_cpu(trace):
    """{cpu: [(ts, pid, name, fields)]} of the trace's bundles, in their order."""
    out = {}
    for p in trace.get('packet', []):
        for b in p.get('ftrace_events', []):
            for e in b.get('event', []):
                kinds = [k for k in e if k not in ('timestamp', 'pid')]
                check(len(kinds) == 1, f'an event with {kinds}')
                body = one(e, kinds[0])
                fields = {k: v[0] for k, v in body.items()}
                out.setdefault(one(b, 'cpu'), []).append((one(e, 'timestamp'), one(e, 'pid'), kinds[0], fields))
    return out


def expected_per_cpu(records):
    names = {'sched:sched_switch': ('sched_switch', SWITCH), 'sched:sched_waking': ('sched_waking', WAKING),
             'ftrace:print': ('print', ['ip', 'buf'])}
    out = {}
    for r in records:
        if 'event' not in r:
            continue
        name, keys = names[r['event']]
        fields = {k: r['fields'][k] for k in keys if k in r['fields']}
        out.setdefault(r['cpu'], []).append((r['ts'], r['pid'], name, fields))
    return out


def check_trace(path, records, what, live=False):
    trace = decode(path)
    got, want = events_per_cpu(trace), expected_per_cpu(records)
    check(sorted(got) == sorted(want), f'{what}: CPUs {sorted(got)}, replay has {sorted(want)}')
    for cpu in want:
        check(len(got[cpu]) == len(want[cpu]), f'{what}: CPU {cpu}: {len(got[cpu])} events, replay has '
                                               f'{len(want[cpu])}')
        for g, w in zip(got[cpu], want[cpu]):
            check(g == w, f'{what}: CPU {cpu}: event {g} differs from replay\'s {w}')
    log(f'{what}: {sum(len(v) for v in got.values())} events on {len(got)} CPUs equal the replay\'s')

    markers = [f['buf'] for v in got.values() for _, _, n, f in v if n == 'print' and 'tpd-perfetto' in f['buf']]
    seqs = sorted(int(b.split()[1]) for b in markers)
    check(seqs == list(range(MARKER_N)), f'{what}: markers {len(seqs)}, first {seqs[:3]}')

    trees = [t for p in trace['packet'] for t in p.get('process_tree', [])]
    if live:
        # The start's tree from /proc (processes and every task as a thread), then at most one of the
        # tasks the records name that it did not hold.
        check(1 <= len(trees) <= 2 and trees[0].get('threads'), f'{what}: {len(trees)} process trees')
        threads = {one(t, 'tid'): one(t, 'name') for t in trees[0]['threads']}
        for t in trees[1:]:
            threads.update({one(p, 'pid'): one(p, 'cmdline') for p in t.get('processes', [])})
    else:
        check(len(trees) == 1, f'{what}: {len(trees)} process trees')
        threads = {one(t, 'pid'): one(t, 'cmdline') for t in trees[0].get('processes', [])}
        check(all(one(t, 'cmdline_is_comm') for t in trees[0].get('processes', [])),
              f'{what}: cmdline_is_comm unset')
    names = {}
    for r in records:
        if 'event' in r:
            names.setdefault(r['pid'], set()).add(r.get('comm'))
            for p, c in (('prev_pid', 'prev_comm'), ('next_pid', 'next_comm'), ('pid', 'comm')):
                if p in r['fields'] and r['event'] != 'ftrace:print':
                    names.setdefault(r['fields'][p], set()).add(r['fields'][c])
    names.pop(0, None)  # the idle tasks: Perfetto's swapper, not in the tree
    for pid, comms in names.items():
        check(pid in threads, f'{what}: pid {pid} is not in the process tree')
        # /proc names a kernel thread in full (a kworker with its work queue), as ps does; the
        # records in the kernel's TASK_COMM_LEN - 1 bytes.
        check(threads[pid] in comms or (live and any(c and threads[pid].startswith(c) for c in comms)),
              f'{what}: pid {pid} is "{threads[pid]}" in the tree, {comms} in the records')

    lost = {}
    for r in records:
        if 'lost' in r:
            lost[r['cpu']] = lost.get(r['cpu'], 0) + r['lost']
    stats = [s for p in trace['packet'] for s in p.get('ftrace_stats', [])]
    end = [s for s in stats if one(s, 'phase') == 2]
    check(len(end) == 1, f'{what}: {len(end)} end-of-trace stats')
    overrun = {one(c, 'cpu'): one(c, 'overrun', 0) for c in end[0].get('cpu_stats', [])}
    for cpu in set(overrun) | set(lost):
        check(overrun.get(cpu, 0) == lost.get(cpu, 0), f'{what}: CPU {cpu}: overrun {overrun.get(cpu)}, '
                                                       f'replay lost {lost.get(cpu, 0)}')

    infos = [i for p in trace['packet'] for i in p.get('system_info', [])]
    check(len(infos) == 1 and one(one(infos[0], 'utsname'), 'release') == os.uname().release,
          f'{what}: system info {infos}')
    return trace


def synthetic(ctx):
    """A hand-made NDJSON capture: a clock record, a fork, a generic event of every field type."""
    lines = [
        {'ts': 100, 'clock': 'boot', 'realtime_offset_ns': 1_700_000_000_000_000_000},
        {'ts': 1000, 'cpu': 2, 'event': 'sched:sched_process_fork', 'pid': 5, 'comm': 'sh',
         'fields': {'parent_comm': 'sh', 'parent_pid': 5, 'child_comm': 'sh', 'child_pid': 9}},
        {'ts': 1001, 'notice': 'sync'},
        {'ts': 1002, 'cpu': 0, 'event': 'kmem:kmalloc', 'pid': 9, 'comm': 'ls',
         'fields': {'neg': -3, 'big': 2**64 - 1, 'ptr': '0xffff8881', 'arr': [1, 2], 'name': 'x\u00e9'}},
        {'ts': 1003, 'cpu': 0, 'lost': 7, 'cause': 'overrun'},
        {'ts': 1004, 'cpu': 0, 'lost': 2, 'cause': 'dropped'},
    ]
    src, out = os.path.join(ctx.tmpdir, 'synthetic.ndjson'), os.path.join(ctx.tmpdir, 'synthetic.pftrace')
    with open(src, 'w') as f:
        f.write(''.join(json.dumps(line, separators=(',', ':')) + '\n' for line in lines))
    tpctl_ok('convert', src, out)
    trace = decode(out)
    snaps = [c for p in trace['packet'] for c in p.get('clock_snapshot', [])]
    check(len(snaps) == 1, f'synthetic: {len(snaps)} clock snapshots')
    clocks = {one(c, 'clock_id'): one(c, 'timestamp') for c in snaps[0]['clocks']}
    check(clocks == {6: 100, 1: 1_700_000_000_000_000_100} and one(snaps[0], 'primary_trace_clock') == 6,
          f'synthetic: clock snapshot {snaps[0]}')
    tree = [t for p in trace['packet'] for t in p.get('process_tree', [])][0]
    procs = {one(t, 'pid'): (one(t, 'ppid'), one(t, 'cmdline')) for t in tree['processes']}
    check(procs == {5: (None, 'sh'), 9: (5, 'ls')}, f'synthetic: process tree {procs}')
    event = [e for p in trace['packet'] for b in p.get('ftrace_events', []) if one(b, 'cpu') == 0
             for e in b['event']][0]
    generic = one(event, 'generic', {})
    fields = {one(f, 'name'): {k: v[0] for k, v in f.items() if k != 'name'} for f in generic.get('field', [])}
    check(one(generic, 'event_name') == 'kmalloc' and one(event, 'pid') == 9 and fields == {
        'neg': {'int_value': -3}, 'big': {'uint_value': 2**64 - 1}, 'ptr': {'str_value': '0xffff8881'},
        'arr': {'str_value': '[1,2]'}, 'name': {'str_value': 'x\u00e9'}}, f'synthetic: generic event {event}')
    end = [s for p in trace['packet'] for s in p.get('ftrace_stats', []) if one(s, 'phase') == 2][0]
    overrun = {one(c, 'cpu'): one(c, 'overrun') for c in end['cpu_stats']}
    check(overrun == {0: 9, 2: 0}, f'synthetic: overruns {overrun}')
    log('synthetic: clock snapshot, process tree, generic fields and losses as written')


def proc_processes():
    """{pid: (ppid, comm)} of the processes /proc shows now."""
    out = {}
    for name in os.listdir('/proc'):
        if not name.isdigit():
            continue
        try:
            text = open(f'/proc/{name}/stat', 'rb').read().decode('utf-8', 'replace')
        except OSError:
            continue
        close = text.rindex(')')
        out[int(name)] = (int(text[close + 2:].split()[1]), text[text.index('(') + 1:close])
    return out


def check_start_tree(trace, before, after, what):
    """Every process alive before the capture and still alive, with the same parent and name, after it
    started is in the start's tree: with its parent, and its task named as the kernel names it."""
    tree = [t for p in trace['packet'] for t in p.get('process_tree', [])][0]
    procs = {one(p, 'pid'): one(p, 'ppid') for p in tree['processes']}
    names = {one(t, 'tid'): (one(t, 'tgid'), one(t, 'name')) for t in tree['threads']}
    alive = {pid: v for pid, v in before.items() if after.get(pid) == v}
    check(len(alive) > 10, f'{what}: only {len(alive)} processes alive throughout')
    for pid, (ppid, comm) in alive.items():
        check(procs.get(pid) == ppid, f'{what}: process {pid} ({comm}): parent {procs.get(pid)} in the tree, {ppid}')
        # A kworker's name in /proc ends in the work queue it ran last, which changes as it works.
        got = names.get(pid)
        if got and comm.startswith('kworker/'):
            got, comm = (got[0], got[1].partition('-')[0]), comm.partition('-')[0]
        check(got == (pid, comm), f'{what}: task {pid}: {names.get(pid)} in the tree, {comm!r}')
    log(f'{what}: the {len(alive)} processes alive at the start are in the tree with their parents and names')


def switch_states():
    """prev_state as the kernel prints it: the __print_flags table of sched_switch's format."""
    fmt = T.read_text(os.path.join(T.TRACEFS, 'events/sched/sched_switch/format'))
    fmt = fmt[fmt.index('print fmt:'):]
    flags = [(int(v, 16), n) for v, n in re.findall(r'\{ ?(0x[0-9a-fA-F]+), "(\w+)" ?\}', fmt)]

    def operand(at):
        """The parenthesized integer expression after 'REC->prev_state & ' at at, its value."""
        start = at + len('REC->prev_state & ')
        depth, i = 0, start
        while True:
            depth += {'(': 1, ')': -1}.get(fmt[i], 0)
            i += 1
            if depth == 0:
                break
        expr = fmt[start:i]
        check(re.fullmatch(r'[0-9a-fA-Fx|+\-<>() ]+', expr), f'sched_switch\'s format: {expr!r}')
        return eval(expr)  # noqa: S307: hex numbers and operators only, checked above

    ands = [m.start() for m in re.finditer(re.escape('REC->prev_state & '), fmt)]
    check(flags and len(ands) >= 2, f'cannot read sched_switch\'s print format: {fmt[:300]!r}')
    mask, preempt = operand(ands[0]), operand(ands[-1])

    def text(state):
        s = '|'.join(n for v, n in flags if state & mask & v) if state & mask else 'R'
        return s + ('+' if state & preempt else '')
    return text


def check_states(trace, dat):
    """The trace's prev_state numbers read as trace-cmd report prints the data file's."""
    text = switch_states()
    want = {}
    for rec in T.trace_cmd_report(dat)[0]:
        if rec['event'] == 'sched_switch':
            m = re.search(r'prev_pid=(\d+) .*prev_state=(\S+)', rec['body'])
            want[(rec['ts'], int(m[1]))] = m[2]
    got = {}
    for events in events_per_cpu(trace).values():
        for ts, _, name, f in events:
            if name == 'sched_switch':
                got[(ts, f['prev_pid'])] = text(f['prev_state'])
    check(len(got) == len(want) and len(got) > 0, f'{len(got)} sched_switch events, trace-cmd reports {len(want)}')
    differ = [(k, got[k], want.get(k)) for k in got if got[k] != want.get(k)]
    check(not differ, f'{len(differ)} thread states differ from trace-cmd report, e.g. {differ[:3]}')
    log(f'thread states: {len(got)} sched_switch prev_state read as trace-cmd report prints them '
        f'({sorted(set(got.values()))})')


def check_clock(trace, written_ns):
    """The marker written at CLOCK_REALTIME written_ns, put on the wall clock by the trace's snapshot."""
    snaps = [(one(p, 'timestamp'), {one(c, 'clock_id'): one(c, 'timestamp') for c in s['clocks']})
             for p in trace['packet'] for s in p.get('clock_snapshot', [])]
    check(snaps, 'no clock snapshot in a live capture')
    marks = [ts for events in events_per_cpu(trace).values() for ts, _, n, f in events
             if n == 'print' and f['buf'].startswith(f'tpd-clock {written_ns}')]
    check(len(marks) == 1, f'{len(marks)} clock markers')
    clocks = [c for at, c in snaps if at <= marks[0]][-1]
    wall = marks[0] - clocks[6] + clocks[1]
    check(abs(wall - written_ns) < 1_000_000, f'the marker is at {wall} on the trace\'s wall clock, written at '
                                              f'{written_ns}: {(wall - written_ns) / 1e3:.1f} µs apart')
    log(f'clock: the marker lands {(wall - written_ns) / 1e3:.1f} µs from the CLOCK_REALTIME it was written at')


def live(ctx, tpd, cpus):
    """record -o x.dat, record -o x.perfetto-trace and stream --format=perfetto of the same ping-pong,
    markers and a marker written at a known wall clock time, all stopped by SIGINT."""
    log('--- live: record and stream as Perfetto traces, next to a data file')
    pingpong = ctx.gen('GEN_PINGPONG', '--count', ROUND_TRIPS, '--cpu', cpus[0])
    marker = ctx.gen('GEN_MARKER', '--instance', tpd.instance, '--count', MARKER_N, '--seq', '--cpu', cpus[-1],
                     '--wait', 'tpd-perfetto')
    # A local user's process named to confuse: parentheses, a newline and a byte that is not UTF-8.
    hostile = subprocess.Popen([sys.executable, '-c', HOSTILE_NAME])
    for _ in range(100):
        if open(f'/proc/{hostile.pid}/comm', 'rb').read().startswith(b'a) b'):
            break
        time.sleep(0.05)
    stamp = os.path.join(ctx.tmpdir, 'stamp')
    clock = subprocess.Popen([sys.executable, '-c', CLOCK_WRITER, os.path.join(tpd.instance_dir, 'trace_marker'),
                              stamp], stdin=subprocess.PIPE)
    pids = pingpong.pids() + marker.pids() + [clock.pid]
    selection = [a for e in EVENTS for a in ('-e', e)]
    filt = ['--filter', ' || '.join(f'common_pid == {p}' for p in pids)]
    dat, pf, spf = (os.path.join(ctx.tmpdir, n) for n in ('live.dat', 'live.perfetto-trace', 'stream.pftrace'))
    before = proc_processes()
    tpctl_cmd = [T.env_program('TPCTL'), '--socket', tpd.socket]
    # With --stack, Record's pages hold an ftrace:kernel_stack record after each record: the
    # Perfetto trace leaves them out, as the lines' "stack", so its events are still the replay's.
    procs = [T.Process(ctx, 'record-dat', [*tpctl_cmd, 'record', '-o', dat, *selection, *filt],
                       stdout=subprocess.DEVNULL),
             T.Process(ctx, 'record-perfetto', [*tpctl_cmd, 'record', '--stack', '-o', pf, *selection, *filt],
                       stdout=subprocess.DEVNULL),
             T.Process(ctx, 'stream-perfetto', [*tpctl_cmd, 'stream', '--format', 'perfetto', *selection, *filt],
                       stdout=open(spf, 'wb'))]
    time.sleep(1.0)
    after = proc_processes()
    for p in procs:
        check(p.running(), f'tpctl exited: {p.stderr_text()!r}')
    pingpong.go()
    marker.command('go')
    clock.stdin.write(b'go\n')
    clock.stdin.close()
    check(clock.wait(30) == 0, 'the clock marker writer failed')
    pingpong.wait_done(60)
    marker.wait_done(60)
    time.sleep(0.5)
    for p in procs:
        p.signal(signal.SIGINT)
    for p in procs:
        rc = p.wait(60)
        check(rc == 0, f'tpctl exited with {rc} on SIGINT: {p.stderr_text()!r}')
    hostile.kill()
    hostile.wait()
    written_ns = int(open(stamp).read())
    records = [json.loads(line) for line in tpctl_ok('replay', dat).splitlines()]
    check(any(r.get('event') == 'sched:sched_switch' for r in records), 'no sched_switch recorded')
    counts = [int(re.search(r'tpctl: (\d+) records', p.stderr_text())[1]) for p in procs[:2]]
    check(counts[1] > counts[0], f'record --stack to Perfetto took {counts[1]} records, the data file '
                                 f'{counts[0]}: no stack records')
    for path in (pf, spf):
        trace = check_trace(path, records, os.path.basename(path), live=True)
        check_start_tree(trace, before, after, os.path.basename(path))
        tree = [t for p in trace['packet'] for t in p.get('process_tree', [])][0]
        named = [one(t, 'name') for t in tree['threads'] if one(t, 'tid') == hostile.pid]
        check(named == ['a) b (\ufffd\n)'], f'the process named to confuse is {named} in the tree')
        check_clock(trace, written_ns)
    check_states(decode(pf), dat)
    mode = os.stat(pf).st_mode & 0o777
    check(mode == 0o600, f'the recorded trace is mode {mode:o}, not 600')
    left = [f for f in os.listdir(ctx.tmpdir) if f.startswith('.tpctl-record-')]
    check(not left, f'record left temporary files: {left}')
    # Errors: a trace to a terminal is refused; --size and rotation are for files that can be cut.
    r = tpctl('--socket', tpd.socket, 'record', '-o', os.path.join(ctx.tmpdir, 'y.pftrace'), '--size', '1', *selection)
    check(r.returncode == 2 and b'--size' in r.stderr, f'record --size to Perfetto: {r.returncode} {r.stderr!r}')
    r = tpctl('--socket', tpd.socket, 'stream', '--format', 'xml', *selection)
    check(r.returncode == 2 and b'--format' in r.stderr, f'stream --format xml: {r.returncode} {r.stderr!r}')


def overruns(ctx):
    """A record -o x.perfetto-trace while tpd is stopped and a storm of getppid calls overruns the
    kernel's buffer on one CPU: the trace's per-CPU overrun counts equal the kernel's losses."""
    log('--- overruns: a Perfetto trace counts the losses where the kernel counted them')
    tpd = ctx.tpd()
    cpu = T.online_cpus()[0]
    gen = ctx.gen('GEN_GETPPID', '--count', 300_000, '--cpu', cpu)
    after_gen = ctx.gen('GEN_GETPPID', '--count', 100, '--cpu', cpu)
    out = os.path.join(ctx.tmpdir, 'overrun.pftrace')
    flt = f'common_pid == {gen.pids()[0]} || common_pid == {after_gen.pids()[0]}'
    # The kernel's filter: what it writes is the generators' alone.
    tpd.tpctl_ok('enable', '-f', flt, 'syscalls:sys_enter_getppid')
    rec = T.Process(ctx, 'record-overrun', [T.env_program('TPCTL'), '--socket', tpd.socket, 'record', '-o', out,
                                            '-e', 'syscalls:sys_enter_getppid', '--filter', flt],
                    stdout=subprocess.DEVNULL)
    time.sleep(1.0)
    check(rec.running(), f'tpctl record exited: {rec.stderr_text()!r}')
    before = tpd.stats()
    T.run_while_stopped(tpd.process, gen)
    time.sleep(1.0)
    after_gen.go()  # a loss shows before the next record of its CPU
    after_gen.wait_done(30)
    time.sleep(1.0)
    delta = T.stats_delta(before, tpd.stats())
    rec.signal(signal.SIGINT)
    check(rec.wait(60) == 0, f'tpctl record exited with an error: {rec.stderr_text()!r}')
    kernel = {c: d.get('overrun', 0) + d.get('dropped events', 0) + d.get('commit overrun', 0)
              for c, d in delta.items()}
    check(kernel.get(cpu, 0) > 0, f'the kernel lost nothing on CPU {cpu}: the test did not overrun it')
    trace = decode(out)
    end = [s for p in trace['packet'] for s in p.get('ftrace_stats', []) if one(s, 'phase') == 2]
    check(len(end) == 1, f'{len(end)} end-of-trace stats')
    got = {one(c, 'cpu'): one(c, 'overrun', 0) for c in end[0].get('cpu_stats', [])}
    for c in set(got) | {c for c, n in kernel.items() if n}:
        check(got.get(c, 0) == kernel.get(c, 0), f'CPU {c}: the trace counts {got.get(c)} overruns, the kernel '
                                                  f'{kernel.get(c, 0)}')
    events = sum(len(v) for v in events_per_cpu(trace).values())
    check(events + kernel[cpu] == T.written(delta), f'{events} events + {kernel[cpu]} lost != {T.written(delta)} '
                                                    'the kernel wrote')
    log(f'overruns: CPU {cpu}: {got.get(cpu)} in the trace as in the kernel\'s stats; {events} events')
    tpd.stop()


# Names itself "a) b (\xff\n)" (PR_SET_NAME) and waits to be killed.
HOSTILE_NAME = """
import ctypes, time
ctypes.CDLL(None).prctl(15, b'a) b (\\xff\\n)', 0, 0, 0)
time.sleep(600)
"""


# Writes "tpd-clock NS" to the marker file argv[1] once told on stdin, NS its CLOCK_REALTIME then,
# and NS to argv[2].
CLOCK_WRITER = """
import sys, time, os
sys.stdin.readline()
fd = os.open(sys.argv[1], os.O_WRONLY)
ns = time.clock_gettime_ns(time.CLOCK_REALTIME)
os.write(fd, b'tpd-clock %d' % ns)
open(sys.argv[2], 'w').write(str(ns))
"""


def main(ctx):
    if not shutil.which('protoc'):
        raise T.TestSkip('protoc (Debian\'s protobuf-compiler) is not installed')
    synthetic(ctx)
    tpd = ctx.tpd()
    dat = os.path.join(ctx.tmpdir, 'x.dat')
    cpus = T.online_cpus()
    pingpong = ctx.gen('GEN_PINGPONG', '--count', ROUND_TRIPS, '--cpu', cpus[0])
    marker = ctx.gen('GEN_MARKER', '--instance', tpd.instance, '--count', MARKER_N, '--seq', '--cpu', cpus[-1],
                     '--wait', 'tpd-perfetto')
    pids = pingpong.pids() + marker.pids()
    selection = [a for e in EVENTS for a in ('-e', e)]
    rec = T.Process(ctx, 'record', [T.env_program('TPCTL'), '--socket', tpd.socket, 'record', '-o', dat,
                                    *selection, '--filter', ' || '.join(f'common_pid == {p}' for p in pids)],
                    stdout=subprocess.DEVNULL)
    time.sleep(1.0)
    check(rec.running(), f'tpctl record exited: {rec.stderr_text()!r}')
    T.record_ping_pong_and_markers(rec, pingpong, marker)

    ndjson = os.path.join(ctx.tmpdir, 'x.ndjson')
    text = tpctl_ok('replay', dat)
    with open(ndjson, 'wb') as f:
        f.write(text)
    records = [json.loads(line) for line in text.splitlines()]
    switches = sum(1 for r in records if r.get('event') == 'sched:sched_switch')
    check(switches >= 2 * ROUND_TRIPS, f'only {switches} sched_switch records for {ROUND_TRIPS} round trips')

    out = os.path.join(ctx.tmpdir, 'x.perfetto-trace')
    tpctl_ok('convert', dat, out)
    check_trace(out, records, 'x.dat')
    out2 = os.path.join(ctx.tmpdir, 'y.pftrace')
    tpctl_ok('convert', ndjson, out2)
    check_trace(out2, records, 'x.ndjson')

    # --format names the format whatever the name. Errors: an output name of no known format, a format
    # convert does not write, an input that is not a capture; nothing left behind.
    r = tpctl('convert', dat, os.path.join(ctx.tmpdir, 'x.txt'))
    check(r.returncode == 2 and b'perfetto-trace' in r.stderr, f'convert to .txt: {r.returncode} {r.stderr!r}')
    r = tpctl('convert', '--format', 'xml', dat, out)
    check(r.returncode == 2 and b'--format' in r.stderr, f'convert --format xml: {r.returncode} {r.stderr!r}')
    r = tpctl('convert', '--format=ndjson', dat, out)
    check(r.returncode == 2 and b'--format' in r.stderr, f'convert --format ndjson: {r.returncode} {r.stderr!r}')
    named = os.path.join(ctx.tmpdir, 'x.bin')
    tpctl_ok('convert', '--format', 'perfetto', dat, named)
    check(open(named, 'rb').read() == open(out, 'rb').read(), '--format perfetto: not the same trace')
    bad = os.path.join(ctx.tmpdir, 'bad.pftrace')
    r = tpctl('convert', os.path.join(ctx.tmpdir, 'missing.dat'), bad)
    check(r.returncode == 1 and not os.path.exists(bad), f'convert of a missing file: {r.returncode} {r.stderr!r}')
    # The trace holds what the capture holds: the user's alone, and no file is replaced or written
    # through a link; nothing is left beside it.
    mode = os.stat(out).st_mode & 0o777
    check(mode == 0o600, f'the trace is mode {mode:o}, not 600')
    before = open(out, 'rb').read()
    r = tpctl('convert', dat, out)
    check(r.returncode == 1 and b'exists' in r.stderr and open(out, 'rb').read() == before,
          f'convert over an existing file: {r.returncode} {r.stderr!r}')
    link = os.path.join(ctx.tmpdir, 'link.pftrace')
    os.symlink(os.path.join(ctx.tmpdir, 'target'), link)
    r = tpctl('convert', dat, link)
    check(r.returncode == 1 and not os.path.exists(os.path.join(ctx.tmpdir, 'target')),
          f'convert to a dangling link: {r.returncode} {r.stderr!r}')
    left = [f for f in os.listdir(ctx.tmpdir) if f.startswith('.tpctl-convert-')]
    check(not left, f'convert left temporary files: {left}')
    live(ctx, tpd, cpus)
    tpd.stop()
    overruns(ctx)


if __name__ == '__main__':
    T.run(main)
