#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""No choice of pids makes tpd's command names cost more per record.

A ring of processes pinned to one CPU passes a byte round (tests/integration/gen-ring.c), so that
the stream of sched:sched_switch alternates between their pids record by record. Four runs, each
with a fresh tpd, alternating: with the pids the kernel hands out, and with pids that agree modulo
4096 (the ring forks until they come round), which collide under any cache indexed by the pid
modulo a power of two up to 4096. A direct-mapped cache so indexed made every record of the second ring a
/proc read: tpd's CPU per record grew eight-fold and the stream lost records.

Every run: a paced getppid generator on the other CPU is streamed beside it and must be counted
exactly; the books close exactly (records delivered to the two streams = records the instance's
per_cpu stats say were written, nothing lost); every ring record is named by its member's name; and
tpd's CPU per record (utime + stime from /proc) over the congruent rings is within 1.5x of that over
the others.
"""

import time

import tpdtest as T
from tpdtest import check, log

SWITCH = 'sched:sched_switch'
GETPPID = 'syscalls:sys_enter_getppid'
PROCS = 4
MODULUS = 4096
RATIO_MAX = 1.5
ROUNDS = 2
# Rates a sanitizer build keeps up with too (its names cost no more than the rest of a record);
# runs of about six seconds, so that tpd's CPU time (in clock ticks) is measured to a few per cent.
SCALE = max(1.0, T.SLOWDOWN / 4)
RING_RATE = int(10_000 / SCALE)
RING_ROUNDS = RING_RATE * 6
CALLS_RATE = int(10_000 / SCALE)
CALLS = CALLS_RATE * 5


class Tally:
    """Counts a stream's records of the wanted pids (with the name each must carry) and its losses."""

    def __init__(self, names):
        self.names = names
        self.reset()

    def reset(self):
        self.delivered = 0
        self.mine = 0
        self.lost = 0
        self.errors = []

    def feed(self, line):
        rec = T.parse_record(line)
        if 'lost' in rec:
            self.lost += rec['lost']
            return
        self.delivered += 1
        want = self.names.get(rec['pid'])
        if want is None:
            return
        self.mine += 1
        if rec.get('comm') != want and len(self.errors) < 5:
            self.errors.append(f'pid {rec["pid"]} should be named {want!r}: {line[:300]!r}')


def run(ctx, label, congruent, cpus):
    log(f'--- {label}')
    tpd = ctx.tpd()
    ring = ctx.gen('GEN_RING', '--procs', PROCS, *(['--congruent', MODULUS] if congruent else []),
                   '--count', RING_ROUNDS, '--rate', RING_RATE, '--cpu', cpus[-1])
    # Forking round to congruent pids takes a few thousand short-lived children per member.
    pids = [int(x) for x in ring.readline(timeout=90, what='its pids').split()]
    residues = {p % MODULUS for p in pids}
    check(len(pids) == PROCS, f'gen-ring printed {pids}, expected {PROCS} pids')
    if congruent:
        check(len(residues) == 1, f'ring pids {pids} are not congruent modulo {MODULUS}')
    elif len(residues) < PROCS:
        raise T.TestSkip(f'the kernel handed out ring pids {pids} that agree modulo {MODULUS}')
    calls = ctx.gen('GEN_GETPPID', '--count', CALLS, '--rate', CALLS_RATE, '--cpu', cpus[0])
    caller, = calls.pids()

    tpd.tpctl_ok('enable', SWITCH, '--filter', ' || '.join(f'common_pid == {p}' for p in pids))
    tpd.tpctl_ok('enable', GETPPID, '--filter', f'common_pid == {caller}')
    switches = Tally({p: f'tpd-ring-{i}' for i, p in enumerate(pids)})
    beside = Tally({caller: 'gen-getppid'})
    s_switch = tpd.stream('-e', SWITCH, sink=switches.feed)
    s_beside = tpd.stream('-e', GETPPID, sink=beside.feed)
    T.confirm_live([s_switch], ring.probe)
    T.confirm_live([s_beside], calls.probe)
    # The books open once the probes' records are in: from here every record is of the run.
    time.sleep(0.5)
    for s in (s_switch, s_beside):
        s.poll()
    switches.reset()
    beside.reset()
    before = tpd.stats()
    cpu0 = tpd.cpu_seconds()

    calls.go()
    ring.go()
    ring.wait_done(timeout=60 + RING_ROUNDS / RING_RATE * 4)
    calls.wait_done(timeout=60)
    # Both have exited: nothing of theirs is written any more.
    delta = T.stats_delta(before, tpd.stats())
    written = T.written(delta)

    def books():
        # Either stream's drain reads the other too.
        s_switch.poll()
        s_beside.poll()
        return switches.delivered + switches.lost + beside.delivered + beside.lost

    s_switch.drain(lambda: books() >= written, timeout=60)
    s_beside.drain(lambda: books() >= written, timeout=10)
    cpu = tpd.cpu_seconds() - cpu0
    s_switch.stop()
    s_beside.stop()
    tpd.stop()

    delivered = switches.delivered + beside.delivered
    per_record_us = cpu / max(delivered, 1) * 1e6
    log(f'{label}: pids {pids}; {switches.delivered} switches ({switches.mine} of the ring), '
        f'{beside.delivered} getppid calls; lost {switches.lost} + {beside.lost}, kernel lost '
        f'{T.kernel_lost(delta)}, written {written}; tpd CPU {cpu:.2f} s = {per_record_us:.3f} us/record')
    check(not switches.errors and not beside.errors, 'badly named records:\n  ' +
          '\n  '.join(switches.errors + beside.errors))
    check(T.kernel_lost(delta) == 0 and switches.lost == 0 and beside.lost == 0,
          f'{label}: records lost: stream {switches.lost} + {beside.lost}, kernel {T.kernel_lost(delta)} '
          f'(per CPU {delta})')
    check(delivered == written, f'{label}: {delivered} records delivered, the kernel wrote {written}')
    check(beside.mine == beside.delivered == CALLS, f'{label}: the stream beside got {beside.delivered} '
                                                    f'records ({beside.mine} of gen-getppid), {CALLS} calls made')
    check(switches.mine == switches.delivered >= PROCS * RING_ROUNDS,
          f'{label}: {switches.delivered} switches ({switches.mine} of the ring) for {RING_ROUNDS} rounds '
          f'of {PROCS}')
    return cpu, delivered


def main(ctx):
    cpus = T.online_cpus()
    totals = {False: [0.0, 0], True: [0.0, 0]}
    # Alternated, and summed over two runs of each: the rest of the machine sways how many records
    # tpd takes per wake-up, and so its CPU per record, from one run to the next.
    for i in range(ROUNDS):
        for congruent in (False, True):
            label = f'ring of pids congruent modulo {MODULUS}' if congruent else 'ring of pids as handed out'
            cpu, delivered = run(ctx, f'{label} ({i + 1}/{ROUNDS})', congruent, cpus)
            totals[congruent][0] += cpu
            totals[congruent][1] += delivered
    plain, congruent = (totals[k][0] / totals[k][1] * 1e6 for k in (False, True))
    ratio = congruent / plain
    log(f'tpd CPU per record: {congruent:.3f} us congruent, {plain:.3f} us as handed out: {ratio:.2f}x')
    check(ratio <= RATIO_MAX, f'pids congruent modulo {MODULUS} cost {ratio:.2f}x the CPU per record '
                              f'({congruent:.3f} us against {plain:.3f} us), more than {RATIO_MAX}x')


if __name__ == '__main__':
    T.run(main)
