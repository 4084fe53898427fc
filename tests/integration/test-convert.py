#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""`tpctl convert IN.ndjson OUT.dat`: the round trip NDJSON -> .dat -> `tpctl replay`.

A pipe ping-pong, 1,000 numbered markers, the ping-pong's system calls and an exec, recorded as
NDJSON by `tpctl record` from a real tpd. The events cover every kind of field the decoder prints:
integers signed and unsigned of each width (sched_switch), char arrays (its comms), an integer
array (raw_syscalls:sys_enter's args), a __data_loc string (sched_process_exec's filename) and a
string to the end of the record (print's buf). Converted to a data file and replayed, each CPU's
records are the capture's, line for line, byte for byte: only "comm" may differ for a task that
was renamed while recorded (an exec), since a data file names each pid once. trace-cmd reads the
file too. Losses (a lost record put in the capture) come back as many, on the same CPU, at the same
time. Bad input (a line that is not JSON, an unknown event, a field of another type, a data file
as input) ends with a message naming the line, and leaves no file.
"""

import collections
import json
import os
import re
import subprocess
import sys
import time

import tpdtest as T
from tpdtest import check, log

REPORT_RE = re.compile(r'^\s*.*-(\d+)\s+\[(\d+)\]\s*(\d+)\.(\d{9}): \w+:', re.M)
EVENTS = ['sched:sched_switch', 'sched:sched_waking', 'ftrace:print', 'raw_syscalls:sys_enter',
          'sched:sched_process_exec']
ROUND_TRIPS = 1_000
MARKER_N = 1_000

# Waits for a line on stdin, then becomes /bin/true: a sched_process_exec with a __data_loc string.
EXEC = 'import os, sys; sys.stdin.readline(); os.execv("/bin/true", ["true"])'


tpctl = T.tpctl
tpctl_ok = T.tpctl_ok


def counts_cpu(lines):
    return collections.Counter(json.loads(line).get('cpu') for line in lines if '"cpu"' in line)


def per_cpu(lines):
    out = collections.defaultdict(list)
    for line in lines:
        out[json.loads(line).get('cpu')].append(line)
    return out


def compare(original, replayed, what):
    """Per CPU, the replayed lines are the original ones; "comm" of renamed pids excepted."""
    names = collections.defaultdict(set)
    for line in original:
        r = json.loads(line)
        if 'comm' in r:
            names[r['pid']].add(r['comm'])
    renamed = {p for p, s in names.items() if len(s) > 1}

    def norm(line):
        r = json.loads(line)
        if r.get('pid') in renamed:
            r.pop('comm', None)
            return json.dumps(r)
        return line

    a, b = per_cpu(original), per_cpu(replayed)
    check(set(a) == set(b), f'{what}: CPUs {sorted(b)} replayed, {sorted(a)} recorded')
    exact = 0
    for cpu in a:
        check(len(a[cpu]) == len(b[cpu]), f'{what}: CPU {cpu}: {len(b[cpu])} records replayed, {len(a[cpu])} '
                                          'recorded')
        for i, (x, y) in enumerate(zip(a[cpu], b[cpu])):
            check(norm(x) == norm(y), f'{what}: CPU {cpu}, record {i}:\n  recorded {x!r}\n  replayed {y!r}')
            exact += x == y
    log(f'{what}: {sum(len(v) for v in a.values())} records on {len(a)} CPUs equal, {exact} byte for byte; '
        f'renamed pids: {sorted(renamed)}')
    return renamed


def record(ctx, tpd, out):
    cpus = T.online_cpus()
    pingpong = ctx.gen('GEN_PINGPONG', '--count', ROUND_TRIPS, '--cpu', cpus[0])
    marker = ctx.gen('GEN_MARKER', '--instance', tpd.instance, '--count', MARKER_N, '--seq', '--cpu', cpus[-1],
                     '--wait', 'tpd-convert')
    execer = subprocess.Popen([sys.executable, '-c', EXEC], stdin=subprocess.PIPE)
    pids = pingpong.pids() + marker.pids() + [execer.pid]
    rec = T.Process(ctx, 'record', [T.env_program('TPCTL'), '--socket', tpd.socket, 'record', '-o', out,
                                    *[a for e in EVENTS for a in ('-e', e)],
                                    '--filter', ' || '.join(f'common_pid == {p}' for p in pids)],
                    stdout=subprocess.DEVNULL)
    time.sleep(1.0)
    check(rec.running(), f'tpctl record exited: {rec.stderr_text()!r}')
    execer.stdin.write(b'go\n')
    execer.stdin.close()
    check(execer.wait(30) == 0, 'the exec did not run')
    T.record_ping_pong_and_markers(rec, pingpong, marker)
    return execer.pid


def main(ctx):
    tpd = ctx.tpd()
    ndjson = os.path.join(ctx.tmpdir, 'x.ndjson')
    execer = record(ctx, tpd, ndjson)
    original = open(ndjson).read().splitlines()
    counts = collections.Counter(json.loads(line).get('event') for line in original)
    for e in EVENTS:
        check(counts[e] > 0, f'no {e} recorded: {dict(counts)}')
    check(counts['ftrace:print'] == MARKER_N, f'{counts["ftrace:print"]} markers recorded, not {MARKER_N}')

    dat = os.path.join(ctx.tmpdir, 'x.dat')
    tpctl_ok('convert', ndjson, dat)
    renamed = compare(original, tpctl_ok('replay', dat).decode().splitlines(), 'NDJSON -> .dat -> replay')
    check(renamed <= {execer} | {json.loads(line)['pid'] for line in original
                                 if json.loads(line).get('comm', '').startswith('kworker')},
          f'pids renamed other than the exec and kernel workers: {renamed}')
    mode = os.stat(dat).st_mode & 0o777
    check(mode == 0o600, f'the data file is mode {mode:o}, not 600')
    # trace-cmd reads the file: every record, with its CPU, pid and time (in seconds: the capture
    # does not say its clock).
    r = subprocess.run(['trace-cmd', 'report', '-N', '-t', dat], capture_output=True, text=True, errors='replace',
                       timeout=120)
    check(r.returncode == 0 and not r.stderr.strip(), f'trace-cmd report: {r.returncode} {r.stderr[:500]!r}')
    reported = sorted((int(m[2]), int(m[1]), int(m[3]) * 10**9 + int(m[4]))
                      for m in REPORT_RE.finditer(r.stdout))
    expected = sorted((rec['cpu'], rec['pid'], rec['ts']) for rec in map(json.loads, original) if 'event' in rec)
    check(reported == expected, f'trace-cmd report reads {len(reported)} records, the capture has {len(expected)}; '
                                'or their CPUs, pids or times differ')

    # Losses: a lost record before the 10th record of a CPU comes back, its count, CPU and time.
    cpu = json.loads(original[0])['cpu']
    at = [i for i, line in enumerate(original) if json.loads(line).get('cpu') == cpu][9]
    lost = json.dumps({'ts': json.loads(original[at])['ts'] - 1000, 'cpu': cpu, 'lost': 1234, 'cause': 'overrun'},
                      separators=(',', ':'))
    with_loss = original[:at] + [lost] + original[at:]
    lossy = os.path.join(ctx.tmpdir, 'lossy.ndjson')
    open(lossy, 'w').write(''.join(line + '\n' for line in with_loss))
    lossy_dat = os.path.join(ctx.tmpdir, 'lossy.dat')
    tpctl_ok('convert', lossy, lossy_dat)
    compare(with_loss, tpctl_ok('replay', lossy_dat).decode().splitlines(), 'with a loss')

    # Bad input: a clear error naming the line, exit 1, no file, nothing left behind.
    def path_of(name):
        return os.path.join(ctx.tmpdir, name + '.ndjson').encode()

    def bad(name, lines, expect):
        path = path_of(name).decode()
        out = os.path.join(ctx.tmpdir, name + '.dat')
        open(path, 'wb').write(b''.join((line if isinstance(line, bytes) else line.encode()) + b'\n'
                                        for line in lines))
        r = tpctl('convert', path, out)
        check(r.returncode == 1 and expect in r.stderr and not os.path.exists(out),
              f'convert of {name}: {r.returncode} {r.stderr!r}')

    switch = next(json.loads(line) for line in original if '"sched:sched_switch"' in line)
    bad('not-json', original[:3] + ['{"ts":1,'], b'line 4 ')
    unknown = dict(switch, event='nosuch:event')
    bad('unknown', [json.dumps(unknown)], b'nosuch:event')
    path_like = dict(switch, event='../..:format')
    bad('path', [json.dumps(path_like)], b'not an event name')
    wrong = dict(switch, fields=dict(switch['fields'], prev_pid='1'))
    bad('wrong-type', original[:2] + [json.dumps(wrong)], b'line 3 of \'' + path_of('wrong-type') + b'\': "prev_pid" does not fit')
    big = dict(switch, fields=dict(switch['fields'], prev_prio=1 << 40))
    bad('out-of-range', [json.dumps(big)], b'prev_prio')
    extra = dict(switch, fields=dict(switch['fields'], extra=1))
    bad('extra-field', [json.dumps(extra)], b'"fields" does not fit')
    huge = json.dumps(switch, separators=(',', ':')).replace(f'"prev_prio":{switch["fields"]["prev_prio"]}',
                                                            '"prev_prio":99999999999999999999')
    bad('beyond-64-bits', [huge], b'line 1 ')
    bad('not-utf8', [json.dumps(switch).encode().replace(b'"pid"', b'"\xffpid"')], b'line 1 ')

    # JSON written otherwise (members reordered, "cpu" after "event", as jq may) converts to the
    # same record, on its CPU.
    last_cpu = max(counts_cpu(original))
    rec = next(r for r in map(json.loads, original) if r.get('cpu') == last_cpu)
    moved = {'ts': rec['ts'], 'event': rec['event'], 'cpu': rec['cpu'], 'pid': rec['pid'], 'fields': rec['fields']}
    if 'comm' in rec:
        moved['comm'] = rec['comm']
    path = os.path.join(ctx.tmpdir, 'moved.ndjson')
    open(path, 'w').write(json.dumps(moved, separators=(',', ':')) + '\n')
    tpctl_ok('convert', path, os.path.join(ctx.tmpdir, 'moved.dat'))
    back = tpctl_ok('replay', os.path.join(ctx.tmpdir, 'moved.dat')).decode().splitlines()
    check(len(back) == 1 and json.loads(back[0]) == rec, f'reordered members: {back!r}, not {rec!r}')

    r = tpctl('convert', dat, os.path.join(ctx.tmpdir, 'again.dat'))
    check(r.returncode == 1 and b'already' in r.stderr, f'convert of a data file to .dat: {r.returncode} {r.stderr!r}')
    before = open(dat, 'rb').read()
    r = tpctl('convert', ndjson, dat)
    check(r.returncode == 1 and b'exists' in r.stderr and open(dat, 'rb').read() == before,
          f'convert over an existing file: {r.returncode} {r.stderr!r}')
    left = [f for f in os.listdir(ctx.tmpdir) if f.startswith('.tpctl-')]
    check(not left, f'convert left temporary files: {left}')
    tpd.stop()


if __name__ == '__main__':
    T.run(main)
