#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Per-stream selection: -p PID, -c CPU and --filter EXPR each get exactly their records.

Two getppid generators, A pinned to CPU 0 and B pinned to the last CPU, N calls each; one kernel
filter admits both pids. Four streams of syscalls:sys_enter_getppid run at once:
  all       (no selection)            -> exactly 2N run records, N of each pid
  -p A                                -> exactly N, all of pid A
  -c CPU_B                            -> exactly N, all on CPU_B (so all of pid B)
  --filter 'common_pid == B'          -> exactly N, all of pid B (tpd's userspace filter)
Run records are those with ts at or after their generator's "go"; nothing may be lost.
"""

import tpdtest as T
from tpdtest import check, log

EVENT = 'syscalls:sys_enter_getppid'
N = 5_000


def main(ctx):
    cpus = T.online_cpus()
    cpu_a, cpu_b = cpus[0], cpus[-1]
    tpd = ctx.tpd()
    gen_a = ctx.gen('GEN_GETPPID', '--count', N, '--cpu', cpu_a)
    gen_b = ctx.gen('GEN_GETPPID', '--count', N, '--cpu', cpu_b)
    pid_a, = gen_a.pids()
    pid_b, = gen_b.pids()
    tpd.tpctl_ok('enable', EVENT, '--filter', f'common_pid == {pid_a} || common_pid == {pid_b}')

    if cpu_a != cpu_b:
        def on_cpu_b(r):
            return r['cpu'] == cpu_b and r['pid'] == pid_b
        n_cpu_b = N
    else:   # a one-CPU machine: both generators share it
        def on_cpu_b(r):
            return r['cpu'] == cpu_b
        n_cpu_b = 2 * N
    streams = {
        'all': (tpd.stream('-e', EVENT), lambda r: r['pid'] in (pid_a, pid_b), 2 * N),
        f'-p {pid_a}': (tpd.stream('-e', EVENT, '-p', str(pid_a)), lambda r: r['pid'] == pid_a, N),
        f'-c {cpu_b}': (tpd.stream('-e', EVENT, '-c', str(cpu_b)), on_cpu_b, n_cpu_b),
        f'--filter common_pid == {pid_b}': (tpd.stream('-e', EVENT, '--filter', f'common_pid == {pid_b}'),
                                            lambda r: r['pid'] == pid_b, N),
    }

    def probe():
        gen_a.probe()
        gen_b.probe()
    T.confirm_live([s for s, _, _ in streams.values()], probe)

    # A record belongs to the run if it is at or after its own generator's "go".
    go_ts = {pid_a: gen_a.go(), pid_b: gen_b.go()}
    gen_a.wait_done(timeout=60)
    gen_b.wait_done(timeout=60)

    for name, (s, want, expected) in streams.items():
        def run_records(s=s):
            recs = s.records()
            return [r for r in recs if 'lost' in r or r['ts'] >= go_ts.get(r['pid'], 0)]
        s.drain(lambda: len(run_records()) >= expected, timeout=30)
        s.stop()
        recs = run_records()
        lost = [r for r in recs if 'lost' in r]
        check(not lost, f'stream {name}: lost records {lost[:3]}')
        wrong = [r for r in recs if not want(r)]
        check(not wrong, f'stream {name}: {len(wrong)} records outside its selection, e.g. {wrong[:2]}')
        check(len(recs) == expected, f'stream {name}: {len(recs)} run records, expected {expected}')
        # Also the probes must respect the selection.
        wrong = [r for r in s.records() if not want(r)]
        check(not wrong, f'stream {name}: probe records outside its selection, e.g. {wrong[:2]}')
        log(f'stream {name}: {len(recs)} run records, all selected')

    tpd.stop()


if __name__ == '__main__':
    T.run(main)
