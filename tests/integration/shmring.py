# SPDX-License-Identifier: LGPL-2.1-or-later
"""A Python reader of tpd's shared-memory stream (core/ring.h), written from the layout alone, as
any client in another language would: the Stream call with "transport":"shm", the fds that come
with its reply, the ring's header and entries, the reader page's marks, WAIT and WAKE frames.

It keeps no counts of its own for a resync: it reports that it fell behind (a test that needs
exact losses uses tpctl); everything else it checks strictly."""

import json
import mmap
import os
import socket
import struct
import time

from tpdtest import check, fail

RING_HEADER = 4096
# magic, version, header_size, data_size, variant, n_cpus, clock, gen, head, head_seq, oldest,
# oldest_seq, last_batch, last_batch_seq, publish, state
HEADER_FMT = '=8sIIQIIIIQQQQQQQI'
ENTRY_FMT = '=IBBHIiQQII'          # size type kind event_id cpu pid seq ts line_len flags
ENTRY_SIZE = 40
LOST_FMT = '=QQ'
RING_EVENT, RING_LOST, RING_NOTICE, RING_CLOCK, RING_PAD = 1, 2, 3, 4, 5
FRAME_WAIT, FRAME_WAKE = 6, 7
PAGE_HEADER = 64
PAGE_KINDS = 7
PAGE_CPU_SIZE = 32 + 16 * PAGE_KINDS


class ShmStream:
    """One stream over the shared-memory transport."""

    def __init__(self, path, params, timeout=5.0, then=b''):
        """then: bytes sent in the same write as the call (a WAIT frame, pipelined)."""
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        self.sock.settimeout(timeout)
        self.sock.connect(path)
        msg = {'method': 'io.tpd.tracing.Stream', 'parameters': dict(params, transport='shm'),
               'upgrade': True}
        self.sock.sendall(json.dumps(msg).encode() + b'\0' + then)
        buf, fds = b'', []
        while b'\0' not in buf:
            data, got, _flags, _addr = socket.recv_fds(self.sock, 65536, 4)
            check(data, 'tpd closed the connection instead of answering Stream')
            buf += data
            fds += got
        text, _, self.rest = buf.partition(b'\0')
        self.reply = json.loads(text)
        self.fds = fds
        self.ring = self.page = None
        if 'error' in self.reply:
            return
        params = self.reply['parameters']
        self.params = params
        if params.get('transport') != 'shm':
            return
        check(len(fds) == 2, f'a shm reply came with {len(fds)} fds, expected 2')
        self.ring_fd, self.page_fd = fds[params['ring']['fd']], fds[params['page']['fd']]
        self.ring_size = params['ring']['size']
        self.ring = mmap.mmap(self.ring_fd, self.ring_size, mmap.MAP_SHARED, mmap.PROT_READ)
        self.page = mmap.mmap(self.page_fd, params['page']['size'], mmap.MAP_SHARED, mmap.PROT_READ)
        h = self.header()
        check(h['magic'] == b'TPDRING\0' and h['version'] == 1, f'not a ring: {h}')
        self.data_size = h['data_size']
        check(self.ring_size == RING_HEADER + self.data_size, 'ring size differs from its header')
        self.pos, self.seq = params['ring']['start'], params['ring']['start_seq']
        ph = struct.unpack_from('=8sIIIIQQ', self.page, 0)
        check(ph[0] == b'TPDPAGE\0', 'not a reader page')
        self.page_cpus, self.page_all, self.page_bits = ph[2], ph[4], ph[5]
        self.behind = False

    def close(self):
        for m in (self.ring, self.page):
            if m:
                m.close()
        for fd in self.fds:
            os.close(fd)
        self.fds = []
        self.sock.close()

    def header(self):
        f = struct.unpack_from(HEADER_FMT, self.ring, 0)
        keys = ('magic', 'version', 'header_size', 'data_size', 'variant', 'n_cpus', 'clock', 'gen',
                'head', 'head_seq', 'oldest', 'oldest_seq', 'last_batch', 'last_batch_seq', 'publish',
                'state')
        return dict(zip(keys, f))

    def selected(self, seq):
        if self.page_all:
            return True
        off = PAGE_HEADER + self.page_cpus * PAGE_CPU_SIZE
        bit = seq % self.page_bits
        return bool(self.page[off + bit // 8] & (1 << (bit % 8)))

    def read(self):
        """The entries from the reader's position to the head: a list of dicts (selected EVENT and
        LOST entries, every NOTICE and CLOCK entry). Sets self.behind and returns what it has if the
        writer overwrote what it was reading."""
        out = []
        head = struct.unpack_from('=Q', self.ring, 40)[0]
        while self.pos < head:
            off = RING_HEADER + (self.pos & (self.data_size - 1))
            size, typ, kind, event_id, cpu, pid, seq, ts, line_len, _flags = \
                struct.unpack_from(ENTRY_FMT, self.ring, off)
            if typ == RING_PAD:
                self.pos += size
                continue
            ok = size >= ENTRY_SIZE and size % 8 == 0 and size <= self.data_size // 8
            line_at = off + ENTRY_SIZE + (16 if typ == RING_LOST else 0)
            line = bytes(self.ring[line_at:line_at + line_len]) if ok else b''
            sel = typ in (RING_NOTICE, RING_CLOCK) or self.selected(seq)
            # What was read counts only if the writer had not moved past it meanwhile.
            oldest = struct.unpack_from('=Q', self.ring, 56)[0]
            if oldest > self.pos:
                self.behind = True
                return out
            check(ok, f'entry of size {size} at {self.pos}')
            check(seq == self.seq, f'entry seq {seq}, expected {self.seq}')
            lost = struct.unpack_from(LOST_FMT, self.ring, off + ENTRY_SIZE)[0] if typ == RING_LOST else 0
            if sel:
                out.append({'type': typ, 'kind': kind, 'cpu': cpu, 'pid': pid, 'seq': seq, 'ts': ts,
                            'line': line, 'lost': lost})
            self.pos += size
            self.seq += 1
        return out

    def wait(self, timeout=5.0):
        """WAIT for the next entry; returns the WAKE's head_seq, or None at EOF."""
        self.sock.sendall(struct.pack('=IIIIQ', FRAME_WAIT, 8, 0, 0, self.seq))
        return self.recv_wake(timeout)

    def recv_wake(self, timeout=5.0):
        buf = self.rest
        self.sock.settimeout(timeout)
        while len(buf) < 24:
            chunk = self.sock.recv(24 - len(buf))
            if not chunk:
                return None
            buf += chunk
        self.rest = buf[24:]
        typ, length, cpu, arg, seq = struct.unpack('=IIIIQ', buf[:24])
        check((typ, length, cpu, arg) == (FRAME_WAKE, 8, 0, 0), f'not a WAKE frame: {buf[:24]!r}')
        return seq

    def collect(self, done, timeout=30.0):
        """Reads (waiting with WAIT frames) until done(entries) holds; returns the entries."""
        got = []
        deadline = time.monotonic() + timeout
        while True:
            got += self.read()
            if self.behind:
                fail(f'the Python reader fell a ring behind: at {self.pos} (seq {self.seq}), ring {self.header()}')
            if done(got):
                return got
            left = deadline - time.monotonic()
            if left <= 0:
                fail(f'timeout: {len(got)} entries read')
            if self.wait(left) is None:
                got += self.read()
                return got
