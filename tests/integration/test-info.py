#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""list, describe, status, call, Configure, start options and tpctl's exit codes.

- `tpctl list 'sched:*'` names exactly the kernel's sched events (glob, not regex); '*:sched_switch'
  only sched:sched_switch; raw ListEvents reports `enabled` truthfully.
- `tpctl describe sched:sched_switch` shows next_pid; raw DescribeEvent matches the format file
  (id, every non-common field with its size and signedness, the print fmt).
- `tpctl status --json` is JSON with the instance, the 'boot' clock, the default flush interval,
  one counter set per online CPU equal to the kernel's per_cpu stats (after 100 marker writes the
  written counters grew by exactly 100), pinned and stream-held events with their counts.
- `tpctl call` prints reply parameters as JSON; GetInfo lists io.tpd.tracing and
  GetInterfaceDescription returns the interface file byte for byte (modulo trailing whitespace).
- Configure and the --buffer-size-kb / --flush-interval-ms options reach the instance.
- tpctl exits 2 on usage errors and 69 when the daemon cannot be reached.
"""

import fnmatch
import json
import os
import re
import subprocess
import time

import tpdtest as T
from tpdtest import check, log


def names_in(text):
    """Event names in tpctl's human output: whitespace-separated tokens of the form sys:event."""
    return {tok for tok in text.split() if T.EVENT_NAME_RE.match(tok)}


def format_file(event):
    sys_, ev = event.split(':')
    text = T.read_text(os.path.join(T.TRACEFS, 'events', sys_, ev, 'format'))
    fields = {}
    for m in re.finditer(r'field:(.*?);\s*offset:(\d+);\s*size:(\d+);\s*signed:(\d+);', text):
        decl = m.group(1).strip()
        name = re.sub(r'\[.*\]$', '', decl.split()[-1])
        fields[name] = {'size': int(m.group(3)), 'signed': m.group(4) == '1'}
    event_id = int(re.search(r'^ID: (\d+)$', text, re.M).group(1))
    print_fmt = text.split('print fmt: ', 1)[1].strip()
    return event_id, fields, print_fmt


def kernel_size_kb(instance_dir):
    text = T.read_text(os.path.join(instance_dir, 'buffer_size_kb')).split()
    return int(text[0]) if text and text[0].isdigit() else text


def is_about(size, kb):
    # The kernel rounds a size up to whole sub-buffers with their headers: 2048 reads back as 2051.
    return isinstance(size, int) and kb <= size <= kb + 64


def main(ctx):
    tpd = ctx.tpd()
    available = set(T.read_text(os.path.join(T.TRACEFS, 'available_events')).split())

    # --- list
    r = tpd.tpctl_ok('list', 'sched:*')
    listed = names_in(r.stdout)
    expected = {e for e in available if fnmatch.fnmatchcase(e, 'sched:*')}
    check('sched:sched_switch' in listed, f'tpctl list sched:* lacks sched:sched_switch: {r.stdout[:500]!r}')
    check(listed == expected, f'tpctl list sched:* differs from the kernel: extra {sorted(listed - expected)}, '
                              f'missing {sorted(expected - listed)}')
    r = tpd.tpctl_ok('list', '*:sched_switch')
    check(names_in(r.stdout) == {'sched:sched_switch'}, f'tpctl list *:sched_switch: {r.stdout!r}')
    r = tpd.tpctl_ok('list')
    check(len(names_in(r.stdout)) >= len(available), f'tpctl list shows {len(names_in(r.stdout))} events, '
                                                     f'the kernel has {len(available)}')

    tpd.tpctl_ok('enable', 'sched:sched_switch')
    reply = tpd.call('io.tpd.tracing.ListEvents', {'pattern': 'sched:sched_*'})
    check('error' not in reply, f'ListEvents: {reply}')
    events = {e['name']: e['enabled'] for e in reply['parameters']['events']}
    check(events.get('sched:sched_switch') is True, f'ListEvents: sched:sched_switch not enabled: {events}')
    check(events.get('sched:sched_wakeup') is False, f'ListEvents: sched:sched_wakeup should be disabled: {events}')
    check(set(events) == {e for e in available if fnmatch.fnmatchcase(e, 'sched:sched_*')},
          f'ListEvents sched:sched_* names: {sorted(events)}')
    log(f'list: {len(listed)} sched events, as the kernel')

    # --- describe
    r = tpd.tpctl_ok('describe', 'sched:sched_switch')
    for word in ('next_pid', 'prev_state', 'prev_comm'):
        check(word in r.stdout, f'tpctl describe sched:sched_switch does not show {word}: {r.stdout!r}')
    event_id, fields, print_fmt = format_file('sched:sched_switch')
    reply = tpd.call('io.tpd.tracing.DescribeEvent', {'event': 'sched:sched_switch'})
    check('error' not in reply, f'DescribeEvent: {reply}')
    p = reply['parameters']
    check(p.get('name') == 'sched:sched_switch', f'DescribeEvent name: {p.get("name")!r}')
    check(p.get('id') == event_id, f'DescribeEvent id {p.get("id")}, format says {event_id}')
    got = {f['name']: f for f in p.get('fields', [])}
    for name, f in fields.items():
        if name.startswith('common_'):
            continue
        check(name in got, f'DescribeEvent lacks field {name}: {sorted(got)}')
        check(got[name].get('size') == f['size'] and got[name].get('signed') == f['signed'],
              f'DescribeEvent field {name}: {got[name]}, format says {f}')
        check(isinstance(got[name].get('type'), str) and got[name]['type'], f'field {name} without a type')
    check('prev_comm=%s' in p.get('print_fmt', ''), f'DescribeEvent print_fmt {p.get("print_fmt")!r} '
                                                    f'is not the format\'s {print_fmt[:80]!r}...')
    r = tpd.tpctl('describe', 'no_such:event')
    check(r.returncode == 1 and 'no_such:event' in r.stderr, f'describe no_such:event: exit {r.returncode}, '
                                                             f'stderr {r.stderr!r}')

    # --- status
    tpd.tpctl_ok('disable', 'sched:sched_switch')
    time.sleep(0.3)
    before = tpd.status()
    for i in range(100):
        tpd.marker(f'tpdtest-status {i}')
    time.sleep(0.5)     # let a flush timer pass, so that nothing moves while we compare
    st = tpd.status()
    kernel = tpd.stats()
    check(st.get('instance') == tpd.instance, f'status instance {st.get("instance")!r}, expected {tpd.instance!r}')
    check(st.get('clock') == 'boot', f'status clock {st.get("clock")!r}, expected "boot"')
    check(st.get('flush_interval_ms') == 100, f'status flush_interval_ms {st.get("flush_interval_ms")!r}, '
                                              f'expected the default 100')
    check(isinstance(st.get('version'), str) and st['version'], f'status version {st.get("version")!r}')
    check(isinstance(st.get('buffer_size_kb'), int) and st['buffer_size_kb'] > 0, f'status buffer_size_kb {st.get("buffer_size_kb")!r}')
    cpus = {c['cpu']: c for c in st.get('cpus', [])}
    check(sorted(cpus) == T.online_cpus(), f'status cpus {sorted(cpus)}, online {T.online_cpus()}')
    for cpu, c in cpus.items():
        for key in ('entries', 'overrun', 'read', 'written', 'dropped'):
            check(isinstance(c.get(key), int), f'status cpu {cpu} {key} is {c.get(key)!r}')
        k = kernel[cpu]
        mine = {'entries': k['entries'], 'overrun': k['overrun'], 'read': k['read events'],
                'dropped': k['dropped events']}
        theirs = {key: c[key] for key in mine}
        check(theirs == mine, f'status cpu {cpu} counters {theirs}, kernel stats {mine}')
        check(c['written'] == T.written(kernel, cpu), f'status cpu {cpu} written {c["written"]}, kernel {T.written(kernel, cpu)}')
    grown = sum(c['written'] for c in st['cpus']) - sum(c['written'] for c in before['cpus'])
    check(grown == 100, f'written grew by {grown} over 100 marker writes')

    tpd.tpctl_ok('enable', 'sched:sched_switch', '--filter', 'prev_pid == 1')
    stream = tpd.stream('-e', 'syscalls:sys_enter_getppid')
    gp = os.path.join(tpd.instance_dir, 'events', 'syscalls', 'sys_enter_getppid', 'enable')
    stream.wait_for(lambda: T.read_text(gp).strip() == '1', 5, 'the stream to enable sys_enter_getppid')
    st = tpd.status()
    ev = {e['name']: e for e in st.get('events', [])}
    check(ev.get('sched:sched_switch', {}).get('pinned') is True and ev['sched:sched_switch'].get('streams') == 0
          and ev['sched:sched_switch'].get('filter') == 'prev_pid == 1',
          f'status event sched:sched_switch: {ev.get("sched:sched_switch")}')
    check(ev.get('syscalls:sys_enter_getppid', {}).get('pinned') is False
          and ev['syscalls:sys_enter_getppid'].get('streams') == 1,
          f'status event syscalls:sys_enter_getppid: {ev.get("syscalls:sys_enter_getppid")}')
    check(st.get('streams') == 1, f'status streams {st.get("streams")!r}, expected 1')
    check(isinstance(st.get('lost'), dict) and set(st['lost']) >= {'overrun', 'client'}, f'status lost {st.get("lost")!r}')
    check(isinstance(st.get('delivered'), int), f'status delivered {st.get("delivered")!r}')
    stream.stop()
    # The stream's hold goes with it; the event is not pinned, so it is disabled again.
    deadline = time.monotonic() + 5
    while T.read_text(gp).strip() != '0':
        check(time.monotonic() < deadline, 'sys_enter_getppid still enabled 5 s after its only stream ended')
        time.sleep(0.02)

    r = tpd.tpctl_ok('status')
    check(tpd.instance in r.stdout, f'tpctl status does not show the instance: {r.stdout!r}')

    # --- call, GetInfo, GetInterfaceDescription
    r = tpd.tpctl_ok('call', 'io.tpd.tracing.GetStatus')
    check(json.loads(r.stdout).get('instance') == tpd.instance, f'tpctl call GetStatus: {r.stdout[:300]!r}')
    r = tpd.tpctl_ok('call', 'org.varlink.service.GetInfo')
    check('io.tpd.tracing' in json.loads(r.stdout).get('interfaces', []), f'GetInfo: {r.stdout!r}')
    r = tpd.tpctl_ok('call', 'io.tpd.tracing.DescribeEvent', '{"event":"sched:sched_switch"}')
    check(json.loads(r.stdout).get('name') == 'sched:sched_switch', f'tpctl call DescribeEvent: {r.stdout[:300]!r}')
    r = tpd.tpctl('call', 'io.tpd.tracing.DescribeEvent', '{"event":"no_such:event"}')
    check(r.returncode == 1, f'tpctl call with an error reply exited {r.returncode}, expected 1')
    reply = tpd.call('org.varlink.service.GetInterfaceDescription', {'interface': 'io.tpd.tracing'})
    desc = reply.get('parameters', {}).get('description', '')
    path = os.environ.get('TPD_VARLINK_FILE')
    if path:
        want = T.read_text(path)
        check(desc.rstrip() == want.rstrip(), 'GetInterfaceDescription differs from include/io.tpd.tracing.varlink')
    else:
        check(desc.startswith('#') or 'interface io.tpd.tracing' in desc, f'GetInterfaceDescription: {reply}')

    # --- tpctl exit codes
    for args in ([], ['frobnicate'], ['enable'], ['stream', '-c', 'not-a-number'], ['status', '--no-such-option']):
        r = tpd.tpctl(*args)
        check(r.returncode == 2, f'tpctl {" ".join(args)}: exit {r.returncode}, expected 2 (usage)')
    r = subprocess.run([T.env_program('TPCTL'), '--socket', os.path.join(ctx.tmpdir, 'nobody.sock'), 'status'],
                       capture_output=True, text=True, timeout=15)
    check(r.returncode == T.EXIT_DAEMON_GONE, f'tpctl status without a daemon: exit {r.returncode}, '
                                              f'expected {T.EXIT_DAEMON_GONE}')
    tpd.stop()

    # --- start options
    tpd2 = ctx.tpd(args=['--buffer-size-kb', '2048', '--flush-interval-ms', '50'])
    size = kernel_size_kb(tpd2.instance_dir)
    check(is_about(size, 2048), f'--buffer-size-kb 2048: instance buffer_size_kb {size!r}')
    check(T.read_text(os.path.join(tpd2.instance_dir, 'trace_clock')).find('[boot]') >= 0,
          f'--clock boot: trace_clock {T.read_text(os.path.join(tpd2.instance_dir, "trace_clock"))!r}')
    check(tpd2.status().get('flush_interval_ms') == 50, '--flush-interval-ms 50 not in status')

    # --- Configure (last: everything above does not depend on it)
    reply = tpd2.call('io.tpd.tracing.Configure', {'buffer_size_kb': 4096})
    check('error' not in reply, f'Configure buffer_size_kb: {reply}')
    size = kernel_size_kb(tpd2.instance_dir)
    check(is_about(size, 4096), f'instance buffer_size_kb {size!r} after Configure 4096')
    check(tpd2.status().get('buffer_size_kb') in (4096, size), 'status buffer_size_kb after Configure')

    tpd2.stop()


if __name__ == '__main__':
    T.run(main)
