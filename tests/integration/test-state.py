#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""The state file and the trace clock: nothing a call or the disk does stalls or fools tpd.

- Clock: `tpd --clock=` exits 1 at once naming the option (it used to loop forever), `--clock=nosuch`
  fails the start; `Configure {"clock":""}` and an unknown clock get InvalidParameter, tpd stays
  alive and its clock unchanged; a real clock can still be set.
- Debounce: a burst of 100 Enable/Disable calls costs a few writes of the state file (GetStatus
  "state_saves"), not 100, and the file ends with the final pins.
- Shutdown: a pin made just before SIGTERM (before the debounce fired) is saved and restored.
- Symlinks: a symlink at the state path is not followed at start (its target's pins are not
  restored) and is replaced, not written through; a symlink at the temporary path is not followed.
- Full disk: with the state directory on a full 16 KiB tmpfs, Enable still succeeds, GetStatus
  shows "state_error", the failure is logged once, tpd keeps running; once there is room the
  state is saved (the retry or the next change) and the error clears.
"""

import json
import os
import subprocess
import time

import tpdtest as T
from tpdtest import check, log

CONFIGURE = 'io.tpd.tracing.Configure'
ENABLE = 'io.tpd.tracing.Enable'
DISABLE = 'io.tpd.tracing.Disable'


def status(tpd):
    return tpd.call('io.tpd.tracing.GetStatus')['parameters']


def enabled(tpd, event):
    sys_name, name = event.split(':')
    return T.read_text(os.path.join(tpd.instance_dir, 'events', sys_name, name, 'enable')).strip() == '1'


def clock(ctx):
    argv = [T.env_program('TPD'), '--socket', os.path.join(ctx.tmpdir, 'clock.sock'),
            '--instance', ctx.unique_name(), '--state-dir', '', '--config', os.path.join(ctx.tmpdir, 'none.conf')]
    for arg, want in (('--clock=', '--clock'), ('--clock=nosuch', 'nosuch')):
        try:
            r = subprocess.run(argv + [arg], capture_output=True, text=True, timeout=10)
        except subprocess.TimeoutExpired:
            T.fail(f'tpd {arg} did not exit within 10 s')
        check(r.returncode == 1, f'tpd {arg} exited {r.returncode}; stderr {r.stderr!r}')
        check(want in r.stderr, f'tpd {arg}: stderr does not name {want!r}: {r.stderr!r}')
        log(f'tpd {arg}: {r.stderr.strip().splitlines()[-1]}')

    tpd = ctx.tpd()
    path = os.path.join(tpd.instance_dir, 'trace_clock')
    before = T.read_text(path)
    for value in ('', 'nosuch', 'b o o t', 'x' * 100):
        t0 = time.monotonic()
        reply = tpd.call(CONFIGURE, {'clock': value})
        check(time.monotonic() - t0 < 2, f'Configure clock {value!r} took {time.monotonic() - t0:.1f} s')
        check(reply.get('error') == 'org.varlink.service.InvalidParameter'
              and reply['parameters'].get('parameter') == 'clock',
              f'Configure clock {value!r}: {reply!r}')
        check(tpd.running(), f'tpd died after Configure clock {value!r}')
        check(T.read_text(path) == before, f'trace_clock changed by Configure clock {value!r}')
    log(f'Configure clock "": {tpd.call(CONFIGURE, {"clock": ""})["parameters"]["message"]}')
    reply = tpd.call(CONFIGURE, {'clock': 'mono'})
    check('error' not in reply, f'Configure clock mono: {reply!r}')
    check('[mono]' in T.read_text(path), f'trace_clock after setting mono: {T.read_text(path)!r}')
    check('error' not in tpd.call(CONFIGURE, {'clock': 'boot'}), 'Configure clock boot failed')
    tpd.stop()


def debounce(ctx):
    tpd = ctx.tpd()
    state = tpd.state_file
    s0 = status(tpd)['state_saves']
    t0 = time.monotonic()
    with tpd.varlink() as v:
        for i in range(100):
            method = ENABLE if i % 2 == 0 else DISABLE
            reply = v.call(method, {'events': ['sched:sched_switch']})
            check('error' not in reply, f'{method}: {reply!r}')
        reply = v.call(ENABLE, {'events': ['sched:sched_wakeup']})
        check('error' not in reply, f'Enable: {reply!r}')
    burst = time.monotonic() - t0
    # Settled: the last change is saved within the debounce delay (0.2 s); wait for it, then make
    # sure nothing else follows.
    st = T.wait_state_saved(tpd, s0 + 1)
    time.sleep(0.5)
    writes = status(tpd)['state_saves'] - s0
    log(f'101 Enable/Disable calls in {burst:.2f} s: {writes} write(s) of the state file')
    # A write at most every second under a steady stream of changes, plus the last one.
    check(1 <= writes <= int(burst) + 2, f'{writes} writes of the state file for 101 changes in {burst:.2f} s')
    check(not os.path.islink(state) and os.path.isfile(state), f'state file {state} missing')
    with open(state) as f:
        pins = sorted(p['event'] for p in json.load(f)['pins'])
    check(pins == ['sched:sched_wakeup'], f'state file pins {pins}, expected only sched:sched_wakeup')
    check('state_error' not in st, f'state_error: {st.get("state_error")!r}')

    # Shutdown: a pin made right before SIGTERM is saved by the stop.
    tpd.tpctl_ok('enable', 'sched:sched_switch')
    tpd.stop(clear_pins=False)
    with open(state) as f:
        pins = sorted(p['event'] for p in json.load(f)['pins'])
    check(pins == ['sched:sched_switch', 'sched:sched_wakeup'], f'pins after stop: {pins}')
    tpd.start(clean=False)
    check(enabled(tpd, 'sched:sched_switch') and enabled(tpd, 'sched:sched_wakeup'),
          'pins made before the stop were not restored')
    tpd.stop()


def symlinks(ctx):
    tpd = ctx.tpd(start=False)
    state_dir = tpd.state_dir
    os.makedirs(state_dir, exist_ok=True)
    state = tpd.state_file
    target = os.path.join(ctx.tmpdir, 'target.json')
    victim = os.path.join(ctx.tmpdir, 'victim')
    target_text = json.dumps({'version': 1, 'pins': [{'event': 'sched:sched_waking'}]})
    with open(target, 'w') as f:
        f.write(target_text)
    with open(victim, 'w') as f:
        f.write('precious\n')
    os.symlink(target, state)
    os.symlink(victim, state + '.tmp')

    tpd.start(clean=False)
    check(not enabled(tpd, 'sched:sched_waking'), 'pins were restored through a symlink at the state path')
    check('symbolic links' in tpd.log() or 'Ignoring state file' in tpd.log(),
          f'no word of the refused state file in the log:\n{tpd.log()}')
    s0 = status(tpd)['state_saves']
    tpd.tpctl_ok('enable', 'sched:sched_switch')
    T.wait_state_saved(tpd, s0 + 1)
    check(not os.path.islink(state) and os.path.isfile(state), 'the state path is still a symlink after a save')
    check(T.read_text(target) == target_text, 'the symlink target was written through')
    check(T.read_text(victim) == 'precious\n', 'a symlink at the temporary path was written through')
    check(not os.path.lexists(state + '.tmp'), 'the temporary file was left behind')
    tpd.stop()


def full_disk(ctx):
    mnt = os.path.join(ctx.tmpdir, 'tiny')
    os.mkdir(mnt)
    r = subprocess.run(['mount', '-t', 'tmpfs', '-o', 'size=16k,mode=0700', 'tmpfs', mnt], capture_output=True,
                       text=True)
    if r.returncode != 0:
        log(f'note: cannot mount a tmpfs ({r.stderr.strip()}): full-disk case skipped')
        return
    try:
        tpd = ctx.tpd(args=['--state-dir', mnt])
        filler = os.path.join(mnt, 'filler')
        fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            while os.write(fd, b'\0' * 1024) > 0:
                pass
        except OSError:
            pass
        os.close(fd)
        s0 = status(tpd)
        reply = tpd.call(ENABLE, {'events': ['sched:sched_switch']})
        check('error' not in reply, f'Enable with a full disk: {reply!r} (its reply does not wait for the disk)')
        deadline = time.monotonic() + 5
        while 'state_error' not in (st := status(tpd)):
            check(time.monotonic() < deadline, f'no state_error in GetStatus with a full disk: {st}')
            time.sleep(0.05)
        log(f'full disk: state_error {st["state_error"]!r}')
        check(st['state_saves'] == s0['state_saves'], 'a save counted though the disk is full')
        out = tpd.tpctl_ok('status').stdout
        check('NOT SAVED' in out, f'tpctl status does not show the failing save:\n{out}')
        # More changes: still running, still reported, logged once.
        for event in ('sched:sched_wakeup', 'sched:sched_waking'):
            check('error' not in tpd.call(ENABLE, {'events': [event]}), f'Enable {event} with a full disk')
        time.sleep(0.5)
        check(tpd.running(), 'tpd died with a full disk')
        check('state_error' in status(tpd), 'state_error cleared while the disk is still full')
        n_logged = tpd.log(100000).count('Failed to save state')
        check(n_logged == 1, f'the failed save was logged {n_logged} times, expected once:\n{tpd.log()}')
        # Room again: the next change saves, and the error clears.
        os.unlink(filler)
        check('error' not in tpd.call(DISABLE, {'events': ['sched:sched_waking']}), 'Disable after freeing room')
        st = T.wait_state_saved(tpd, s0['state_saves'] + 1)
        check('state_error' not in st, f'state_error after a successful save: {st}')
        check('again' in tpd.log(100000), f'the recovery is not logged:\n{tpd.log()}')
        with open(os.path.join(mnt, f'{tpd.instance}.json')) as f:
            pins = sorted(p['event'] for p in json.load(f)['pins'])
        check(pins == ['sched:sched_switch', 'sched:sched_wakeup'], f'pins saved after recovery: {pins}')
        tpd.stop()
    finally:
        subprocess.run(['umount', '-l', mnt], capture_output=True)


def main(ctx):
    clock(ctx)
    debounce(ctx)
    symlinks(ctx)
    full_disk(ctx)


if __name__ == '__main__':
    T.run(main)
