#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""tpctl follows the conventions of systemd's tools.

- --json=short (one line), --json=pretty and bare --json (indented, as before), --json=off (text),
  -j (pretty on a terminal, short on a pipe) on list, describe, status, enable, disable and call,
  all the same JSON; a bad mode is a usage error (2).
- --no-legend drops the header line of describe's and status's tables, nothing else.
- Colour only on a terminal (a pty here), never with NO_COLOR or TERM=dumb; SYSTEMD_COLORS=0 turns
  it off on a terminal and SYSTEMD_COLORS=1 on for a pipe; errors in red on a terminal only.
- list and status go through a pager on a terminal: $SYSTEMD_PAGER before $PAGER, with LESS=FRSXMK
  (or $SYSTEMD_LESS); never with --no-pager, PAGER=cat or PAGER='', nor on a pipe.
"""

import json
import os
import pty
import re
import subprocess

import tpdtest as T
from tpdtest import check, log

ESC = '\x1b['


def run_pipe(tpd, *args, env=None):
    e = dict(os.environ)
    for k in ('NO_COLOR', 'SYSTEMD_COLORS', 'PAGER', 'SYSTEMD_PAGER', 'SYSTEMD_LESS'):
        e.pop(k, None)
    e['TERM'] = 'xterm'
    e.update(env or {})
    return subprocess.run([T.env_program('TPCTL'), '--socket', tpd.socket, *args], capture_output=True,
                          text=True, timeout=15, env=e)


def run_tty(tpd, *args, env=None):
    """tpctl with stdout on a pseudo-terminal; returns (exit code, what reached the terminal)."""
    e = dict(os.environ)
    for k in ('NO_COLOR', 'SYSTEMD_COLORS', 'PAGER', 'SYSTEMD_PAGER', 'SYSTEMD_LESS'):
        e.pop(k, None)
    e['TERM'] = 'xterm'
    e.update(env or {})
    master, slave = pty.openpty()
    p = subprocess.Popen([T.env_program('TPCTL'), '--socket', tpd.socket, *args], stdin=subprocess.DEVNULL,
                         stdout=slave, stderr=subprocess.PIPE, env=e)
    os.close(slave)
    out = b''
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:          # EIO: every writer of the terminal is gone
            break
        if not chunk:
            break
        out += chunk
    os.close(master)
    rc = p.wait(15)
    p.stderr.close()
    return rc, out.decode(errors='replace').replace('\r\n', '\n')


def json_modes(tpd):
    for args in (['list', 'sched:*'], ['describe', 'sched:sched_switch'], ['status'],
                 ['call', 'org.varlink.service.GetInfo', '{}'], ['enable', 'sched:sched_switch'], ['disable', 'sched:sched_switch']):
        outs = {}
        for mode in ('--json=short', '--json=pretty', '--json', '-j'):
            if args[0] in ('enable', 'disable'):
                # Both change state: run the pair again so that each mode sees the same reply.
                run_pipe(tpd, 'enable' if args[0] == 'disable' else 'disable', args[1])
            r = run_pipe(tpd, mode, *args)
            check(r.returncode == 0, f'tpctl {mode} {" ".join(args)}: exit {r.returncode}: {r.stderr!r}')
            outs[mode] = r.stdout
        for mode in ('--json=short', '-j'):
            check(outs[mode].count('\n') == 1 and outs[mode].endswith('\n'),
                  f'tpctl {mode} {args[0]} on a pipe is not one line: {outs[mode][:300]!r}')
        check(outs['--json=pretty'].count('\n') > 1, f'--json=pretty {args[0]} is one line')
        parsed = {m: json.loads(o) for m, o in outs.items()}
        if args[0] == 'status':     # counters move between calls: same shape, pretty the same way
            check(len({json.dumps(sorted(v)) for v in parsed.values()}) == 1, 'JSON modes of status differ')
            check(outs['--json'].count('\n') == outs['--json=pretty'].count('\n'),
                  'bare --json is not --json=pretty for status')
        else:
            check(outs['--json'] == outs['--json=pretty'], f'bare --json differs from --json=pretty for {args[0]}')
            check(len({json.dumps(v, sort_keys=True) for v in parsed.values()}) == 1,
                  f'JSON modes of {args[0]} differ: {parsed}')
        log(f'{args[0]}: --json=short, pretty, bare and -j agree')
    run_pipe(tpd, 'disable', '--all')

    r = run_pipe(tpd, '--json=off', 'describe', 'sched:sched_switch')
    plain = run_pipe(tpd, 'describe', 'sched:sched_switch')
    check(r.returncode == 0 and r.stdout == plain.stdout and r.stdout.startswith('Name:'),
          f'--json=off is not the text output: {r.stdout[:200]!r}')
    r = run_pipe(tpd, '--json=long', 'status')
    check(r.returncode == 2 and "unknown JSON mode 'long'" in r.stderr, f'--json=long: {r.returncode} {r.stderr!r}')

    rc, out = run_tty(tpd, '-j', 'describe', 'sched:sched_switch')
    check(rc == 0 and out.count('\n') > 5 and json.loads(out)['name'] == 'sched:sched_switch',
          f'-j on a terminal is not pretty JSON: {rc} {out[:300]!r}')
    rc, out = run_tty(tpd, '-j', '--no-pager', 'list', 'sched:sched_switch')
    check(rc == 0 and json.loads(out)['events'][0]['name'] == 'sched:sched_switch', f'-j list on a tty: {out!r}')


def legend(tpd):
    with_legend = run_pipe(tpd, 'describe', 'sched:sched_switch').stdout.splitlines()
    without = run_pipe(tpd, '--no-legend', 'describe', 'sched:sched_switch').stdout.splitlines()
    header = [l for l in with_legend if l.split() == ['TYPE', 'NAME', 'SIZE', 'SIGNED']]
    check(len(header) == 1, f'describe has no table header: {with_legend}')
    check(len(without) == len(with_legend) - 1, f'--no-legend: {len(without)} lines, expected {len(with_legend) - 1}')
    check([l.split() for l in without] == [l.split() for l in with_legend if l not in header],
          '--no-legend changed more than the header')
    status = run_pipe(tpd, '--no-legend', 'status').stdout
    check('ONLINE' not in status and 'Instance:' in status, f'--no-legend status: {status!r}')
    check('ONLINE' in run_pipe(tpd, 'status').stdout, 'status has no CPU table header')


def colour(tpd):
    tpd.tpctl_ok('enable', 'sched:sched_switch')
    args = ('--no-pager', 'list', 'sched:sched_sw*')
    rc, out = run_tty(tpd, *args)
    check(rc == 0 and f'sched:sched_switch{ESC}' in out and '(enabled)' in out,
          f'no colour on a terminal: {out!r}')
    for env in ({'NO_COLOR': '1'}, {'TERM': 'dumb'}, {'SYSTEMD_COLORS': '0'}, {'SYSTEMD_COLORS': 'no'}):
        rc, out = run_tty(tpd, *args, env=env)
        check(rc == 0 and ESC not in out and 'sched:sched_switch (enabled)' in out,
              f'colour on a terminal with {env}: {out!r}')
    r = run_pipe(tpd, *args)
    check(ESC not in r.stdout and r.stdout.endswith('sched:sched_switch (enabled)\n'), f'colour on a pipe: {r.stdout!r}')
    r = run_pipe(tpd, *args, env={'SYSTEMD_COLORS': '1'})
    check(f'sched:sched_switch{ESC}' in r.stdout, f'SYSTEMD_COLORS=1 gave no colour on a pipe: {r.stdout!r}')
    r = run_pipe(tpd, *args, env={'SYSTEMD_COLORS': '1', 'NO_COLOR': 'yes'})
    check(ESC not in r.stdout, f'NO_COLOR did not win over SYSTEMD_COLORS: {r.stdout!r}')
    tpd.tpctl_ok('disable', 'sched:sched_switch')

    # Errors: coloured when stderr is a terminal, not otherwise.
    for env, coloured in (({}, True), ({'NO_COLOR': '1'}, False)):
        e = dict(os.environ, TERM='xterm', **env)
        e.pop('SYSTEMD_COLORS', None)
        if not env:
            e.pop('NO_COLOR', None)
        master, slave = pty.openpty()
        p = subprocess.run([T.env_program('TPCTL'), '--socket', tpd.socket, 'describe', 'no_such:event'],
                           stdout=subprocess.DEVNULL, stderr=slave, env=e, timeout=15)
        os.close(slave)
        err = b''
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:      # EIO: the terminal has no writer left
                break
            if not chunk:
                break
            err += chunk
        err = err.decode()
        os.close(master)
        check(p.returncode == 1 and (f'{ESC}0;1;31mtpctl: No event' in err) == coloured,
              f'error on a terminal with {env}: {err!r}')
    r = run_pipe(tpd, 'describe', 'no_such:event')
    check(r.returncode == 1 and ESC not in r.stderr and r.stderr.startswith('tpctl: No event'),
          f'error on a pipe: {r.stderr!r}')


def pager(ctx, tpd):
    paged = os.path.join(ctx.tmpdir, 'paged')
    less = os.path.join(ctx.tmpdir, 'less-env')
    expected = run_pipe(tpd, 'list').stdout
    check(expected.count('\n') > 100, f'list is short: {expected.count(chr(10))} lines')

    def pager_cmd(path):
        return f'echo "$LESS" > {less}; cat > {path}'

    for env, what in (({'PAGER': pager_cmd(paged)}, '$PAGER'),
                      ({'SYSTEMD_PAGER': pager_cmd(paged), 'PAGER': 'false'}, '$SYSTEMD_PAGER')):
        for f in (paged, less):
            if os.path.exists(f):
                os.unlink(f)
        rc, out = run_tty(tpd, 'list', env=env)
        check(rc == 0, f'list through {what}: exit {rc}')
        check(out == '', f'list through {what} also wrote to the terminal: {out[:200]!r}')
        # Colour is decided for the terminal the pager shows it on (less -R passes it).
        got = T.read_text(paged)
        check(f'ftrace:print{ESC}' in got, f'no colour through the pager: {got[:300]!r}')
        got = re.sub(r'\x1b\[[0-9;]*m', '', got)
        check(got == expected, f'the pager ({what}) did not get the list: {len(got)} bytes, expected '
                               f'{len(expected)}: {[l for l in got.splitlines() if l not in expected.splitlines()][:5]}')
        check(T.read_text(less) == 'FRSXMK\n', f'$LESS for the pager: {T.read_text(less)!r}')
        log(f'list went through {what} with LESS=FRSXMK')

    os.unlink(paged)
    rc, out = run_tty(tpd, 'status', env={'PAGER': pager_cmd(paged), 'SYSTEMD_LESS': 'FR'})
    check(rc == 0 and 'Instance:' in T.read_text(paged) and T.read_text(less) == 'FR\n',
          f'status not paged, or SYSTEMD_LESS ignored: {rc} {T.read_text(less)!r}')

    for args, env in ((['--no-pager', 'list'], {'PAGER': pager_cmd(paged)}),
                      (['list'], {'PAGER': 'cat'}), (['list'], {'PAGER': ''})):
        os.unlink(paged) if os.path.exists(paged) else None
        rc, out = run_tty(tpd, *args, env=env)
        out = re.sub(r'\x1b\[[0-9;]*m', '', out)
        check(rc == 0 and out == expected and not os.path.exists(paged),
              f'tpctl {" ".join(args)} with {env} was paged, or lost output ({len(out)} bytes)')
    r = run_pipe(tpd, 'list', env={'PAGER': pager_cmd(paged)})
    check(r.stdout == expected and not os.path.exists(paged), 'list on a pipe was paged')

    # A pager that quits early is no error of tpctl's.
    rc, out = run_tty(tpd, 'list', env={'PAGER': 'head -n 1'})
    check(rc == 0 and out.count('\n') == 1, f'a pager quitting early: exit {rc}, {out[:200]!r}')
    # The describe command is short: never paged.
    rc, out = run_tty(tpd, 'describe', 'sched:sched_switch', env={'PAGER': pager_cmd(paged)})
    check(rc == 0 and out.startswith('Name:') and not os.path.exists(paged), 'describe was paged')


def main(ctx):
    tpd = ctx.tpd()
    json_modes(tpd)
    legend(tpd)
    colour(tpd)
    pager(ctx, tpd)
    tpd.stop()


if __name__ == '__main__':
    T.run(main)
