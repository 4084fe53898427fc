#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""tpctl record against a stand-in for tpd on a socketpair-like Unix socket (no kernel needed):

- a Record reply naming another frame version, or none, is refused with exit 1 and a message
  naming both versions, and no file is left behind;
- a NOTICE frame (version 1) is printed on stderr as a warning with its text escaped (a message
  carrying a terminal escape), and the recording goes on: the page after it is counted;
- a frame tpctl cannot take (an unknown type, a page of the wrong size, a malformed loss) ends the
  recording with exit 1 and a message, the page before it kept out of nothing;
- into a Perfetto trace (`-o x.perfetto-trace`, the same frames read without a data file): a page
  before its events' formats, or a format libtraceevent cannot parse, ends it with exit 1 and a
  message, the trace finished with what came before; with a format, each record of a page is an event of its CPU's bundle (protoc reads
  the trace), and records of an event without a format and a LOST frame's count are the CPU's
  overrun.

Usage: test-tpctl-frames.py TPCTL
"""

import json
import os
import re
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading

FRAME_PAGE, FRAME_FILE, FRAME_LOST, FRAME_NOTICE = 1, 2, 4, 5
PAGE_SIZE = 4096
PROTO_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'data')
GETPPID_FORMAT = b'''name: sys_enter_getppid
ID: 1
format:
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;
\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;
\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;

print fmt: "getppid"
'''


def frame(t, payload, cpu=0, arg=0):
    return struct.pack('=IIII', t, len(payload), cpu, arg) + payload


def page_with(records, event_id=1):
    """A sub-buffer page: u64 timestamp, u64 commit, then 'records' 8-byte padding-free events."""
    data = b''
    for i in range(records):
        # type_len 2 (2 words of data), time delta 1; then 8 bytes: event id, flags, pid
        data += struct.pack('=I', (1 << 5) | 2) + struct.pack('=HBBi', event_id, 0, 0, 1000 + i)
    return struct.pack('=QQ', 1000, len(data)) + data + b'\0' * (PAGE_SIZE - 16 - len(data))


def serve(path, reply, frames, ready):
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    srv.listen(1)
    ready.set()
    conn, _ = srv.accept()
    buf = b''
    while b'\0' not in buf:
        chunk = conn.recv(65536)
        if not chunk:
            return
        buf += chunk
    conn.sendall(json.dumps({'parameters': reply}).encode() + b'\0' + frames)
    # tpctl stops on SIGTERM or when tpd closes: close after the frames.
    conn.close()
    srv.close()


def record(tpctl, tmp, name, reply, frames=b'', ext='dat'):
    path = os.path.join(tmp, f'{name}.sock')
    ready = threading.Event()
    t = threading.Thread(target=serve, args=(path, reply, frames, ready), daemon=True)
    t.start()
    ready.wait(5)
    out = os.path.join(tmp, f'{name}.{ext}')
    r = subprocess.run([tpctl, '--socket', path, 'record', '-o', out, '--no-kallsyms'], capture_output=True,
                       text=True, timeout=30)
    t.join(5)
    return r, out


def check(cond, msg):
    if not cond:
        print(f'FAIL: {msg}', flush=True)
        sys.exit(1)


def main():
    tpctl = sys.argv[1]
    base = {'clock': 'boot', 'boot_to_realtime_ns': 0, 'page_size': PAGE_SIZE, 'cpus': 1,
            'flush_interval_ms': 10, 'events': ['syscalls:sys_enter_getppid']}
    with tempfile.TemporaryDirectory() as tmp:
        r, out = record(tpctl, tmp, 'v2', dict(base, frames=2))
        check(r.returncode == 1, f'frames 2: exit {r.returncode}, stderr {r.stderr!r}')
        check('version 2' in r.stderr and 'version 1' in r.stderr, f'frames 2: {r.stderr!r}')
        check(not os.path.exists(out), 'frames 2: a file was left behind')

        r, out = record(tpctl, tmp, 'none', base)
        check(r.returncode == 1 and 'no frame version' in r.stderr, f'no frames: {r.returncode} {r.stderr!r}')
        check(not os.path.exists(out), 'no frames: a file was left behind')

        # As tpd escapes it: the control byte as \u001b; tpctl must not print it raw.
        notice = json.dumps({'ts': 42, 'notice': 'instance-changed',
                             'message': "tracing_on was changed to '0'\x1b[31m"}).encode()
        frames = frame(FRAME_NOTICE, notice) + frame(FRAME_PAGE, page_with(3), arg=3)
        r, out = record(tpctl, tmp, 'notice', dict(base, frames=1), frames)
        err = r.stderr
        check('tpd notice instance-changed at ts 42' in err, f'no notice warning: {err!r}')
        check('\x1b' not in err and '\\x1b[31m' in err, f'the notice is not escaped: {err!r}')
        check('tpctl: 3 records in' in err, f'the page after the notice was not kept: {err!r}')
        # tpd "went away" after the frames (and sent no files a data file needs): 69, as for any
        # recording whose tpd closes it.
        check(r.returncode == 69, f'notice: exit {r.returncode}: {err!r}')

        # Frames of a broken stream: not skipped, an error.
        broken = {'unknown': (frame(9, b'xyz'), 'frame of unknown type 9'),
                  'short page': (frame(FRAME_PAGE, b'\0' * 100, arg=1), 'a page of 100 bytes'),
                  'bad loss': (frame(4, b'\0' * 3, arg=1), 'malformed loss')}
        for name, (bad, words) in broken.items():
            r, out = record(tpctl, tmp, name.replace(' ', '-'), dict(base, frames=1),
                            frame(FRAME_PAGE, page_with(2), arg=2) + bad + frame(FRAME_PAGE, page_with(3), arg=3))
            check(r.returncode == 1 and words in r.stderr, f'{name}: exit {r.returncode}, stderr {r.stderr!r}')
            check('tpctl: 2 records in' in r.stderr, f'{name}: the pages around it: {r.stderr!r}')
        perfetto(tpctl, tmp, dict(base, frames=1))
    print('PASS: tpctl frames', flush=True)


def perfetto(tpctl, tmp, reply):
    fmt = frame(FRAME_FILE, b'events/syscalls/sys_enter_getppid/format\0' + GETPPID_FORMAT)
    broken = {'pf-early': (frame(FRAME_PAGE, page_with(2), arg=2) + fmt, "page of CPU 0 before its events' formats"),
              'pf-format': (frame(FRAME_FILE, b'events/syscalls/sys_enter_getppid/format\0garbage'),
                            'a file tpctl does not take')}
    for name, (frames, words) in broken.items():
        r, out = record(tpctl, tmp, name, reply, frames, ext='perfetto-trace')
        check(r.returncode == 1 and words in r.stderr, f'{name}: exit {r.returncode}, stderr {r.stderr!r}')
        # As a data file keeps the pages before a fault: the trace is whole, with what came before.
        check(os.path.exists(out) and not [f for f in os.listdir(tmp) if f.startswith('.tpctl-')],
              f'{name}: the trace is not whole: {os.listdir(tmp)}')

    # Three getppid records, two of an event without a format, and five lost.
    frames = (fmt + frame(FRAME_PAGE, page_with(3), arg=3) + frame(FRAME_PAGE, page_with(2, event_id=7), arg=2)
              + frame(FRAME_LOST, struct.pack('=QQ', 5, 1000), arg=1))
    r, out = record(tpctl, tmp, 'pf', reply, frames, ext='perfetto-trace')
    check(r.returncode == 69 and 'tpctl: 5 records in' in r.stderr, f'perfetto: exit {r.returncode}: {r.stderr!r}')
    protoc = shutil.which('protoc')
    check(protoc, 'protoc is not installed (Debian\'s protobuf-compiler): the trace cannot be read')
    d = subprocess.run([protoc, '--decode=perfetto.protos.Trace', f'--proto_path={PROTO_DIR}', 'perfetto-min.proto'],
                       stdin=open(out, 'rb'), capture_output=True, text=True, timeout=60)
    check(d.returncode == 0, f'protoc cannot read the trace: {d.stderr!r}')
    events = [(int(p), n) for p, n in re.findall(r'pid: (\d+)\s+generic \{\s+event_name: "(\w+)"', d.stdout)]
    check(events == [(1000, 'sys_enter_getppid'), (1001, 'sys_enter_getppid'), (1002, 'sys_enter_getppid')],
          f'perfetto: events {events}')
    check(re.search(r'cpu_stats \{\s+cpu: 0\s+overrun: 7\s+\}', d.stdout), f'perfetto: no overrun of 7: {d.stdout[-800:]}')


if __name__ == '__main__':
    main()
