#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""tpctl's errors say what to do, each hint once, with the documented exit code.

- no tpd: no socket file (ENOENT) and a socket nobody listens on (ECONNREFUSED): exit 69, the error
  and one line "tpd is not running; start it: systemctl start tpd.socket ...";
- tpd failed to start under socket activation (systemd-socket-activate with an instance another tpd
  holds): exit 69, "tpd closed the connection without replying" and "... see journalctl -u tpd";
- permission denied: by the socket's mode (EACCES), by tpd's refusal (PermissionDenied with the
  access group), and for a member of the group whose session lacks it: the hint to join the group
  (or log in again), once; a PermissionDenied of another kind (another user's pin) has no such hint;
- an unknown event: tpd's message once and "Did you mean" with the nearest names (computed from
  ListEvents), none for a name close to nothing; -q drops the hints but not the error.
"""

import grp
import os
import shutil
import socket
import subprocess
import sys
import time

import tpdtest as T
from tpdtest import check, fail, log


def tpctl(*args, user=None, env=None, timeout=15):
    argv = (user or []) + [T.env_program('TPCTL'), *args]
    e = dict(os.environ)
    e.update(env or {})
    r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=e)
    log(f'tpctl {" ".join(args)} -> {r.returncode}: {r.stderr.strip()!r}')
    return r


def expect(r, code, lines, what):
    """Exit code and stderr exactly: lines is a list of strings (exact) or of callables."""
    got = r.stderr.splitlines()
    check(r.returncode == code, f'{what}: exit {r.returncode}, expected {code}; stderr {r.stderr!r}')
    check(len(got) == len(lines), f'{what}: {len(got)} lines on stderr, expected {len(lines)}: {r.stderr!r}')
    for g, want in zip(got, lines):
        ok = want(g) if callable(want) else g == want
        check(ok, f'{what}: stderr line {g!r} does not match {want!r}')


def not_running(ctx):
    path = os.path.join(ctx.tmpdir, 'absent.sock')
    r = tpctl('--socket', path, 'status')
    expect(r, 69, [f"tpctl: cannot connect to tpd at '{path}': No such file or directory",
                   f"tpd is not running; start it: systemctl start tpd.socket (or 'tpd --socket {path}'; "
                   "another socket: --socket or $TPD_SOCKET)"], 'no socket file')

    # A socket file of a dead tpd: bound, not listening.
    path = os.path.join(ctx.tmpdir, 'dead.sock')
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(path)
    try:
        r = tpctl('--socket', path, 'list')
    finally:
        s.close()
    expect(r, 69, [f"tpctl: cannot connect to tpd at '{path}': Connection refused",
                   lambda l: l.startswith('tpd is not running; start it: systemctl start tpd.socket')],
           'socket without tpd')
    r = tpctl('-q', '--socket', path, 'list')
    expect(r, 69, [f"tpctl: cannot connect to tpd at '{path}': Connection refused"], 'socket without tpd, -q')


def failed_start(ctx, tpd):
    activate = shutil.which('systemd-socket-activate')
    if not activate:
        fail('systemd-socket-activate (package systemd) is missing')
    path = os.path.join(ctx.tmpdir, 'activated.sock')
    # The instance is the running tpd's: the activated one must refuse it and exit. It starts only
    # once tpctl's connection waits in the backlog (the listening socket, fd 3, polls readable), as
    # under tpd.socket, where the first connection starts the service: a tpd that had already failed
    # would leave no listener, and tpctl would rightly say that none runs.
    tpd_argv = [T.env_program('TPD'), '--instance', tpd.instance, '--state-dir', os.path.join(ctx.tmpdir, 'state2'),
                '--config', os.path.join(ctx.tmpdir, 'none.conf')]
    wait_then_exec = 'import os, select, sys; select.select([3], [], []); os.execv(sys.argv[1], sys.argv[1:])'
    argv = [activate, '-l', path, '--fdname=varlink', sys.executable, '-c', wait_then_exec] + tpd_argv
    p = T.Process(ctx, 'socket-activate', argv, stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while not os.path.exists(path):
        check(p.running() and time.monotonic() < deadline,
              f'systemd-socket-activate did not listen on {path}: {p.stderr_text()!r}')
        time.sleep(0.02)
    r = tpctl('--socket', path, 'status')
    expect(r, 69, ['tpctl: tpd closed the connection without replying',
                   'tpd failed to start, or stopped; see journalctl -u tpd'], 'tpd failing under socket activation')
    check(p.wait(10) == 1, f'the activated tpd exited with {p.proc.returncode}, expected 1: {p.stderr_text()!r}')
    check('in use by another process' in p.stderr_text(), f'activated tpd log: {p.stderr_text()!r}')
    check(tpd.running(), 'the first tpd died')


def permission(ctx, tpd, users):
    join = (f"add yourself to the '{users.group}' group: usermod -aG {users.group} {users.names['O']}, "
            "then log in again")
    refused = f"tpctl: Only root and members of group '{users.group}' may use tpd."

    # The socket's mode (0660, the group's) stops the outsider at connect().
    r = tpctl('--socket', tpd.socket, 'status', user=users.setpriv('O'))
    expect(r, 69, [f"tpctl: cannot connect to tpd at '{tpd.socket}': Permission denied", join],
           'outsider, socket mode')
    # A member whose session lacks the group (it joined after logging in).
    r = tpctl('--socket', tpd.socket, 'status', user=users.setpriv('M', 'clear'))
    expect(r, 69, [f"tpctl: cannot connect to tpd at '{tpd.socket}': Permission denied",
                   f"You are in the '{users.group}' group, but this session is not: log in again "
                   f"(or run 'newgrp {users.group}')."], 'member without the group in its session')

    # With the socket open to all, tpd itself refuses, naming its group.
    os.chmod(tpd.socket, 0o666)
    try:
        r = tpctl('--socket', tpd.socket, 'list', user=users.setpriv('O'))
        expect(r, 1, [refused, join], 'outsider, PermissionDenied')
        raw = tpd.call('io.tpd.tracing.GetStatus')
        check('error' not in raw, f'root refused: {raw}')
        r = tpctl('-q', '--socket', tpd.socket, 'list', user=users.setpriv('O'))
        expect(r, 1, [refused], 'outsider, PermissionDenied, -q')
    finally:
        os.chmod(tpd.socket, 0o660)

    # Another kind of PermissionDenied: no group hint, the member is in the group already.
    tpd.tpctl_ok('enable', 'sched:sched_wakeup')
    r = tpctl('--socket', tpd.socket, 'disable', 'sched:sched_wakeup', user=users.setpriv('M'))
    expect(r, 1, ["tpctl: 'sched:sched_wakeup' is pinned by others (uid 0 (pin)): a member removes only its "
                  "own pins."],
           'member disabling root\'s pin')
    tpd.tpctl_ok('disable', 'sched:sched_wakeup')


def unknown_event(tpd):
    no_event = "tpctl: No event '{}'. 'tpctl list' shows the kernel's events."

    r = tpd.tpctl('enable', 'nonexist:foo')
    expect(r, 1, [no_event.format('nonexist:foo')], 'enable nonexist:foo (close to nothing)')

    r = tpd.tpctl('enable', 'sched:sched_swtch')
    expect(r, 1, [no_event.format('sched:sched_swtch'), 'Did you mean sched:sched_switch?'],
           'enable sched:sched_swtch')

    # The system left out: the event part matches exactly. Up to three names, nearest first.
    r = tpd.tpctl('stream', '-e', 'sys_enter_getpid')
    expect(r, 1, ["tpctl: 'sys_enter_getpid' is not an event name: use system:event, optionally with * and ? "
                  "globs.",
                  lambda l: l.startswith('Did you mean syscalls:sys_enter_getpid, ') and l.count(',') == 1
                  and ' or syscalls:' in l], 'stream -e sys_enter_getpid')

    r = tpd.tpctl('describe', 'sched:sched_wakeup_nw')
    expect(r, 1, [no_event.format('sched:sched_wakeup_nw'),
                  'Did you mean sched:sched_wakeup_new, sched:sched_wakeup or sched:sched_waking?'],
           'describe sched:sched_wakeup_nw')

    r = tpd.tpctl('-q', 'enable', 'sched:sched_swtch')
    expect(r, 1, [no_event.format('sched:sched_swtch')], 'enable -q sched:sched_swtch')

    # A glob that matches nothing gets no guesses.
    r = tpd.tpctl('enable', 'sched:sched_swtch*')
    check(r.returncode == 1 and 'Did you mean' not in r.stderr and len(r.stderr.splitlines()) == 1,
          f'enable of a glob matching nothing: {r.returncode} {r.stderr!r}')
    check(T.enabled_events(tpd.instance_dir) == set(), 'a failed enable enabled something')


def main(ctx):
    os.chmod(ctx.tmpdir, 0o711)          # the users must reach the socket; its mode decides
    not_running(ctx)
    with T.TestUsers(ctx, 'tpe', members=('M',), outsiders=('O',)) as users:
        tpd = ctx.tpd(args=['--access-group', users.group])
        check(grp.getgrgid(os.stat(tpd.socket).st_gid).gr_name == users.group, 'socket not of the group')
        unknown_event(tpd)
        failed_start(ctx, tpd)
        permission(ctx, tpd, users)
        tpd.stop()


if __name__ == '__main__':
    T.run(main)
