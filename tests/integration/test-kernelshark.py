#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""`tpctl record` files open in KernelShark (Debian's kernelshark 2.2 and libkshark-dev).

A recording of a pipe ping-pong (sched_switch, sched_waking) and 1,000 numbered trace_marker
writes (ftrace:print) into tpd's instance, then:

1. libkshark, the library KernelShark loads files with (tests/integration/kshark-load.c), loads
   every record of it as an entry: as many as tpctl recorded and `trace-cmd report` lists, and per
   CPU, in order, the same (pid, timestamp in ns, event) as trace-cmd; the 1,000 markers are there.
2. The GUI: `kernelshark FILE` as a test user (as root it opens with a warning dialog) in Xvfb
   (xvfb-run) shows one window and no dialog, draws it (a screenshot of the display with xwd is
   not blank), and is still running when the test kills it. The screenshot is kept as a PNG in
   $TPD_TEST_ARTIFACTS (the build's meson-logs/), its path in the log.

It skips, saying so, only when the programs are not installed (.ci/deps installs them).
"""

import collections
import os
import re
import shutil
import signal
import struct
import subprocess
import time
import zlib

import tpdtest as T
from tpdtest import check, log

ROUND_TRIPS = 2_000
MARKER_N = 1_000
EVENTS = ['sched:sched_switch', 'sched:sched_waking', 'ftrace:print']
SUMMARY_RE = re.compile(r'tpctl: (\d+) records in (\d+) files?, (\d+) lost')
ERROR_RE = re.compile(r'error|fail|cannot|unable|abort|segmentation', re.I)
# KernelShark's KVM plugin starts only on a file with kvm:kvm_entry and kvm:kvm_exit records (a host
# and guest recording); on any other file it says this, whoever recorded it.
KVM_PLUGIN_RE = re.compile(r'^plugin "kvm_combo" failed to initialize on stream ')


def record(ctx, tpd, out):
    pingpong = ctx.gen('GEN_PINGPONG', '--count', ROUND_TRIPS)
    marker = ctx.gen('GEN_MARKER', '--instance', tpd.instance, '--count', MARKER_N, '--seq', '--wait', 'tpd-kshark')
    pids = pingpong.pids() + marker.pids()
    argv = [T.env_program('TPCTL'), '--socket', tpd.socket, 'record', '-o', out,
            *[a for e in EVENTS for a in ('-e', e)]]
    rec = T.Process(ctx, 'record', argv, stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while not [f for f in os.listdir(ctx.tmpdir) if f.startswith('.tpctl-record-')]:
        check(rec.running(), f'tpctl record exited with {rec.proc.returncode}: {rec.stderr_text()!r}')
        check(time.monotonic() < deadline, 'tpctl record did not start within 10 s')
        time.sleep(0.02)
    time.sleep(0.5)
    T.record_ping_pong_and_markers(rec, pingpong, marker)
    m = SUMMARY_RE.search(rec.stderr_text())
    check(m and m[2] == '1' and m[3] == '0', f'tpctl record summary: {rec.stderr_text()!r}')
    log(f'tpctl record: {m[1]} records in {out}, 0 lost')
    return int(m[1]), pids


def library(out, n, pids):
    log('--- libkshark loads every record, as trace-cmd reads them')
    loader = os.environ.get('KSHARK_LOAD')
    if not loader:
        raise T.TestSkip('libkshark was not found when the build was configured (Debian package libkshark-dev; '
                         '.ci/deps installs it): kshark-load is not built')
    # In the sanitized build LeakSanitizer finds a few bytes libkshark 2.2.1 itself never frees (the
    # stream's name from kshark_add_stream): Debian's library, not tpd's code, whose checks stay on.
    env = dict(os.environ, ASAN_OPTIONS=':'.join(filter(None, [os.environ.get('ASAN_OPTIONS'), 'detect_leaks=0'])))
    r = subprocess.run([loader, out], capture_output=True, text=True, timeout=120, env=env)
    check(r.returncode == 0, f'kshark-load {out} exited with {r.returncode}: {r.stderr[:1000]!r}')
    lines = r.stdout.splitlines()
    check(lines and lines[-1] == f'entries {len(lines) - 1}', f'kshark-load output ends with {lines[-1:]!r}')
    entries = []
    for line in lines[:-1]:
        cpu, pid, ts, event = line.split(' ', 3)
        entries.append({'cpu': int(cpu), 'pid': int(pid), 'ts': int(ts), 'event': event.rsplit('/', 1)[-1]})

    records, dropped = T.trace_cmd_report(out)
    check(not dropped, f'trace-cmd reports dropped events: {dropped}')
    check(len(records) == n, f'trace-cmd report lists {len(records)} records, tpctl recorded {n}')
    check(len(entries) == n, f'libkshark loads {len(entries)} entries, tpctl recorded {n}')

    def per_cpu(rows):
        out = collections.defaultdict(list)
        for x in rows:
            out[x['cpu']].append((x['pid'], x['ts'], x['event']))
        return out
    # trace-cmd merges the CPUs by time; libkshark sorts its entries by time too, but equal
    # timestamps of two CPUs may come in either order: CPU by CPU, the order is the file's.
    a, b = per_cpu(entries), per_cpu(records)
    check(sorted(a) == sorted(b), f'CPUs: libkshark {sorted(a)}, trace-cmd {sorted(b)}')
    for cpu in sorted(b):
        check(len(a[cpu]) == len(b[cpu]), f'CPU {cpu}: libkshark {len(a[cpu])} entries, trace-cmd {len(b[cpu])}')
        for i, (x, y) in enumerate(zip(a[cpu], b[cpu])):
            check(x == y, f'CPU {cpu}, record {i}: libkshark (pid, ts, event) {x}, trace-cmd {y}')
    ts = [e['ts'] for e in entries]
    check(ts == sorted(ts), 'libkshark entries are not in time order')
    marks = [e for e in entries if e['event'] == 'print' and e['pid'] == pids[2]]
    check(len(marks) == MARKER_N, f'{len(marks)} markers of gen-marker (pid {pids[2]}) among the entries, '
                                  f'{MARKER_N} written')
    texts = [r['body'] for r in records if r['event'] == 'print' and r['pid'] == pids[2]]
    check([int(t.rsplit(' ', 1)[1]) for t in texts] == list(range(MARKER_N)), 'markers not numbered 0..999 in order')
    events = collections.Counter(e['event'] for e in entries)
    switches = sum(1 for e in entries if e['event'] == 'sched_switch' and e['pid'] in pids[:2])
    check(switches >= 2 * ROUND_TRIPS, f'only {switches} sched_switch entries of the ping-pong, '
                                       f'{ROUND_TRIPS} round trips')
    log(f'libkshark: {len(entries)} entries, the records of trace-cmd report CPU by CPU '
        f'({ {c: len(v) for c, v in sorted(b.items())} }); events {dict(events)}')


def read_xwd(path):
    """(width, height, rows of pixels as 0xRRGGBB) of an XWD file (xwd -root) of a TrueColor display
    of 24 or 32 bits per pixel."""
    with open(path, 'rb') as f:
        data = f.read()
    check(len(data) >= 100, f'{path}: {len(data)} bytes, not an XWD file')
    h = struct.unpack('>25I', data[:100])
    header_size, version, fmt, depth, width, height = h[:6]
    byte_order, bpp, bpl, ncolors = h[7], h[11], h[12], h[19]
    check(version == 7 and fmt == 2 and bpp in (24, 32),
          f'{path}: XWD version {version}, format {fmt}, {bpp} bits per pixel; expected 7, ZPixmap, 24 or 32')
    start = header_size + 12 * ncolors
    check(len(data) >= start + bpl * height, f'{path}: truncated XWD ({len(data)} bytes)')
    step = bpp // 8
    rows = []
    for y in range(height):
        line = data[start + y * bpl:start + y * bpl + width * step]
        wide = bytearray(4 * width)
        for i in range(3):
            # Little-endian pixels hold blue, green, red from the lowest byte; big-endian the reverse.
            j = i if byte_order == 0 else step - 1 - i
            wide[i::4] = line[j::step]
        rows.append(struct.unpack(f'<{width}I', wide))
    return width, height, rows


def write_png(path, width, height, rows):
    """An RGB PNG of the pixels (0x00RRGGBB), with the standard library's zlib."""
    raw = bytearray()
    for row in rows:
        raw.append(0)
        for p in row:
            raw += bytes(((p >> 16) & 0xff, (p >> 8) & 0xff, p & 0xff))

    def chunk(kind, body):
        return struct.pack('>I', len(body)) + kind + body + struct.pack('>I', zlib.crc32(kind + body))
    with open(path, 'wb') as f:
        f.write(b'\x89PNG\r\n\x1a\n' + chunk(b'IHDR', struct.pack('>IIBBBBB', width, height, 8, 2, 0, 0, 0)) +
                chunk(b'IDAT', zlib.compress(bytes(raw), 9)) + chunk(b'IEND', b''))


def top_windows(users, env):
    """Names of the top-level windows shown on the display (xwininfo; mapped and viewable)."""
    def xwininfo(*args):
        r = subprocess.run([*users.setpriv('viewer'), 'xwininfo', *args], capture_output=True, text=True, env=env,
                           timeout=30)
        check(r.returncode == 0, f'xwininfo {" ".join(args)} exited with {r.returncode}: {r.stderr!r}')
        return r.stdout
    names = []
    for line in xwininfo('-root', '-children').splitlines():
        m = re.match(r'\s+(0x[0-9a-f]+) (?:"(.*)"|\(has no name\)): \(', line)
        if m and 'Map State: IsViewable' in xwininfo('-id', m[1]):
            names.append(m[2] or '(has no name)')
    return names


def gui(ctx, out):
    log('--- KernelShark opens the file in Xvfb, as a user')
    for prog in ('kernelshark', 'xvfb-run', 'xwd', 'xwininfo', 'xauth'):
        if not shutil.which(prog):
            raise T.TestSkip(f'{prog} is not installed (Debian packages kernelshark, xvfb, x11-apps, x11-utils, '
                             f'xauth; .ci/deps installs them)')
    # Xvfb's socket directory, as systemd-tmpfiles makes it at boot (tmpfiles.d/x11.conf): a fresh
    # machine may not have it yet, and the user's Xvfb would make it its own.
    if not os.path.isdir('/tmp/.X11-unix'):
        os.mkdir('/tmp/.X11-unix')
        os.chmod('/tmp/.X11-unix', 0o1777)
    users = T.TestUsers(ctx, 'tpks', ['viewer'])
    ks = None
    stdout_path = os.path.join(ctx.tmpdir, 'kernelshark.stdout')
    try:
        uid, gid = users.uid['viewer'], users.primary['viewer']
        os.chmod(ctx.tmpdir, 0o711)
        view = os.path.join(ctx.tmpdir, 'viewer')
        os.mkdir(view, 0o700)
        os.chown(view, uid, gid)
        dat = os.path.join(view, 'sched.dat')
        shutil.copyfile(out, dat)
        os.chown(dat, uid, gid)
        env = {'PATH': '/usr/local/bin:/usr/bin:/bin', 'HOME': view, 'TMPDIR': view, 'LANG': 'C.UTF-8',
               'XDG_RUNTIME_DIR': view, 'XDG_CONFIG_HOME': os.path.join(view, '.config'),
               'XDG_CACHE_HOME': os.path.join(view, '.cache')}
        info = os.path.join(view, 'display')
        # The display's name and its cookie, for xwd and xwininfo, then KernelShark itself.
        inner = f'echo "$DISPLAY $XAUTHORITY" > {info}; exec kernelshark "$1"'
        ks = T.Process(ctx, 'kernelshark', [*users.setpriv('viewer'), 'xvfb-run', '-a', '-s', '-screen 0 1280x800x24',
                                            'sh', '-c', inner, 'sh', dat],
                       stdin=subprocess.DEVNULL, stdout=open(stdout_path, 'wb'), env=env, cwd=view, start_new_session=True)
        deadline = time.monotonic() + 30
        while not (os.path.exists(info) and open(info).read().endswith('\n')):
            check(ks.running(), f'xvfb-run kernelshark exited with {ks.proc.returncode}: {ks.stderr_text()!r}')
            check(time.monotonic() < deadline, f'xvfb-run did not start kernelshark within 30 s: {ks.stderr_text()!r}')
            time.sleep(0.1)
        display, xauthority = open(info).read().split()
        xenv = dict(env, DISPLAY=display, XAUTHORITY=xauthority)
        log(f'kernelshark {dat} on display {display}')

        # Drawn: the main window is mapped and the screen has settled (two shots alike) with more
        # than a few colours in it.
        xwd = os.path.join(view, 'shot.xwd')
        previous, shot, windows = None, None, []
        deadline = time.monotonic() + 60
        while True:
            check(ks.running(), f'kernelshark exited with {ks.proc.returncode}: {ks.stderr_text()!r}')
            windows = top_windows(users, xenv)
            if windows:
                r = subprocess.run([*users.setpriv('viewer'), 'xwd', '-root', '-silent', '-out', xwd],
                                   capture_output=True, text=True, env=xenv, timeout=30)
                check(r.returncode == 0, f'xwd exited with {r.returncode}: {r.stderr!r}')
                shot = read_xwd(xwd)
                colours = len(set(p & 0xffffff for row in shot[2] for p in row))
                if colours > 64 and shot[2] == previous:
                    break
                previous = shot[2]
            check(time.monotonic() < deadline, f'kernelshark drew nothing in 60 s: windows {windows}; '
                                               f'stderr {ks.stderr_text()!r}')
            time.sleep(2)
        time.sleep(2)
        check(ks.running(), f'kernelshark exited with {ks.proc.returncode}: {ks.stderr_text()!r}')
        windows = top_windows(users, xenv)
        log(f'top-level windows: {windows}; {colours} colours on the screen')
        # The main window's title names the file; a dialog (an error, or root's warning) would be a
        # second window.
        check(windows == [f'Kernel Shark ({dat})'], f'expected only KernelShark\'s main window on {dat}, not a '
                                                     f'dialog: {windows}')
        width, height, rows = shot
        artifacts = os.environ.get('TPD_TEST_ARTIFACTS') or ctx.tmpdir
        os.makedirs(artifacts, exist_ok=True)
        png = os.path.join(artifacts, 'kernelshark.png')
        write_png(png, width, height, rows)
        log(f'screenshot ({width}x{height}, {colours} colours): {png}')
    finally:
        if ks and ks.running():
            os.killpg(ks.pid, signal.SIGTERM)
            if ks.wait(10) is None:
                os.killpg(ks.pid, signal.SIGKILL)
                ks.wait(10)
        stderr = ks.stderr_text(20000) if ks else ''
        if ks:
            with open(stdout_path, errors='replace') as f:
                stderr += f.read()
        users.stop_and_remove(ctx)
    bad = [l for l in stderr.splitlines() if ERROR_RE.search(l) and not KVM_PLUGIN_RE.match(l)]
    log(f'kernelshark stdout and stderr: {stderr.strip()!r}')
    check(not bad, f'kernelshark complained: {bad[:10]}')


def main(ctx):
    tpd = ctx.tpd()
    out = os.path.join(ctx.tmpdir, 'x.dat')
    n, pids = record(ctx, tpd, out)
    tpd.stop()
    library(out, n, pids)
    gui(ctx, out)


if __name__ == '__main__':
    T.run(main)
