#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""`tpctl record` in a hostile or failing directory, and its stop signals.

1. Private: a member's capture (a user of tpd's access group, umask 022) is its own and mode 0600,
   rotated files included, and the private directory of a data file's pages is 0700 while it
   records; the recording holds exactly the generator's getppid calls.
2. Never over another file: a second run with the same -o (plain, and rotating) is refused and
   leaves the first run's files as they were; -o naming a symbolic link is refused, and with
   --force the link is replaced by the file, its target untouched.
3. Planted names: a link planted at the next rotation's name (and at NAME.tmp names) while a
   recording rotates is never followed: the recording stops with status 1 and a message, the
   link's target is untouched, the files finished until then are complete, nothing of the
   recording is left behind.
4. Faults: a rotation whose file cannot be finished (a directory planted at its name, with and
   without --force; a full file system, a small tmpfs, for data files and NDJSON) ends the
   recording with status 1 and a message, no crash, no private directory left, the finished
   files complete (an NDJSON file holds whole lines); a stream beside it gets every one of the
   generator's calls.
5. NDJSON lines longer than --rotate-size with --size: each goes into a file of its own, every
   line is kept in order and tpctl does not spin; at --size it stops by itself.
6. SIGINT and SIGTERM end tpctl record within 2 s in every mode (data file, NDJSON, rotating by
   time and size, idle, while tpd floods it), also after SIGSTOP and SIGCONT.
"""

import glob
import json
import os
import re
import signal
import stat
import subprocess
import time

import tpdtest as T
from tpdtest import check, fail, log

SUMMARY_RE = re.compile(r'tpctl: (\d+) records in (\d+) files?, (\d+) lost')
EVENT = 'syscalls:sys_enter_getppid'
IDLE_EVENT = 'syscalls:sys_enter_ustat'   # nothing on the machine makes it
# The bound of the plain build; a sanitizer build is slower at putting the file together, and gets
# the same scaled bound as comm-thrash's (TPD_TEST_SLOWDOWN).
STOP_WITHIN_S = 2.0 * max(1.0, T.SLOWDOWN / 4)


def private_dirs(d):
    return glob.glob(os.path.join(d, '.tpctl-record-*'))


class Rec(T.Process):
    """tpctl record -o out ARGS, optionally as another user (argv prefix) under a umask."""

    def __init__(self, ctx, tpd, out, *args, prefix=(), umask=None):
        argv = [*prefix, T.env_program('TPCTL'), '--socket', tpd.socket, 'record', '-o', out, *args]
        if umask is not None:
            argv = ['sh', '-c', f'umask {umask:03o} && exec "$@"', 'sh', *argv]
        self.dir = os.path.dirname(out)
        self.before = set(os.listdir(self.dir))
        super().__init__(ctx, f'record-{len(ctx._processes)}', argv, stdout=subprocess.DEVNULL)
        self.out = out
        self.args = args

    def wait_started(self, timeout=10.0):
        """Started: its private directory or its NDJSON file is there (both follow tpd's reply)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if set(os.listdir(self.dir)) - self.before:
                time.sleep(0.3)
                return
            check(self.running(), f'tpctl record exited with {self.proc.returncode}: {self.stderr_text()!r}')
            time.sleep(0.01)
        fail(f'tpctl record {" ".join(self.args)} did not start')

    def finish(self, sig=signal.SIGINT, expect=0, within=STOP_WITHIN_S):
        """Sends sig, asserts the exit status within `within` seconds; returns (records, files,
        lost, seconds taken)."""
        t0 = time.monotonic()
        self.signal(sig)
        rc = self.wait(within + 30)
        took = time.monotonic() - t0
        check(rc is not None, f'tpctl record {" ".join(self.args)} did not exit within {within + 30} s of '
                              f'{signal.Signals(sig).name}')
        check(rc == expect, f'tpctl record {" ".join(self.args)} exited with {rc}, expected {expect}: '
                            f'{self.stderr_text()!r}')
        check(took <= within, f'tpctl record {" ".join(self.args)} took {took:.2f} s to stop after '
                              f'{signal.Signals(sig).name}, more than {within} s')
        m = SUMMARY_RE.search(self.stderr_text())
        check(m, f'no summary from tpctl record: {self.stderr_text()!r}')
        return int(m[1]), int(m[2]), int(m[3]), took

    def exited(self, expect, timeout=30.0):
        rc = self.wait(timeout)
        check(rc is not None, f'tpctl record {" ".join(self.args)} did not exit within {timeout} s')
        check(rc == expect, f'tpctl record {" ".join(self.args)} exited with {rc}, expected {expect}: '
                            f'{self.stderr_text()!r}')
        return self.stderr_text()

    def cpu_seconds(self):
        with open(f'/proc/{self.pid}/stat') as f:
            fields = f.read().rsplit(')', 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf('SC_CLK_TCK')


def report_count(path, pid=None, event='sys_enter_getppid'):
    """Records of event (of pid) in a data file, by `trace-cmd report`, which must read it cleanly."""
    r = subprocess.run(['trace-cmd', 'report', '-N', path],
                       capture_output=True, text=True, errors='replace', timeout=120)
    check(r.returncode == 0 and not r.stderr.strip(),
          f'trace-cmd report {path} exited {r.returncode}: {r.stderr[:500]!r}')
    pat = re.compile(rf'-{pid}\s+\[' if pid is not None else r'\[\d+\]')
    return sum(1 for line in r.stdout.splitlines() if f'{event}:' in line and pat.search(line))


def ndjson_count(path, pid):
    n = 0
    with open(path, 'rb') as f:
        data = f.read()
    check(not data or data.endswith(b'\n'), f'{path} ends in the middle of a line: {data[-100:]!r}')
    for line in data.splitlines():
        rec = json.loads(line)
        if rec.get('pid') == pid and 'lost' not in rec:
            n += 1
    return n


def capture_files(d, stem, ext):
    return sorted(glob.glob(os.path.join(d, f'{stem}-[0-9][0-9][0-9][0-9]{ext}')))


def snapshot(path):
    st = os.lstat(path)
    data = open(path, 'rb').read() if stat.S_ISREG(st.st_mode) else os.readlink(path)
    return (st.st_ino, st.st_mode, st.st_size, st.st_mtime_ns, data)


def paced(ctx, n, rate):
    gen = ctx.gen('GEN_GETPPID', '--count', n, '--rate', rate, '--cpu', 0)
    return gen, gen.pids()[0]


# Calls enough for any rotation a test waits for, however slow the machine; the test stops them.
UNTIL_STOPPED = 10_000_000


def rotating_beside(ctx, tpd, out, rate, *args):
    """A paced generator that calls until stopped (stop_calls), a well-behaved stream of its calls,
    and a recording of them into out rotating every 0.5 s; started, the generator going. Returns
    (generator, its pid, stream, recording)."""
    gen, pid = paced(ctx, UNTIL_STOPPED, rate)
    beside = tpd.stream('-e', EVENT, '-p', str(pid))
    rec = Rec(ctx, tpd, out, '-e', EVENT, '-p', str(pid), '--rotate-time', '0.5', '--no-kallsyms', *args)
    rec.wait_started()
    gen.go()
    return gen, pid, beside, rec


def stop_calls(gen):
    """Stops a generator of rotating_beside; returns how many calls it made."""
    gen.signal(signal.SIGUSR1)
    return gen.wait_done(60)[1]


def check_exact_stream(s, n, what):
    s.drain(lambda: sum(1 for l in s.lines if b'"lost"' not in l) >= n, timeout=30)
    s.stop()
    recs = s.records()
    lost = [r for r in recs if 'lost' in r]
    check(not lost and len(recs) == n, f'{what}: the stream beside got {len(recs)} records ({lost[:2]}), '
                                       f'the generator made {n}')
    log(f'{what}: the stream beside got all {n} calls')


# ----------------------------------------------------------------------------------------------

def private(ctx, tpd, users):
    log('--- a member\'s capture is its own, mode 0600 under umask 022')
    uid, gid = users.uid['A'], users.primary['A']
    d = os.path.join(ctx.tmpdir, 'member')
    os.mkdir(d, 0o755)
    os.chown(d, uid, gid)
    for fmt, ext in (('dat', '.dat'), ('ndjson', '.ndjson')):
        n = 6000
        gen, pid = paced(ctx, n, 10_000)
        rec = Rec(ctx, tpd, os.path.join(d, 'cap' + ext), '-e', EVENT, '-p', str(pid), '--rotate-time', '0.2',
                  '--no-kallsyms', prefix=users.setpriv('A'), umask=0o022)
        rec.wait_started()
        gen.go()
        if fmt == 'dat':
            pd = private_dirs(d)
            check(len(pd) == 1, f'private directories while recording: {pd}')
            st = os.stat(pd[0])
            check(stat.S_IMODE(st.st_mode) == 0o700 and st.st_uid == uid,
                  f'{pd[0]}: mode {stat.S_IMODE(st.st_mode):o}, uid {st.st_uid}; expected 700, {uid}')
        gen.wait_done(60)
        time.sleep(0.5)
        recorded, files, lost, _ = rec.finish()
        names = capture_files(d, 'cap', ext)
        check(files >= 2 and len(names) == files, f'{fmt}: {files} files said, {names} there')
        check(sorted(os.listdir(d)) == sorted(os.path.basename(p) for p in names),
              f'{fmt}: other files in the directory: {sorted(os.listdir(d))}')
        total = 0
        for p in names:
            st = os.lstat(p)
            check(stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600 and st.st_uid == uid,
                  f'{p}: mode {stat.S_IMODE(st.st_mode):o}, uid {st.st_uid}; expected a file 600 of {uid}')
            total += report_count(p, pid) if fmt == 'dat' else ndjson_count(p, pid)
        check(lost == 0 and total == n, f'{fmt}: {total} calls in {len(names)} files ({lost} lost), made {n}')
        log(f'{fmt}: {len(names)} files, each 0600 of the member, {total} calls of {n}')
        for p in names:
            os.unlink(p)


def never_over(ctx, tpd):
    log('--- a second run with the same -o does not overwrite the first one\'s files')
    d = os.path.join(ctx.tmpdir, 'again')
    os.mkdir(d)
    victim = os.path.join(ctx.tmpdir, 'victim-again')
    with open(victim, 'w') as f:
        f.write('precious\n')
    os.chmod(victim, 0o644)
    before_victim = snapshot(victim)

    def record(out, *args):
        return tpd.tpctl('record', '-o', out, '-e', IDLE_EVENT, '--duration', '0.3', '--no-kallsyms', *args,
                         timeout=30)

    for out, args, made in ((os.path.join(d, 'one.dat'), (), ['one.dat']),
                            (os.path.join(d, 'one.ndjson'), (), ['one.ndjson']),
                            (os.path.join(d, 'rot.dat'), ('--rotate-time', '0.1'), ['rot-0001.dat']),
                            (os.path.join(d, 'rot.ndjson'), ('--rotate-size', '1'), ['rot-0001.ndjson'])):
        r = record(out, *args)
        check(r.returncode == 0, f'first run -o {out}: {r.returncode} {r.stderr!r}')
        snaps = {m: snapshot(os.path.join(d, m)) for m in made}
        listing = sorted(os.listdir(d))
        r = record(out, *args)
        check(r.returncode == 1 and 'exists' in r.stderr and '--force' in r.stderr and made[0] in r.stderr,
              f'second run -o {out} {args}: exit {r.returncode}, stderr {r.stderr!r}')
        check(sorted(os.listdir(d)) == listing, f'a refused run changed the directory: {listing} -> {os.listdir(d)}')
        for m, s in snaps.items():
            check(snapshot(os.path.join(d, m)) == s, f'{m} changed by a refused run')
        log(f'-o {os.path.basename(out)} {" ".join(args)}: second run refused: {r.stderr.strip().splitlines()[0]}')

    # --force replaces a file by a new one (a new inode, 0600), never writing into the old one.
    old = snapshot(os.path.join(d, 'one.dat'))
    r = record(os.path.join(d, 'one.dat'), '--force')
    check(r.returncode == 0, f'--force: {r.returncode} {r.stderr!r}')
    new = os.lstat(os.path.join(d, 'one.dat'))
    check(new.st_ino != old[0] and stat.S_IMODE(new.st_mode) == 0o600, '--force did not replace one.dat by a new file')

    # -o naming a link: refused; with --force the link itself is replaced, its target untouched.
    for ext in ('.dat', '.ndjson'):
        link = os.path.join(d, 'link' + ext)
        os.symlink(victim, link)
        r = record(link)
        check(r.returncode == 1 and 'exists' in r.stderr, f'-o a link: {r.returncode} {r.stderr!r}')
        check(os.path.islink(link) and snapshot(victim) == before_victim, 'a refused run touched the link')
        r = record(link, '--force')
        check(r.returncode == 0, f'--force over a link: {r.returncode} {r.stderr!r}')
        st = os.lstat(link)
        check(stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600,
              f'--force left {link} a {stat.filemode(st.st_mode)}')
        check(snapshot(victim) == before_victim, f'--force over a link wrote through it into {victim}')
    check(not private_dirs(d), f'private directories left: {private_dirs(d)}')
    log('--force replaced a file and a link (its target untouched); a link without --force was refused')


def wait_for(path, rec, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not os.path.lexists(path):
        check(rec.running(), f'tpctl record exited with {rec.proc.returncode} before {path}: {rec.stderr_text()!r}')
        check(time.monotonic() < deadline, f'{path} did not appear within {timeout} s')
        time.sleep(0.01)


def planted(ctx, tpd):
    log('--- links planted at rotation names are never followed')
    for ext in ('.dat', '.ndjson'):
        d = os.path.join(ctx.tmpdir, 'plant' + ext.replace('.', '-'))
        os.mkdir(d)
        victim = os.path.join(ctx.tmpdir, 'victim' + ext)
        with open(victim, 'w') as f:
            f.write('precious\n')
        before_victim = snapshot(victim)
        gen, pid, beside, rec = rotating_beside(ctx, tpd, os.path.join(d, 'cap' + ext), 5_000)
        # A data file appears when finished, an NDJSON file when started: either way the file after
        # the one planted is still ahead.
        wait_for(os.path.join(d, 'cap-0002' + ext if ext == '.ndjson' else 'cap-0001' + ext), rec)
        plants = [f'cap-0003{ext}', f'cap-0002{ext}.tmp', f'cap-0003{ext}.tmp', f'cap-0004{ext}.tmp']
        for p in plants:
            os.symlink(victim, os.path.join(d, p))
        err = rec.exited(1)
        check(f'cap-0003{ext}' in err and ('exists' in err or 'taken' in err),
              f'{ext}: no message naming the planted cap-0003{ext}: {err!r}')
        check(snapshot(victim) == before_victim, f'{ext}: the recording wrote through a planted link into {victim}')
        for p in plants:
            check(os.readlink(os.path.join(d, p)) == victim, f'{ext}: the planted link {p} was changed')
        check(not private_dirs(d), f'{ext}: private directories left: {private_dirs(d)}')
        names = capture_files(d, 'cap', ext)
        check([os.path.basename(p) for p in names[:2]] == [f'cap-0001{ext}', f'cap-0002{ext}'] and
              os.path.islink(names[2]) and len(names) == 3, f'{ext}: files after the planted link: {names}')
        got = 0
        for p in names[:2]:
            check(stat.S_IMODE(os.lstat(p).st_mode) == 0o600, f'{p} is not 0600')
            got += report_count(p, pid) if ext == '.dat' else ndjson_count(p, pid)
        check(sorted(os.listdir(d)) == sorted([os.path.basename(p) for p in names] + plants[1:]),
              f'{ext}: files left: {sorted(os.listdir(d))}')
        log(f'{ext}: stopped at the planted link: {err.strip().splitlines()[0]!r}; {got} calls in the 2 files '
            'before it')
        check_exact_stream(beside, stop_calls(gen), ext)


def unfinishable(ctx, tpd):
    log('--- a rotation whose file cannot be finished: status 1, a message, nothing left behind')
    for ext, force in (('.dat', False), ('.dat', True), ('.ndjson', False)):
        d = os.path.join(ctx.tmpdir, f'unfinishable{ext.replace(".", "-")}{"-force" if force else ""}')
        os.mkdir(d)
        gen, pid, beside, rec = rotating_beside(ctx, tpd, os.path.join(d, 'cap' + ext), 5_000,
                                                *(['--force'] if force else []))
        wait_for(os.path.join(d, 'cap-0002' + ext if ext == '.ndjson' else 'cap-0001' + ext), rec)
        os.mkdir(os.path.join(d, f'cap-0003{ext}'))
        os.mkdir(os.path.join(d, f'cap-0002{ext}.tmp'))
        err = rec.exited(1)
        check('cap-0003' + ext in err, f'{ext}: no message naming cap-0003{ext}: {err!r}')
        check(not private_dirs(d), f'{ext}: private directories left: {private_dirs(d)}')
        names = capture_files(d, 'cap', ext)
        check(len(names) == 3 and os.path.isdir(names[2]) and not os.listdir(names[2]),
              f'{ext}: files: {names}')
        for p in names[:2]:
            if ext == '.dat':
                report_count(p, pid)
            else:
                ndjson_count(p, pid)
        log(f'{ext}{" --force" if force else ""}: {err.strip().splitlines()[0]!r}')
        check_exact_stream(beside, stop_calls(gen), ext)


def full_disk(ctx, tpd):
    log('--- a full file system: status 1, a message, whole files only')
    mnt = os.path.join(ctx.tmpdir, 'full')
    os.mkdir(mnt)
    r = subprocess.run(['mount', '-t', 'tmpfs', '-o', 'size=3m,mode=0755', 'tmpfs', mnt], capture_output=True,
                       text=True)
    if r.returncode != 0:
        log(f'note: cannot mount a tmpfs ({r.stderr.strip()}): the full file system case is not run')
        return
    try:
        for ext in ('.dat', '.ndjson'):
            d = os.path.join(mnt, ext[1:])
            os.mkdir(d)
            gen, pid, beside, rec = rotating_beside(ctx, tpd, os.path.join(d, 'cap' + ext), 100_000)
            err = rec.exited(1, timeout=60)
            check('No space left on device' in err, f'{ext}: no message of the full disk: {err!r}')
            check(not private_dirs(d), f'{ext}: private directories left: {private_dirs(d)}')
            names = capture_files(d, 'cap', ext)
            check(sorted(os.listdir(d)) == [os.path.basename(p) for p in names], f'{ext}: left: {os.listdir(d)}')
            got = sum(report_count(p, pid) if ext == '.dat' else ndjson_count(p, pid) for p in names)
            log(f'{ext}: {err.strip().splitlines()[0]!r}; {len(names)} whole files, {got} calls in them')
            check_exact_stream(beside, stop_calls(gen), f'{ext} (full disk)')
            for p in names:
                os.unlink(p)
    finally:
        r = subprocess.run(['umount', mnt], capture_output=True, text=True)
        if r.returncode != 0:
            subprocess.run(['umount', '-l', mnt], capture_output=True)


def long_lines(ctx, tpd):
    log('--- NDJSON lines longer than --rotate-size, with --size')
    d = os.path.join(ctx.tmpdir, 'long')
    os.mkdir(d)
    long_text = 'L' * 3000
    messages = [long_text, 's', 's', 's', 's', 's']
    count = 20
    gen = ctx.gen('GEN_MARKER', '--instance', tpd.instance, '--count', count, '--rate', 200, '--seq', '--cpu', 0,
                  '--wait', *messages)
    gen.pids()
    rec = Rec(ctx, tpd, os.path.join(d, 'long.ndjson'), '-e', 'ftrace:print', '--rotate-size', '0.001', '--size',
              '1')
    rec.wait_started()
    gen.command('go')
    gen.wait_done(60)
    time.sleep(0.5)
    cpu = rec.cpu_seconds()
    check(cpu < 1.0, f'tpctl record used {cpu:.2f} s of CPU for {count * len(messages)} lines: it spins')
    recorded, files, lost, _ = rec.finish()
    total = count * len(messages)
    names = capture_files(d, 'long', '.ndjson')
    seqs, sizes = [], []
    for p in names:
        data = open(p, 'rb').read()
        lines = data.splitlines()
        check(data.endswith(b'\n'), f'{p} does not end with a whole line')
        if len(lines) > 1:
            check(len(data) <= 1048, f'{p} holds {len(lines)} lines in {len(data)} bytes, beyond --rotate-size')
        for line in lines:
            seqs.append(int(json.loads(line)['fields']['buf'].rsplit(' ', 1)[1]))
        sizes.append(len(data))
    check(recorded == total and lost == 0 and files == len(names),
          f'{recorded} records in {files} files ({lost} lost), {total} written, {len(names)} files there')
    check(seqs == list(range(total)), f'lines across the files are not 0..{total - 1}: {seqs[:10]}…')
    log(f'{total} lines, {count} of {len(long_text)}+ bytes, in {len(names)} files (largest {max(sizes)} bytes); '
        f'tpctl used {cpu:.2f} s of CPU')

    # --size reached by long lines: tpctl stops by itself with whole lines.
    d = os.path.join(ctx.tmpdir, 'long-size')
    os.mkdir(d)
    gen = ctx.gen('GEN_MARKER', '--instance', tpd.instance, '--count', 60, '--rate', 200, '--seq', '--cpu', 0,
                  '--wait', long_text)
    gen.pids()
    rec = Rec(ctx, tpd, os.path.join(d, 'lim.ndjson'), '-e', 'ftrace:print', '--rotate-size', '0.001', '--size',
              '0.05')
    rec.wait_started()
    gen.command('go')
    err = rec.exited(0, timeout=30)
    check('stopped at the size limit' in err, f'no size limit in the summary: {err!r}')
    gen.wait_done(60)
    names = capture_files(d, 'lim', '.ndjson')
    total = sum(os.path.getsize(p) for p in names)
    seqs = [int(json.loads(l)['fields']['buf'].rsplit(' ', 1)[1]) for p in names for l in open(p, 'rb')]
    check(total <= 0.05 * 1048576 and seqs == list(range(len(seqs))) and len(seqs) >= 10,
          f'--size 0.05: {total} bytes, lines {seqs}')
    log(f'--size: stopped by itself at {total} bytes, {len(seqs)} whole lines in {len(names)} files')


def signals(ctx, tpd):
    log(f'--- SIGINT and SIGTERM stop tpctl record within {STOP_WITHIN_S} s')
    d = os.path.join(ctx.tmpdir, 'signals')
    os.mkdir(d)
    flood = ctx.gen('GEN_GETPPID', '--count', 400_000_000, '--rate', 200_000, '--cpu', 0)
    pid = flood.pids()[0]
    flood.go()
    modes = [
        ('dat', ['-e', EVENT, '-p', str(pid)]),
        ('ndjson', ['-e', EVENT, '-p', str(pid), '--format', 'ndjson']),
        ('dat-rotate', ['-e', EVENT, '-p', str(pid), '--rotate-time', '0.3', '--keep', '2']),
        ('ndjson-rotate', ['-e', EVENT, '-p', str(pid), '--format', 'ndjson', '--rotate-time', '0.3',
                           '--rotate-size', '1', '--keep', '2']),
        ('dat-idle-rotate', ['-e', IDLE_EVENT, '--rotate-time', '0.3']),
        ('ndjson-idle-rotate', ['-e', IDLE_EVENT, '--format', 'ndjson', '--rotate-time', '0.3']),
    ]
    worst = {}
    i = 0
    for name, args in modes:
        for sig in (signal.SIGINT, signal.SIGTERM):
            for stopped in (False, True):
                i += 1
                out = os.path.join(d, f'{i}-{name}.cap')
                rec = Rec(ctx, tpd, out, '--no-kallsyms', *args)
                rec.wait_started()
                time.sleep(0.5)
                if stopped:
                    rec.signal(signal.SIGSTOP)
                    time.sleep(1.0)
                    rec.signal(signal.SIGCONT)
                    time.sleep(0.3)
                _, _, _, took = rec.finish(sig)
                check(not private_dirs(d), f'{name}: private directories left: {private_dirs(d)}')
                key = f'{name} {signal.Signals(sig).name}{" after SIGSTOP/SIGCONT" if stopped else ""}'
                worst[key] = took
    flood.kill()
    log('stopped within: ' + ', '.join(f'{k} {v:.2f} s' for k, v in worst.items()))


def main(ctx):
    with T.TestUsers(ctx, 'tpr', members=('A',)) as users:
        os.chmod(ctx.tmpdir, 0o711)
        tpd = ctx.tpd(args=['--access-group', users.group])
        never_over(ctx, tpd)
        long_lines(ctx, tpd)
        private(ctx, tpd, users)
        planted(ctx, tpd)
        unfinishable(ctx, tpd)
        full_disk(ctx, tpd)
        signals(ctx, tpd)
        tpd.stop()


if __name__ == '__main__':
    T.run(main)
