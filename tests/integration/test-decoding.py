#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Decode workers (DecodeWorkers=, docs/design.md "Decoding on more than one core").

1. The default, auto: one thread per 8 CPUs tpd may run on (at least one; none on one CPU), none in
   use while idle; GetStatus "decoding" says so. Configure switches between auto and a number up to the threads tpd started
   with; more, or a value that is neither, is InvalidParameter and changes nothing.
2. With two threads, numbered trace_marker writes on both CPUs (paced, so that writing lasts a
   few seconds) while Configure moves the decoding between the loop, one worker and two every few
   milliseconds: each CPU's numbers arrive strictly increasing (a CPU's pages never pass each other
   between threads), and delivered + reported lost equals what each writer wrote, which the kernel
   confirms. The changes are counted while the writers write.
"""

import os
import threading
import time

import tpdtest as T
from tpdtest import check, log

MARKER_N = int(os.environ.get('TPD_TEST_MARKER_N', 200_000))
MARKER_RATE = 80_000    # per writer: 2.5 s of writing
SWITCH_EVERY_S = 0.005


def decoding(tpd):
    return tpd.status()['decoding']


def configure(tpd, value):
    return tpd.call('io.tpd.tracing.Configure', {'decode_workers': value})


def case_settings(ctx):
    log('--- 1. auto, and Configure')
    tpd = ctx.tpd()
    # tpd runs on the CPUs this test may run on.
    usable = len(os.sched_getaffinity(0))
    threads = 0 if usable < 2 else max(1, usable // 8)
    d = decoding(tpd)
    check(d == {'workers': threads, 'active': 0, 'auto': True, 'changes': 0},
          f'an idle tpd on {usable} CPUs decodes {d}, expected {threads} thread(s), none in use, auto')
    if threads == 0:
        log('one CPU: no decode threads, nothing to configure')
        tpd.stop()
        return

    r = configure(tpd, threads)
    check('error' not in r, f'Configure decode_workers={threads}: {r}')
    d = decoding(tpd)
    check(d == {'workers': threads, 'active': threads, 'auto': False, 'changes': 1},
          f'after decode_workers={threads}: {d}')
    check(tpd.status()['settings']['decode_workers'] == str(threads),
          f'settings show decode_workers {tpd.status()["settings"]["decode_workers"]!r}')

    for bad in (threads + 1, 'x', '-1', '', 65):
        r = configure(tpd, bad)
        check(r.get('error') == 'org.varlink.service.InvalidParameter' and
              r.get('parameters', {}).get('parameter') == 'decode_workers',
              f'Configure decode_workers={bad!r}: {r}, expected InvalidParameter')
    check(decoding(tpd)['active'] == threads, 'a refused Configure changed the workers in use')

    r = configure(tpd, 'auto')
    check('error' not in r, f'Configure decode_workers=auto: {r}')
    d = decoding(tpd)
    check(d == {'workers': threads, 'active': 0, 'auto': True, 'changes': 2},
          f'back to auto: {d}, expected the loop decoding again')
    r = configure(tpd, 0)
    check('error' not in r and decoding(tpd)['auto'] is False, f'Configure decode_workers=0: {r}')
    tpd.stop()

    tpd = ctx.tpd(args=['--decode-workers=0'])
    d = decoding(tpd)
    check(d == {'workers': 0, 'active': 0, 'auto': False, 'changes': 0}, f'--decode-workers=0: {d}')
    r = configure(tpd, 'auto')
    check(r.get('error') == 'org.varlink.service.InvalidParameter',
          f'auto without threads should be refused (they are made at start): {r}')
    tpd.stop()


class Tally:
    """Numbered markers of two writers, one per CPU."""

    def __init__(self, tags):
        self.tags = {t + ' ': cpu for cpu, t in tags.items()}
        self.last = {cpu: -1 for cpu in tags}
        self.got = {cpu: 0 for cpu in tags}
        self.lost = {cpu: 0 for cpu in tags}
        self.errors = []

    def error(self, msg):
        if len(self.errors) < 5:
            self.errors.append(msg)

    def feed(self, line):
        rec = T.parse_record(line)
        if 'lost' in rec:
            if rec['cpu'] in self.lost:
                self.lost[rec['cpu']] += rec['lost']
            return
        buf = rec['fields'].get('buf', '').rstrip('\n')
        for tag, cpu in self.tags.items():
            if buf.startswith(tag):
                seq = int(buf[len(tag):])
                if rec['cpu'] != cpu:
                    self.error(f'writer pinned on CPU {cpu} wrote on CPU {rec["cpu"]}: {line!r}')
                if seq <= self.last[cpu]:
                    self.error(f'CPU {cpu}: {seq} after {self.last[cpu]}, reordered or duplicated')
                self.last[cpu] = seq
                self.got[cpu] += 1
                return

    def done(self, n):
        return all(self.got[c] + self.lost[c] >= n for c in self.got)


def case_switching(ctx):
    log(f'--- 2. {MARKER_N} numbered markers on each CPU while the decoding changes hands')
    tpd = ctx.tpd(args=['--decode-workers=2'])
    cpus = (0, 1)
    tally = Tally({cpu: f'tpdwk{cpu}-{ctx.rand}' for cpu in cpus})
    stream = tpd.stream('-e', 'ftrace:print', sink=tally.feed)
    gens = [ctx.gen('GEN_MARKER', '--instance', tpd.instance, '--count', MARKER_N, '--rate', MARKER_RATE, '--seq',
                    '--cpu', cpu, '--wait', f'tpdwk{cpu}-{ctx.rand}') for cpu in cpus]
    for g in gens:
        g.pids()
    T.confirm_live([stream], lambda: tpd.marker('tpdtest-probe'))
    # The probes are read out (a flush interval) before the books start: none is left in a buffer
    # for the writers to overwrite.
    time.sleep(0.3)
    stream.poll()

    stop = threading.Event()
    switches = [0]
    refused = []

    def switch():
        values = (0, 1, 2, 'auto', 1, 0, 2)
        i = 0
        while not stop.is_set():
            r = configure(tpd, values[i % len(values)])
            if 'error' in r:
                refused.append(r)
            switches[0] += 1
            i += 1
            time.sleep(SWITCH_EVERY_S)

    before = tpd.stats()
    switcher = threading.Thread(target=switch)
    switcher.start()
    try:
        changes_before = decoding(tpd)['changes']
        for g in gens:
            g.command('go')
        for g in gens:
            g.wait_done(timeout=60)
        changes = decoding(tpd)['changes'] - changes_before
        stream.drain(lambda: tally.done(MARKER_N), timeout=120)
    finally:
        stop.set()
        switcher.join()
    after = tpd.stats()
    stream.stop()

    delta = T.stats_delta(before, after)
    log(f'{switches[0]} Configure calls, {changes} changes of the workers in use while writing; per CPU delivered '
        f'{tally.got}, lost {tally.lost}; kernel written {T.written(delta)}')
    check(not refused, f'Configure refused a change: {refused[:2]}')
    check(not tally.errors, 'bad records:\n  ' + '\n  '.join(tally.errors))
    check(T.written(delta) == len(cpus) * MARKER_N,
          f'kernel stats say {T.written(delta)} written, expected {len(cpus) * MARKER_N}')
    for cpu in cpus:
        check(tally.got[cpu] + tally.lost[cpu] == MARKER_N,
              f'CPU {cpu}: {tally.got[cpu]} delivered + {tally.lost[cpu]} lost != {MARKER_N} written')
    check(changes >= 10, f'only {changes} changes of the workers in use while the writers wrote: the test proves little')
    for cpu in cpus:
        check(tally.got[cpu] >= MARKER_N // 10,
              f'CPU {cpu}: only {tally.got[cpu]} of {MARKER_N} delivered: too few to prove their order')
    tpd.stop()


def main(ctx):
    # Under meson test --setup workers every tpd gets --decode-workers=2 last: not the default.
    if any(a.startswith('--decode-workers') for a in T.DAEMON_ARGS):
        log('case 1 left out: it checks the default, which TPD_TEST_DAEMON_ARGS overrides')
    else:
        case_settings(ctx)
    case_switching(ctx)


if __name__ == '__main__':
    T.run(main)
