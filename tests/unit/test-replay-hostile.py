#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""`tpctl replay` of captures made to hurt it fails cleanly: exit status 1 and one clear message, or
the records it can read; never a crash, unbounded memory or a control byte of the file on a terminal.

- a data file whose format puts common_pid (or another field) beyond what a record holds is
  refused, naming the event and the field; one whose common_pid lies past the records (but within a record's reach) makes
  lost records of cause "decode" and a warning;
- data files with an impossible page size, cut short, or with an option libtracecmd would read
  past are refused before libtracecmd sees them; so is each damaged file of the capture fuzzer's
  corpus (tests/fuzz/corpus/capture/damaged-*, each of which crashed libtracecmd or libtraceevent),
  for the reason its name gives;
- an NDJSON line longer than 16 MiB is refused without holding it (tpctl's peak memory stays far
  below the 256 MiB line, read from a pipe), and so is a line with a raw control byte;
- on a terminal, DEL and the C1 controls inside strings become \\u00XX escapes, the rest is the
  same; through a pipe the lines are the file's, byte for byte.
Arguments: TPCTL MAKE_CAPTURE_SEED DATA_DIR"""

import os
import pty
import resource
import shutil
import subprocess
import sys
import tempfile
import threading

failures = []


def check(cond, msg):
    if not cond:
        failures.append(msg)
        print('FAIL: ' + msg, flush=True)


def replay(tpctl, *args):
    return subprocess.run([tpctl, 'replay', *args], capture_output=True, timeout=120)


def seed(make_seed, data_dir, tmp, dataset, version, edit=None):
    """A data file of a dataset, its formats edited by edit(text) first."""
    src = os.path.join(data_dir, dataset)
    if edit:
        copy = os.path.join(tmp, f'{dataset}-edited')
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(src, copy)
        shutil.copy(os.path.join(data_dir, 'print', 'ftrace.print.format'), os.path.join(tmp, 'print.format'))
        for name in os.listdir(copy):
            if name.endswith('.format'):
                path = os.path.join(copy, name)
                with open(path) as f:
                    text = f.read()
                with open(path, 'w') as f:
                    f.write(edit(text))
        src = copy
    out = os.path.join(tmp, f'{dataset}-v{version}.dat')
    subprocess.run([make_seed, src, str(version), out, '1'], check=True, timeout=60)
    return out


def on_terminal(tpctl, path):
    """tpctl replay's standard output when it is a terminal."""
    pid, fd = pty.fork()
    if pid == 0:
        os.execv(tpctl, [tpctl, 'replay', path])
    out = b''
    while True:
        try:
            chunk = os.read(fd, 65536)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    _, status = os.waitpid(pid, 0)
    # The terminal turns "\n" into "\r\n".
    return os.waitstatus_to_exitcode(status), out.replace(b'\r\n', b'\n')


def test_formats(tpctl, make_seed, data_dir, tmp):
    for version in (6, 7):
        good = seed(make_seed, data_dir, tmp, 'print', version)
        r = replay(tpctl, good)
        check(r.returncode == 0 and r.stdout.count(b'\n') == 10,
              f'v{version}: the print dataset replays 10 records: {r.returncode} {r.stderr!r}')

        far = seed(make_seed, data_dir, tmp, 'print', version,
                   lambda t: t.replace('common_pid;\toffset:4;', 'common_pid;\toffset:70000;'))
        r = replay(tpctl, far)
        check(r.returncode == 1 and r.stdout == b'', f'v{version}: far common_pid: exit {r.returncode}, {r.stdout[:200]!r}')
        check(b"is damaged: the format of 'ftrace:print'" in r.stderr and b"field 'common_pid'" in r.stderr,
              f'v{version}: far common_pid: {r.stderr!r}')

        past = seed(make_seed, data_dir, tmp, 'print', version,
                    lambda t: t.replace('common_pid;\toffset:4;', 'common_pid;\toffset:4000;'))
        r = replay(tpctl, past)
        lines = r.stdout.splitlines()
        check(r.returncode == 0 and len(lines) == 10 and all(b'"cause":"decode"' in l for l in lines),
              f'v{version}: common_pid past the records: exit {r.returncode}, {r.stdout[:300]!r}')
        check(b'10 records of' in r.stderr and b'shorter than their format' in r.stderr,
              f'v{version}: common_pid past the records: {r.stderr!r}')

        size = seed(make_seed, data_dir, tmp, 'print', version,
                    lambda t: t.replace('field:unsigned long ip;\toffset:8;\tsize:8;',
                                        'field:unsigned long ip;\toffset:65530;\tsize:8;'))
        r = replay(tpctl, size, '--print')
        check(r.returncode == 1 and b"field 'ip'" in r.stderr, f'v{version}: ip at 65530: {r.returncode} {r.stderr!r}')


def test_headers(tpctl, make_seed, data_dir, tmp):
    good = seed(make_seed, data_dir, tmp, 'print', 6)
    with open(good, 'rb') as f:
        data = f.read()
    cases = {
        # magic, "6\0", endian, long size, then the page size
        'page-size-0': (data[:14] + b'\0\0\0\0' + data[18:], b'page size is none a kernel has'),
        'long-size-3': (data[:13] + b'\x03' + data[14:], b'page size is none a kernel has'),
        'version-8': (data[:10] + b'8' + data[11:], b'of a version other than 6 or 7'),
        'cut-short': (data[:3000], b'cut short'),
        'header-page-huge': (data[:30] + b'\xff' * 8 + data[38:], b'cut short'),
    }
    # The options of version 6: the VERSION option's text ("tpd X.Y.Z") without its NUL.
    at = data.find(b'tpd ')
    end = data.find(b'\0', at)
    check(at > 0 and end > at, 'no VERSION option found')
    cases['option-without-nul'] = (data[:end] + b'x' + data[end + 1:], b"an option's text does not end")
    for name, (content, want) in cases.items():
        path = os.path.join(tmp, name + '.dat')
        with open(path, 'wb') as f:
            f.write(content)
        r = replay(tpctl, path)
        check(r.returncode == 1 and b'is damaged' in r.stderr and want in r.stderr and b'crashed' not in r.stderr,
              f'{name}: exit {r.returncode}, {r.stderr!r}')


# Each damaged file of the fuzzer's corpus and what tpctl must say of it (tests/fuzz/README.md).
DAMAGED = {
    'damaged-v6-cpu-data-beyond-end': b'its CPU data lies beyond its end',
    'damaged-v6-latency': b'it is a latency trace',
    'damaged-v6-option-without-nul': b"an option's text does not end",
    'damaged-v6-page-kbuffer-reads-past': b'a page of its CPU data is damaged',
    'damaged-v6-page-libtracecmd': b'event hooks, process maps or guests',
    'damaged-v7-cpu-data-beyond-end': b'its CPU data lies beyond its end',
    'damaged-v7-cpucount-cut-short': b'an option is cut short',
    'damaged-v7-option-without-nul': b"an option's text does not end",
    'damaged-v7-page-kbuffer-reads-past': b'a page of its CPU data is damaged',
    'damaged-v7-printk-format-short': b'a section of its headers, formats, symbols or names',
    'damaged-v7-traceclock-cut-short': b'its options are cut short or damaged',
}


def test_damaged_corpus(tpctl, corpus):
    found = sorted(n for n in os.listdir(corpus) if n.startswith('damaged-'))
    check(found == sorted(DAMAGED), f'damaged files in {corpus}: {found}, expected {sorted(DAMAGED)}')
    for name in found:
        r = replay(tpctl, os.path.join(corpus, name))
        want = DAMAGED.get(name, b'')
        check(r.returncode == 1 and b'is damaged' in r.stderr and want in r.stderr and b'crashed' not in r.stderr,
              f'{name}: exit {r.returncode}, {r.stderr!r}, expected "is damaged: {want.decode()}"')


def test_ndjson(tpctl, tmp):
    line = b'{"ts":1,"cpu":0,"event":"ftrace:print","pid":1,"fields":{"buf":"x"}}\n'
    # 256 MiB on one line, through a pipe (no file to hold it): tpctl holds at most 16 MiB of it.
    r, w = os.pipe()
    with open(os.path.join(tmp, 'long.out'), 'w+b') as out_f, open(os.path.join(tmp, 'long.err'), 'w+b') as err_f:
        p = subprocess.Popen([tpctl, 'replay', '/dev/stdin'], stdin=r, stdout=out_f, stderr=err_f)
        os.close(r)

        def feed():
            try:
                os.write(w, line)
                os.write(w, b'{"ts":2,"cpu":0,"event":"ftrace:print","pid":1,"fields":{"buf":"')
                chunk = b'a' * (1 << 20)
                for _ in range(256):
                    view = memoryview(chunk)
                    while view:
                        view = view[os.write(w, view):]
                os.write(w, b'"}}\n' + line)
            except BrokenPipeError:
                pass
            finally:
                os.close(w)
        writer = threading.Thread(target=feed)
        writer.start()
        p.wait(timeout=120)
        writer.join()
        out_f.seek(0)
        err_f.seek(0)
        out, err = out_f.read(), err_f.read()
    peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    check(p.returncode == 1 and out == line, f'long line: exit {p.returncode}, {out[:200]!r}')
    check(b'/dev/stdin:2: a line longer than 16777216 bytes' in err, f'long line: {err!r}')
    # Far below the line, also with a sanitizer's shadow memory and quarantine.
    check(peak_kib < 128 * 1024, f'long line: tpctl peaked at {peak_kib} KiB')

    raw = os.path.join(tmp, 'raw.ndjson')
    with open(raw, 'wb') as f:
        f.write(line + b'{"ts":2,"cpu":0,"event":"ftrace:print","pid":1,"fields":{"buf":"\x1b[2J"}}\n')
    r = replay(tpctl, raw)
    check(r.returncode == 1 and r.stdout == line and b'raw.ndjson:2: not a record' in r.stderr,
          f'raw control byte: exit {r.returncode}, {r.stdout!r}, {r.stderr!r}')

    # DEL and a C1 control (CSI, U+009B) are valid inside JSON strings.
    hostile = b'{"ts":3,"cpu":0,"event":"ftrace:print","pid":1,"comm":"a\x7fb","fields":{"buf":"\xc2\x9b2J\\u001b"}}\n'
    path = os.path.join(tmp, 'hostile.ndjson')
    with open(path, 'wb') as f:
        f.write(line + hostile)
    r = replay(tpctl, path)
    check(r.returncode == 0 and r.stdout == line + hostile, f'hostile through a pipe: {r.returncode} {r.stdout!r}')
    status, out = on_terminal(tpctl, path)
    want = line + hostile.replace(b'\x7f', b'\\u007f').replace(b'\xc2\x9b', b'\\u009b')
    check(status == 0 and out == want, f'hostile on a terminal: {status} {out!r}')


def test_terminal_dat(tpctl, make_seed, data_dir, tmp):
    path = seed(make_seed, data_dir, tmp, 'print', 7)
    plain = replay(tpctl, path).stdout
    status, out = on_terminal(tpctl, path)
    check(status == 0 and out.count(b'\n') == 10, f'print dataset on a terminal: {status} {out[:300]!r}')
    bad = [c for c in out if c < 0x20 and c != 0x0a or c == 0x7f]
    check(not bad and b'\xc2\x80' not in out, f'print dataset on a terminal: control bytes {bad[:10]}')
    check(b'\\u007f' in out or b'\x7f' not in plain, 'print dataset: its DEL is not escaped on a terminal')


def main(tpctl, make_seed, data_dir):
    with tempfile.TemporaryDirectory() as tmp:
        # First: it measures the peak memory of the children so far.
        test_ndjson(tpctl, tmp)
        test_formats(tpctl, make_seed, data_dir, tmp)
        test_headers(tpctl, make_seed, data_dir, tmp)
        test_damaged_corpus(tpctl, os.path.join(data_dir, '..', 'fuzz', 'corpus', 'capture'))
        test_terminal_dat(tpctl, make_seed, data_dir, tmp)
    if failures:
        print(f'{len(failures)} failures')
        return 1
    print('ok')
    return 0


if __name__ == '__main__':
    sys.exit(main(*sys.argv[1:4]))
