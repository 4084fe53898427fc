#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Liveness: a single record reaches a running stream within 1 s, and idle means idle.

splice() only moves full pages, so a lone trace_marker write sits in a partial page until tpd's
flush timer reads it (docs/design.md §1, default 100 ms). A stream without -e (reading through a pipe, as
`tpctl stream | jq` would) must print a single marker write within 1 s, five times, at random phases
of the flush timer. Each record must be the write itself: ftrace:print from this process, buf as the
kernel stores it (the message plus the newline the kernel appends), ts on the boot clock between
the write and its arrival. Two consumers read the same stream: one with a blocking read() loop
(like `| jq`), one that waits in select() before each read() (like the event loops of Vector or
Fluent Bit); both must see every marker within the bound.

Idle: with an event enabled whose kernel filter matches nothing, 2 s pass without a single output
line, the daemon stays alive and answers, and neither tpd nor tpctl burns CPU (a busy loop, e.g. a
blocking splice with buffer_percent=0, would cost ~2 s of CPU here; the bound is 0.2 s). tpd goes
quiet: its flush timer sleeps and the first record wakes it (docs/design.md), so it wakes about
once a second (the instance check), not eleven times: at most IDLE_WAKEUPS_PER_S, counted as its
voluntary context switches from the moment the call that enabled the event has settled: its pins
saved (an fsync() sleeps), tpd quiet (its instance's buffer_percent reads 0) and waiting in
epoll_wait(). The single writes then come at random phases up to 1 s apart, so that
some wake a quiet tpd and some meet the flush timer.
"""

import json
import os
import random
import time

import tpdtest as T
from tpdtest import check, log

LATENCY_MAX_S = 1.0
IDLE_S = 2.0
IDLE_CPU_MAX_S = 0.2
# The check timer once a second, plus slack for a status call; the flush timer alone would be 10.
IDLE_WAKEUPS_PER_S = 3
IDLE_EVENT = 'syscalls:sys_enter_getppid'


def proc_cpu_seconds(pid):
    with open(f'/proc/{pid}/stat') as f:
        fields = f.read().rsplit(')', 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf('SC_CLK_TCK')


def thread_wakeups(pid):
    """Voluntary context switches of each of pid's threads: each is a sleep, so one per wake-up."""
    counts = {}
    for tid in os.listdir(f'/proc/{pid}/task'):
        try:
            with open(f'/proc/{pid}/task/{tid}/status') as f:
                counts[int(tid)] = next(int(line.split()[1]) for line in f
                                        if line.startswith('voluntary_ctxt_switches'))
        except FileNotFoundError:
            pass    # a thread that ended meanwhile
    return counts


def wakeups(pid):
    return sum(thread_wakeups(pid).values())


def buffer_percent(tpd):
    return T.read_text(os.path.join(tpd.instance_dir, 'buffer_percent')).strip()


def settled(tpd, event):
    """What still wakes tpd after a call that enables an event, or None once it is all done:
    - the pins are saved 200 ms after the last change (daemon/persist.c), and the save's fsync()s
      sleep on the disk: each such sleep is a voluntary context switch (41 in 2 s on one slow run);
    - tpd goes quiet (docs/design.md, "Quiet") three flushes after the last record or call, and a
      quiet tpd's instance has buffer_percent 0;
    - then its loop sleeps in epoll_wait()."""
    path = tpd.state_file
    try:
        with open(path) as f:
            pins = [p.get('event') for p in json.load(f).get('pins', [])]
    except (OSError, ValueError):
        pins = []
    if event not in pins:
        return f'the pins saved in {path} lack {event}: {pins}'
    if buffer_percent(tpd) != '0':
        return f'not quiet: buffer_percent {buffer_percent(tpd)}'
    wchan = T.read_text(f'/proc/{tpd.process.pid}/wchan').strip()
    if 'epoll' not in wchan and wchan != 'ep_poll':
        return f'its loop is in {wchan!r}, not waiting in epoll_wait()'
    return None


def wait_settled(tpd, event, timeout=5.0):
    """Returns how long after the call tpd took to have nothing left to do."""
    t0 = time.monotonic()
    while (why := settled(tpd, event)) is not None:
        check(time.monotonic() - t0 < timeout, f'tpd did not settle within {timeout} s of idleness: {why}; '
                                               f'log:\n{tpd.log()}')
        time.sleep(0.02)
    return time.monotonic() - t0


def main(ctx):
    tpd = ctx.tpd()
    # The same stream twice, read the two ways consumers read a pipe.
    streams = {'read': tpd.stream(pipe=True, consumer='read'), 'poll': tpd.stream(pipe=True, consumer='poll')}
    T.confirm_live(list(streams.values()), lambda: tpd.marker('tpdtest-probe'))
    # Let the probes' stragglers arrive, then forget them.
    time.sleep(0.5)
    for s in streams.values():
        s.poll()
        s.lines.clear()

    # --- idle
    # An enabled event that never fires: pid 0 (the idle task) makes no syscalls.
    tpd.tpctl_ok('enable', IDLE_EVENT, '--filter', 'common_pid == 0')
    # The idle spell starts once what the call set in motion is done.
    took = wait_settled(tpd, IDLE_EVENT)
    log(f'tpd settled {took:.2f} s after the enable call (pins saved, quiet, waiting in epoll_wait())')
    for s in streams.values():
        s.poll()
        s.lines.clear()
    cpu0_tpd = tpd.cpu_seconds()
    cpu0_ctl = {k: proc_cpu_seconds(s.pid) for k, s in streams.items()}
    threads0 = thread_wakeups(tpd.process.pid)
    stats0 = tpd.stats()
    time.sleep(IDLE_S)
    threads = thread_wakeups(tpd.process.pid)
    n_wakeups = sum(threads.values()) - sum(threads0.values())
    cpu_tpd = tpd.cpu_seconds() - cpu0_tpd
    cpu_ctl = {k: proc_cpu_seconds(s.pid) - cpu0_ctl[k] for k, s in streams.items()}
    log(f'idle {IDLE_S} s: tpd used {cpu_tpd:.3f} s CPU, tpctl ' +
        ', '.join(f'{v:.3f} s ({k})' for k, v in cpu_ctl.items()))
    check(tpd.running(), f'tpd died while idle; log:\n{tpd.log()}')
    check(cpu_tpd <= IDLE_CPU_MAX_S, f'tpd used {cpu_tpd:.3f} s of CPU in {IDLE_S} s idle (busy loop?)')
    log(f'idle {IDLE_S} s: tpd woke {n_wakeups} times')
    if n_wakeups > IDLE_WAKEUPS_PER_S * IDLE_S:
        # What woke it: which thread, whether it stayed quiet, whether the kernel wrote anything.
        per_thread = {tid: n - threads0.get(tid, 0) for tid, n in threads.items()}
        written = T.stats_delta(stats0, tpd.stats())
        log(f'wake-ups per thread {per_thread}; buffer_percent now {buffer_percent(tpd)}; '
            f'per-CPU stats over the spell {written}; status: {tpd.tpctl("status").stdout!r}')
    check(n_wakeups <= IDLE_WAKEUPS_PER_S * IDLE_S, f'tpd woke {n_wakeups} times in {IDLE_S} s idle (bound '
                                                    f'{IDLE_WAKEUPS_PER_S * IDLE_S:.0f}): not quiet')
    for k, s in streams.items():
        s.poll()
        check(not s.lines, f'output while idle (nothing was traced): {s.lines[:3]}')
        check(s.running(), f'tpctl stream died while idle: {s.stderr_text()!r}')
        check(cpu_ctl[k] <= IDLE_CPU_MAX_S, f'tpctl stream used {cpu_ctl[k]:.3f} s of CPU in {IDLE_S} s idle '
                                            f'(busy loop?)')
    tpd.tpctl_ok('status')

    # --- latency of single writes
    latencies = {k: [] for k in streams}
    for i in range(5):
        # A random phase against the flush timer, and a fresh (partial) page each time.
        time.sleep(random.uniform(0.15, 1.0))
        msg = f'tpdtest-live {ctx.rand} {i}'
        b0 = T.boottime_ns()
        t0 = time.monotonic()
        tpd.marker(msg)
        matches = {}
        deadline = t0 + LATENCY_MAX_S + 4      # wait longer than the bound to tell late from never
        while len(matches) < len(streams) and time.monotonic() < deadline:
            for k, s in streams.items():
                if k not in matches and s.poll():
                    for line in s.lines:
                        rec = T.parse_record(line)
                        if rec.get('event') == 'ftrace:print' and msg in rec['fields'].get('buf', ''):
                            matches[k] = (rec, time.monotonic() - t0)
                            break
            time.sleep(0.002)
        b1 = T.boottime_ns()
        for k, s in streams.items():
            check(k in matches, f'marker {msg!r} did not reach the {k} consumer of tpctl stream within '
                                f'{LATENCY_MAX_S + 4} s; got {s.lines[:3]} (a tpctl blocked in splice() from '
                                f'the socket into the pipe holds the pipe lock, so the reader cannot take '
                                f'what is already in the pipe)')
            rec, latency = matches[k]
            latencies[k].append(latency)
            check(latency <= LATENCY_MAX_S, f'marker {i} took {latency:.3f} s to reach the {k} consumer of tpctl '
                                            f'stream (bound {LATENCY_MAX_S} s)')
            check(len(s.lines) == 1, f'expected exactly the marker record, got {len(s.lines)} lines: {s.lines[:3]}')
            f = rec['fields']
            check(rec['pid'] == os.getpid(), f'marker record pid {rec["pid"]}, expected the writer {os.getpid()}')
            check(list(f) == ['ip', 'buf'], f'ftrace:print fields {list(f)}, expected ["ip", "buf"]')
            # The kernel appends "\n" to a marker that does not end with one (kernel 6.18).
            check(f['buf'] == msg + '\n', f'buf {f["buf"]!r}, expected {msg + chr(10)!r}')
            # ip is 'unsigned long' in the format (not a pointer type), so a JSON integer: the
            # address of the kernel's marker-writing function.
            check(isinstance(f['ip'], int) and f['ip'] > 0, f'ip {f["ip"]!r} is not a positive integer')
            check(b0 <= rec['ts'] <= b1, f'ts {rec["ts"]} outside [{b0}, {b1}] (boot clock at write and arrival)')
            check(rec['cpu'] in T.online_cpus(), f'cpu {rec["cpu"]} is not an online CPU')
            s.lines.clear()
        log(f'marker {i}: ' + ', '.join(f'{matches[k][1] * 1000:.1f} ms ({k})' for k in streams))

    log('max latency: ' + ', '.join(f'{max(v) * 1000:.1f} ms ({k})' for k, v in latencies.items()))
    check(tpd.running(), 'tpd died')
    for s in streams.values():
        s.stop()
    tpd.stop()


if __name__ == '__main__':
    T.run(main)
