#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Hostile filters cannot hurt: tpd parses every filter with its own grammar before libtraceevent or
the kernel sees it (issue 7: `prev_comm == "a\\"` crashed tpd inside libtraceevent 1.7).

A well-behaved stream of syscalls:sys_enter_getppid (kernel filter 'common_pid == GEN') counts a
paced generator while a corpus of hostile filters is sent, each as a Stream filter and as an Enable
filter (for sched:sched_switch, whose kernel filter 'prev_pid == 1' was set before, and for the
good stream's own event): backslashes before the closing quote, escapes, unbalanced and
unterminated quotes, 200-deep nesting, 64 KiB, control bytes (a "\\n<0>" that would forge a journal
line, terminal escapes), huge and octal numbers, unknown fields, type mismatches.

Each gets InvalidFilter (InvalidParameter when longer than the protocol's filter limit; a call
larger than a whole message closes that connection), tpd stays alive, the kernel filters set
before are unchanged, the good stream is exact (delivered + lost = the kernel's written, and with
the paced generator nothing is lost), and the tpd log holds no control byte from the attack. Valid
but unusual filters come back in canonical form, which the kernel accepts as written.
"""

import os
import re
import time

import tpdtest as T
from tpdtest import check, log

EVENT = 'syscalls:sys_enter_getppid'
OTHER = 'sched:sched_switch'
# Never true (no task switches to itself): the instance's written count stays the generator's.
OTHER_FILTER = 'prev_pid == 1 && next_pid == 1'
SCALE = float(os.environ.get('TPD_TEST_SCALE', 1))
N = int(200_000 * SCALE)
RATE = 40_000
FILTER_MAX = 4096         # TPD_FILTER_MAX
MESSAGE_MAX = 64 * 1024   # TPD_MESSAGE_MAX


def hostile_corpus():
    deep = '(' * 200 + 'prev_pid == 1' + ')' * 200
    bang = '!' * 200 + 'prev_pid == 1'
    long_ok = ' && '.join(['prev_pid == 1'] * 4000)[:60 * 1024]
    return [
        'prev_comm == "a\\"',                      # issue 7: SIGSEGV in libtraceevent 1.7
        'prev_comm == "a\\\\"',
        'prev_comm == "a\\" || prev_pid == 1',
        'prev_comm == "\\x41"',
        'prev_comm == "a',
        "prev_comm == 'a",
        'prev_comm == "a" "b"',
        "prev_comm != 'it\"s'",
        'prev_comm == "',
        '"',
        "'",
        '(prev_pid == 1',
        'prev_pid == 1)',
        '((((',
        '))))',
        deep,
        bang,
        'prev_pid == 1\n<0>forged emergency line',
        'prev_comm == "a\n<0>forged emergency line"',
        'prev_comm == "\x1b[2J\x1b]0;owned\x07"',
        '\x1b[31mprev_pid == 1',
        'prev_pid == 1\x00',                        # an embedded NUL: refused as a parameter
        'prev_comm == "\x7f\x01\x02"',
        'prev_comm == "\xe9t\xe9"',
        'prev_pid == 99999999999999999999999999',
        'prev_pid == 0x1ffffffffffffffff',
        'prev_state == 9223372036854775808',
        'prev_pid == 0777',
        'common_type == -1',                        # unsigned: the kernel would refuse it
        'prev_pid == --1',
        'prev_state == -9223372036854775809',
        'prev_pid == 1e9',
        'no_such_field == 1',
        'COMM == "bash"',
        'CPU == 0',
        'prev_comm == 1',
        'prev_pid == "1"',
        'prev_comm < "a"',
        'prev_pid ~ "1*"',
        'prev_pid = 1',
        'prev_comm =~ "a.*"',
        'prev_pid == 1 | next_pid == 2',
        'prev_pid == 1 &&',
        'prev_pid ==',
        '',
        'sched/sched_switch:prev_pid == 1',
        'prev_pid == 1, next_pid == 2',
        'prev_comm == "' + 'a' * 300 + '"',
        ' && '.join(['prev_pid == 1'] * 200)[:FILTER_MAX],     # too many comparisons
        'x' * (FILTER_MAX + 1),                                 # over the protocol limit
        long_ok,                                                # 60 KiB: over the limit, fits a message
    ]


def main(ctx):
    tpd = ctx.tpd()
    gen = ctx.gen('GEN_GETPPID', '--count', N, '--cpu', 0, '--rate', RATE)
    pid, = gen.pids()
    own_filter = f'common_pid == {pid}'
    tpd.tpctl_ok('enable', EVENT, '--filter', own_filter)
    tpd.tpctl_ok('enable', OTHER, '--filter', OTHER_FILTER)
    filters_before = T.set_filters(tpd.instance_dir)
    check(filters_before.get(EVENT) == own_filter and filters_before.get(OTHER) == OTHER_FILTER,
          f'kernel filters not set as asked: {filters_before}')

    delivered = 0
    lost = {}

    def feed(line):
        nonlocal delivered
        rec = T.parse_record(line)
        if 'lost' in rec:
            lost[rec['cause']] = lost.get(rec['cause'], 0) + rec['lost']
        else:
            check(rec['pid'] == pid and rec['event'] == EVENT, f'record not from the generator: {line!r}')
            delivered += 1

    good = tpd.stream('-e', EVENT, sink=feed)
    T.confirm_live([good], gen.probe)
    pre = delivered
    before = tpd.stats()
    gen.go()

    corpus = hostile_corpus()
    keeper = tpd.varlink()
    outcomes = {}
    for bad in corpus:
        what = repr(bad[:60]) + (f'... ({len(bad)} bytes)' if len(bad) > 60 else '')
        oversize = len(bad.encode()) > FILTER_MAX or '\x00' in bad
        expected = ('org.varlink.service.InvalidParameter',) if oversize else ('io.tpd.tracing.InvalidFilter',)
        calls = [
            ('Stream', {'events': [OTHER], 'filter': bad}, {'more': True}),
            ('Stream', {'events': [EVENT], 'filter': bad}, {'more': True}),
            ('Stream', {'filter': bad}, {'more': True}),
            ('Enable', {'events': [OTHER], 'filter': bad}, {}),
            ('Enable', {'events': [EVENT], 'filter': bad}, {}),
        ]
        for method, params, flags in calls:
            if bad == '' and method == 'Enable':
                continue        # an empty kernel filter means "clear it": not an attack
            with tpd.varlink() as v:
                reply = v.call('io.tpd.tracing.' + method, params, **flags)
            err = reply.get('error')
            if bad == '' and method == 'Stream':
                check(err == 'io.tpd.tracing.InvalidFilter', f'{method} {params.get("events")} with an empty '
                                                               f'filter: {reply}')
                continue
            check(err in expected, f'{method} {params.get("events")} with filter {what}: expected '
                                   f'{expected}, got {reply}')
            msg = reply.get('parameters', {}).get('message', '')
            if err == 'io.tpd.tracing.InvalidFilter':
                check(msg, f'{method} with filter {what}: InvalidFilter without a message')
            check(not re.search(r'[\x00-\x1f\x7f]', msg), f'{method} with filter {what}: the message echoes '
                                                            f'control bytes: {msg!r}')
            outcomes[err] = outcomes.get(err, 0) + 1
            check(tpd.running(), f'tpd died after {method} with filter {what}; log:\n{tpd.log()}')
        # The headline attack through the real client too.
        if bad.startswith('prev_comm == "a\\"'):
            r = tpd.tpctl('stream', '-e', OTHER, '--filter', bad, timeout=10)
            check(r.returncode == 1, f'tpctl stream --filter {what} exited {r.returncode}; {r.stderr!r}')
            check('backslash' in r.stderr, f'tpctl stream --filter {what}: message does not say why: {r.stderr!r}')
        now = T.set_filters(tpd.instance_dir)
        check(now == filters_before, f'kernel filters changed after {what}: {filters_before} -> {now}')
        check('error' not in keeper.call('org.varlink.service.GetInfo'), f'GetInfo failed after {what}')
    log(f'{len(corpus)} hostile filters x 5 calls refused: {outcomes}')

    # A filter larger than a whole message closes that connection only.
    v = tpd.varlink()
    try:
        v.send('io.tpd.tracing.Stream', {'events': [OTHER], 'filter': 'prev_pid == 1 ' * (MESSAGE_MAX // 14 + 1)},
               more=True)
    except (BrokenPipeError, ConnectionResetError):
        pass
    check(v.wait_closed(3.0), 'a call larger than a message did not close its connection')
    v.close()
    check(tpd.running(), f'tpd died after a 64 KiB+ filter; log:\n{tpd.log()}')

    gen.wait_done(timeout=120)
    good.drain(lambda: delivered - pre + sum(lost.values()) >= N, timeout=60)
    after = tpd.stats()
    good.stop()
    written = T.written(T.stats_delta(before, after))
    run = delivered - pre
    log(f'good stream: {run} delivered, lost {lost}; kernel wrote {written}')
    check(written == N, f'kernel wrote {written} getppid events during the run, expected {N}')
    check(run + sum(lost.values()) == written,
          f'good stream: {run} delivered + {sum(lost.values())} lost != {written} written')
    check(not lost, f'good stream lost records at {RATE}/s: {lost}')

    # Valid but unusual (after the count: these match records): the kernel gets tpd's canonical
    # text, as written.
    for text, canonical in [
        ('prev_comm=="x\'y"&&!(next_pid==0x10||prev_prio<1)', 'prev_comm == "x\'y" && ! ( next_pid == 16 || prev_prio < 1 )'),
        ('prev_pid == 1 || next_pid == 2 && prev_prio == 3', 'prev_pid == 1 || ( next_pid == 2 && prev_prio == 3 )'),
        ('prev_comm ~ "ba*" && prev_state & 0x3', 'prev_comm ~ "ba*" && prev_state & 3'),
    ]:
        reply = tpd.call('io.tpd.tracing.Enable', {'events': [OTHER], 'filter': text})
        check('error' not in reply, f'Enable with filter {text!r}: {reply}')
        now = T.set_filters(tpd.instance_dir).get(OTHER)
        check(now == canonical, f'kernel filter after {text!r} is {now!r}, expected {canonical!r}')
        status = {e['name']: e for e in tpd.status().get('events', [])}
        check(status.get(OTHER, {}).get('filter') == canonical, f'status shows {status.get(OTHER)}')
        text = tpd.tpctl_ok('status').stdout
        check(canonical in text, f'tpctl status does not show {canonical!r}:\n{text}')
    # Stream filters too: "!" reaches libtraceevent pushed down, so it never sees "! (".
    s = tpd.stream('-e', OTHER, '--filter', '!(prev_pid == 1 || next_pid == 0) && prev_comm != "x\'y"')
    deadline = time.monotonic() + 10
    while tpd.status().get('streams') != 1:
        check(s.running(), f'a valid stream filter was refused: {s.stderr_text()!r}')
        check(time.monotonic() < deadline, 'the filtered stream did not start within 10 s')
        time.sleep(0.05)
    s.stop()
    tpd.tpctl_ok('enable', OTHER, '--filter', OTHER_FILTER)
    check(T.set_filters(tpd.instance_dir) == filters_before, 'kernel filters not restored')

    check(tpd.running(), f'tpd died; log:\n{tpd.log()}')
    keeper.close()
    tpd.stop()
    text = tpd.log(limit=10_000_000)
    bad_bytes = sorted({c for c in text if (ord(c) < 0x20 and c != '\n') or ord(c) == 0x7f})
    check(not bad_bytes, f'tpd log holds control bytes {bad_bytes!r}:\n{text[-3000:]}')
    stray = [line for line in text.splitlines() if not re.match(r'<\d>', line)]
    check(not stray, f'tpd log has lines without a priority (forged or split): {stray[:5]!r}')
    check('forged' not in text, 'tpd log mentions the forged line')


if __name__ == '__main__':
    T.run(main)
