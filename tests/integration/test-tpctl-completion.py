#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""The bash completion (client/tpctl.bash) completes against a live tpd.

The script is sourced in a plain `bash --norc` (no bash-completion package needed), COMP_WORDS,
COMP_CWORD, COMP_LINE and COMP_POINT are set as bash sets them (bash splits words at ':' and '='),
_tpctl is called and COMPREPLY compared with what ListEvents says, exactly:

- an event name: `stream -e sched:sched_swi` -> sched_switch (the part after bash's ':' split);
  `describe sched:` -> every sched event; `--event=sched:sched_sw` the same way; the socket from
  --socket, --socket= or $TPD_SOCKET;
- systems first: `enable sc` -> the systems starting with "sc", each with its ':';
- commands, options of the command (metrics --openmetrics), --json= modes, call's methods;
- with no tpd, no completion and nothing on stderr, quickly.

The zsh completion (client/_tpctl) is driven in a real zsh in tmux: Tab after an event's prefix,
a system's prefix, a command's and an option's, and the line shows the completed word.
"""

import os
import re
import shutil
import subprocess
import time

import tpdtest as T
from tpdtest import check, log

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', 'client', 'tpctl.bash')


def bash_words(line):
    """COMP_WORDS as bash makes them with the default COMP_WORDBREAKS: ':' and '=' are words."""
    words = []
    for token in line.split():
        words += [w for w in re.split(r'([:=])', token) if w]
    if line.endswith(' '):
        words.append('')
    return words


def complete(line, env=None, split=True):
    words = bash_words(line) if split else line.split() + ([''] if line.endswith(' ') else [])
    quoted = ' '.join("'" + w.replace("'", "'\\''") + "'" for w in words)
    setup = f'COMP_WORDS=({quoted}); COMP_CWORD={len(words) - 1}; '
    if split:
        setup += f"COMP_LINE='{line}'; COMP_POINT={len(line)}; "
    else:
        setup += 'unset COMP_LINE COMP_POINT; '
    e = dict(os.environ)
    e['PATH'] = os.path.dirname(T.env_program('TPCTL')) + ':' + e['PATH']
    e.pop('TPD_SOCKET', None)
    e.update(env or {})
    start = time.monotonic()
    r = subprocess.run(['bash', '--norc', '--noprofile', '-c',
                        f'source {SCRIPT} || exit 3; {setup} _tpctl; printf "%s\\n" "${{COMPREPLY[@]}}"'],
                       capture_output=True, text=True, env=e, timeout=30)
    took = time.monotonic() - start
    check(r.returncode == 0 and not r.stderr, f'completing {line!r}: exit {r.returncode}, stderr {r.stderr!r}')
    reply = [l for l in r.stdout.split('\n') if l]
    log(f'{line!r} -> {reply[:6]}{" ..." if len(reply) > 6 else ""} ({len(reply)}, {took:.2f} s)')
    return reply, took


class Tmux:
    """A private tmux server running one zsh; removed in close()."""

    def __init__(self, ctx):
        for tool in ('tmux', 'zsh'):
            check(shutil.which(tool), f'{tool} is missing (.ci/deps installs it)')
        self.name = f'tpdtest-{os.getpid()}-{ctx.rand}'
        fdir = os.path.join(ctx.tmpdir, 'zfunc')
        os.mkdir(fdir)
        shutil.copy(os.path.join(os.path.dirname(SCRIPT), '_tpctl'), fdir)
        rc = os.path.join(ctx.tmpdir, 'zshrc')
        with open(rc, 'w') as f:
            f.write(f"fpath=({fdir} $fpath)\npath=({os.path.dirname(T.env_program('TPCTL'))} $path)\n"
                    "unset TPD_SOCKET\nautoload -U compinit && compinit -u -D\nPROMPT='%% '\n")
        self.tmux('new-session', '-d', '-s', 'z', '-x', '250', '-y', '50', 'zsh -f')
        self.tmux('send-keys', '-t', 'z', f'source {rc}; print READY', 'Enter')
        self.wait(lambda lines: 'READY' in lines, 'zsh to start')

    def tmux(self, *args):
        r = subprocess.run(['tmux', '-L', self.name, *args], capture_output=True, text=True, timeout=10)
        check(r.returncode == 0, f'tmux {" ".join(args)}: {r.stderr.strip()}')
        return r.stdout

    def wait(self, pred, what, timeout=10):
        deadline = time.monotonic() + timeout
        while True:
            lines = [l.rstrip() for l in self.tmux('capture-pane', '-p', '-t', 'z').splitlines() if l.strip()]
            if pred(lines):
                return lines
            if time.monotonic() > deadline:
                fail(f'zsh: no {what} within {timeout} s; screen:\n' + '\n'.join(lines[-8:]))
            time.sleep(0.05)

    def complete(self, typed, expected):
        self.tmux('send-keys', '-t', 'z', 'C-u', 'clear', 'Enter')
        self.wait(lambda lines: lines == ['%'], 'clear screen')
        self.tmux('send-keys', '-t', 'z', typed, 'Tab')
        self.wait(lambda lines: lines and lines[0] == f'% {expected}'.rstrip(), f'{expected!r} after {typed!r}<Tab>')
        log(f'zsh: {typed!r}<Tab> -> {expected!r}')
        self.tmux('send-keys', '-t', 'z', 'C-u')

    def close(self):
        subprocess.run(['tmux', '-L', self.name, 'kill-server'], capture_output=True)


def zsh_completion(ctx, tpd, names):
    z = Tmux(ctx)
    try:
        z.complete(f'tpctl --socket {tpd.socket} stream -e sched:sched_swi',
                   f'tpctl --socket {tpd.socket} stream -e sched:sched_switch')
        z.complete(f'tpctl --socket={tpd.socket} describe sched:sched_swi',
                   f'tpctl --socket={tpd.socket} describe sched:sched_switch')
        if len({n.split(':')[0] for n in names if n.startswith('sche')}) == 1:
            z.complete(f'tpctl --socket {tpd.socket} enable sche', f'tpctl --socket {tpd.socket} enable sched:')
        z.complete('tpctl met', 'tpctl metrics')
        z.complete('tpctl metrics --o', 'tpctl metrics --openmetrics')
        z.complete('tpctl stream -e sched:sched_switch -- tpct', 'tpctl stream -e sched:sched_switch -- tpctl')
        os.mkdir(os.path.join(ctx.tmpdir, 'only-dir'))
        z.complete(f'tpctl stream -- ls {ctx.tmpdir}/only-d', f'tpctl stream -- ls {ctx.tmpdir}/only-dir/')
        z.complete('tpctl record -o x.dat -- tpct', 'tpctl record -o x.dat -- tpctl')
        z.complete('tpctl record --fol', 'tpctl record --follow')
    finally:
        z.close()


def main(ctx):
    tpd = ctx.tpd()
    names = [e['name'] for e in tpd.call('io.tpd.tracing.ListEvents', {})['parameters']['events']]
    check(len(names) > 100, f'ListEvents gave {len(names)} events')
    sock = tpd.socket

    reply, _ = complete(f'tpctl --socket {sock} stream -e sched:sched_swi')
    check(reply == ['sched_switch'], f'sched:sched_swi completed to {reply}')
    sched = sorted(n.split(':', 1)[1] for n in names if n.startswith('sched:'))
    reply, _ = complete(f'tpctl --socket={sock} describe sched:')
    check(sorted(reply) == sched, f'sched: completed to {len(reply)} names, ListEvents has {len(sched)}')
    reply, _ = complete('tpctl enable sched:sched_sw', env={'TPD_SOCKET': sock})
    check(sorted(reply) == sorted(n[6:] for n in names if n.startswith('sched:sched_sw')),
          f'$TPD_SOCKET: {reply}')
    reply, _ = complete(f'tpctl --socket {sock} stream --event=sched:sched_swi')
    check(reply == ['sched_switch'], f'--event=sched:sched_swi completed to {reply}')
    # Without bash's split (a caller that sets only COMP_WORDS): whole names.
    reply, _ = complete(f'tpctl --socket {sock} stream -e sched:sched_swi', split=False)
    check(reply == ['sched:sched_switch'], f'unsplit sched:sched_swi completed to {reply}')

    systems = sorted({n.split(':')[0] + ':' for n in names if n.startswith('sc')})
    reply, _ = complete(f'tpctl --socket {sock} enable sc')
    check(sorted(reply) == systems and 'sched:' in reply, f'systems for "sc": {reply}, expected {systems}')

    reply, _ = complete('tpctl s')
    check(sorted(reply) == ['status', 'stream'], f'commands for "s": {reply}')
    reply, _ = complete('tpctl metrics --o')
    check(reply == ['--openmetrics'], f'metrics --o: {reply}')
    reply, _ = complete('tpctl stream --pr')
    check(reply == ['--print'], f'stream --pr: {reply}')
    # After stream's (and record's) "--", the command's line: commands first, then files; no event, no option.
    reply, _ = complete('tpctl stream -e sched:sched_switch -- tpct')
    check(reply == ['tpctl'], f'-- tpct: {reply}')
    reply, _ = complete(f'tpctl stream -- ls {ctx.tmpdir}/')
    check(sorted(reply) == [os.path.join(ctx.tmpdir, f) for f in sorted(os.listdir(ctx.tmpdir))],
          f'-- ls DIR/: {reply}, expected the files of {ctx.tmpdir}')
    reply, _ = complete('tpctl stream -- ls --pr')
    check(reply == [], f'-- ls --pr completed tpctl options: {reply}')
    reply, _ = complete('tpctl record -o x.dat -- tpct')
    check(reply == ['tpctl'], f'record -- tpct: {reply}')
    reply, _ = complete('tpctl record --fol')
    check(reply == ['--follow'], f'record --fol: {reply}')
    reply, _ = complete('tpctl enable --pr')
    check(reply == [], f'enable --pr: {reply}')
    reply, _ = complete('tpctl --json=')
    check(sorted(reply) == ['off', 'pretty', 'short'], f'--json=: {reply}')
    reply, _ = complete('tpctl call io.tpd.tracing.GetS')
    check(reply == ['io.tpd.tracing.GetStatus'], f'call: {reply}')

    zsh_completion(ctx, tpd, names)

    absent = os.path.join(ctx.tmpdir, 'absent.sock')
    reply, took = complete(f'tpctl --socket {absent} stream -e sched:sched_swi')
    check(reply == [] and took < 5, f'without tpd: {reply} in {took:.2f} s')
    tpd.stop()


if __name__ == '__main__':
    T.run(main)
