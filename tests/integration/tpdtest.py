# SPDX-License-Identifier: LGPL-2.1-or-later
"""Shared harness of tpd's integration tests (Python 3 standard library only).

Each test is a script that calls run(main). main(ctx) gets a Context that owns everything the test
starts: tpd daemons (unique instance names and sockets in a private temp dir), tpctl streams, load
generators and extra tracefs instances. Whatever happens (assertion, exception, SIGTERM from meson's
timeout), run() tears all of it down: processes are stopped, tracefs instances are emptied and
removed, the temp dir is deleted.

Exit codes follow meson/automake: 0 pass, 1 fail (the message says what differed), 77 skip (only
when tracefs truly cannot be had: not root, or tracefs cannot be mounted).

Environment (set by tests/integration/meson.build): TPD, TPCTL, GEN_GETPPID, GEN_MARKER,
GEN_PINGPONG, GEN_RING, TPD_VARLINK_FILE. TPD_TEST_VERBOSE=1 prints tpd's log even when a test passes.
TPD_TEST_DAEMON_ARGS: options added to every tpd a test starts.
"""

import glob
import grp
import json
import os
import pwd
import queue
import random
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback

TRACEFS = '/sys/kernel/tracing'
EXIT_PASS, EXIT_FAIL, EXIT_SKIP = 0, 1, 77
EXIT_DAEMON_GONE = 69          # TPD_EXIT_DAEMON_GONE in include/tpd-protocol.h
MESSAGE_MAX = 64 * 1024        # TPD_MESSAGE_MAX
EVENT_NAME_RE = re.compile(r'^[A-Za-z0-9_]+:[A-Za-z0-9_]+$')

RECORD_KEYS = ('ts', 'cpu', 'event', 'pid', 'comm', 'fields', 'sym', 'cgroup', 'stack', 'print')
LOST_KEYS = ['ts', 'cpu', 'lost', 'cause']


class TestFailure(Exception):
    pass


class TestSkip(Exception):
    pass


class Interrupted(BaseException):
    """Raised from the SIGTERM/SIGINT handler so that cleanup still runs."""


def fail(msg):
    raise TestFailure(msg)


def check(cond, msg):
    if not cond:
        raise TestFailure(msg)


def log(msg):
    print(f'[{time.monotonic() - _T0:7.3f}] {msg}', flush=True)


_T0 = time.monotonic()


def boottime_ns():
    return time.clock_gettime_ns(time.CLOCK_BOOTTIME)


def read_text(path):
    """A text file of the kernel's. Task names in it (saved_cmdlines, trace) are any user's bytes,
    not always UTF-8: those that are not read as U+FFFD, as tpd writes them."""
    with open(path, errors='replace') as f:
        return f.read()


def write_text(path, text):
    # tracefs wants one write(2) per value; Python's buffered write would be one anyway, but be
    # explicit and unbuffered so the errno of the kernel's refusal surfaces here.
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, text.encode() if isinstance(text, str) else text)
    finally:
        os.close(fd)


def env_program(var):
    path = os.environ.get(var)
    if not path:
        fail(f'${var} is not set: run the test through meson (meson test -C BUILD --suite integration)')
    if not os.access(path, os.X_OK):
        fail(f'${var}={path} is not an executable (not built?)')
    return path


def ensure_tracefs():
    """Makes tracefs available or raises TestSkip saying why it cannot be had."""
    if os.geteuid() != 0:
        raise TestSkip('tpd integration tests need root (tracefs instances and events)')
    if os.path.isdir(os.path.join(TRACEFS, 'instances')):
        return
    # tracefs is not always mounted at boot.
    r = subprocess.run(['mount', '-t', 'tracefs', 'nodev', TRACEFS], capture_output=True, text=True)
    if not os.path.isdir(os.path.join(TRACEFS, 'instances')):
        raise TestSkip(f'tracefs cannot be mounted at {TRACEFS}: '
                       f'{(r.stderr or r.stdout).strip() or "exit %d" % r.returncode}')


def online_cpus():
    return sorted(int(os.path.basename(p)[3:]) for p in glob.glob(os.path.join(TRACEFS, 'per_cpu', 'cpu[0-9]*')))


# ----------------------------------------------------------------------------------------------
# tracefs ground truth

def vm_kb(pid, key):
    """A size of /proc/PID/status in KiB: VmRSS, VmHWM, ...; 0 when it is not there."""
    with open(f'/proc/{pid}/status') as f:
        for line in f:
            if line.startswith(key + ':'):
                return int(line.split()[1])
    return 0


def read_cpu_stats(instance_dir):
    """{cpu: {'entries': .., 'overrun': .., 'commit overrun': .., 'dropped events': .., 'read events': ..}}"""
    stats = {}
    for path in glob.glob(os.path.join(instance_dir, 'per_cpu', 'cpu[0-9]*', 'stats')):
        cpu = int(path.split('/')[-2][3:])
        d = {}
        for line in read_text(path).splitlines():
            key, _, value = line.partition(':')
            value = value.strip()
            if re.fullmatch(r'\d+', value):
                d[key.strip()] = int(value)
        stats[cpu] = d
    return stats


def written(stats, cpu=None):
    """Records the kernel accepted or lost: with overwrite on, entries + overrun + read events is
    exact (the kernel's per_cpu stats); dropped events (overwrite off) and commit overrun (dropped while a
    nested writer filled the page) are disjoint from those and added for completeness."""
    cpus = [cpu] if cpu is not None else list(stats)
    return sum(stats[c].get('entries', 0) + stats[c].get('overrun', 0) + stats[c].get('read events', 0) +
               stats[c].get('dropped events', 0) + stats[c].get('commit overrun', 0) for c in cpus)


def kernel_lost(stats):
    return sum(s.get('overrun', 0) + s.get('dropped events', 0) + s.get('commit overrun', 0)
               for s in stats.values())


def stats_delta(before, after):
    return {c: {k: after[c].get(k, 0) - before.get(c, {}).get(k, 0) for k in after[c]} for c in after}


def enabled_events(instance_dir):
    """Events whose enable file reads 1 (not 0, not X) in an instance or the top level."""
    out = set()
    for path in glob.glob(os.path.join(instance_dir, 'events', '*', '*', 'enable')):
        try:
            if read_text(path).strip().startswith('1'):
                parts = path.split('/')
                out.add(f'{parts[-3]}:{parts[-2]}')
        except OSError:
            pass
    return out


def set_filters(instance_dir):
    """{event: filter} for every event of the instance whose filter is not 'none'."""
    out = {}
    for path in glob.glob(os.path.join(instance_dir, 'events', '*', '*', 'filter')):
        try:
            text = read_text(path).strip()
        except OSError:
            continue
        if text and text != 'none':
            parts = path.split('/')
            out[f'{parts[-3]}:{parts[-2]}'] = text
    return out


def tracefs_snapshot(instance_dir=None):
    """What a misbehaving daemon could change: enabled events and filters (instance and top level),
    tracing_on of both and the files of the instance. (Not the list of instances: other users of
    the machine may add and remove theirs at any time.)"""
    snap = {
        'top tracing_on': read_text(os.path.join(TRACEFS, 'tracing_on')).strip(),
        'top enabled events': sorted(enabled_events(TRACEFS)),
        'top set_event': read_text(os.path.join(TRACEFS, 'set_event')),
        'top filters': set_filters(TRACEFS),
    }
    if instance_dir:
        snap.update({
            'instance tracing_on': read_text(os.path.join(instance_dir, 'tracing_on')).strip(),
            'instance enabled events': sorted(enabled_events(instance_dir)),
            'instance set_event': read_text(os.path.join(instance_dir, 'set_event')),
            'instance filters': set_filters(instance_dir),
            'instance files': sorted(os.listdir(instance_dir)),
        })
    return snap


def snapshot_diff(before, after):
    lines = []
    for key in before.keys() | after.keys():
        if before.get(key) != after.get(key):
            lines.append(f'  {key}: before={before.get(key)!r} after={after.get(key)!r}')
    return '\n'.join(sorted(lines))


def remove_instance(path):
    """Disables everything in a tracefs instance and removes it. Returns None or an error text."""
    if not os.path.isdir(path):
        return None
    for name, value in (('events/enable', '0'), ('tracing_on', '0')):
        try:
            write_text(os.path.join(path, name), value)
        except OSError:
            pass
    err = None
    for _ in range(50):
        try:
            os.rmdir(path)
            return None
        except FileNotFoundError:
            return None
        except OSError as e:
            # EBUSY while some process still holds one of its files open.
            err = f'rmdir {path}: {e}'
            time.sleep(0.1)
    return err


# ----------------------------------------------------------------------------------------------
# records

def parse_record(line):
    """Parses one NDJSON line and checks the fixed shape of docs/design.md §3; returns the dict."""
    try:
        rec = json.loads(line)
    except (ValueError, UnicodeDecodeError) as e:
        fail(f'stream line is not valid UTF-8 JSON ({e}): {line[:300]!r}')
    if not isinstance(rec, dict):
        fail(f'stream line is not a JSON object: {line[:300]!r}')
    keys = list(rec)
    if 'lost' in rec:
        check(keys == LOST_KEYS, f'lost record keys {keys}, expected {LOST_KEYS}: {line[:300]!r}')
        check(isinstance(rec['lost'], int) and rec['lost'] > 0, f'lost count must be a positive integer: {line!r}')
        check(rec['cause'] in ('overrun', 'client', 'unknown', 'decode', 'dropped'), f'unknown lost cause: {line!r}')
    else:
        expected = [k for k in RECORD_KEYS if k in rec]
        check(keys == expected and keys[:3] == ['ts', 'cpu', 'event'] and 'pid' in rec and 'fields' in rec,
              f'record keys {keys}, expected the order ts, cpu, event, pid, [comm], fields, [sym], [cgroup], [stack], [print]: {line[:300]!r}')
        check(isinstance(rec['event'], str) and EVENT_NAME_RE.match(rec['event']), f'bad event name: {line[:300]!r}')
        check(isinstance(rec['pid'], int), f'pid is not an integer: {line[:300]!r}')
        check('comm' not in rec or isinstance(rec['comm'], str), f'comm is not a string: {line[:300]!r}')
        check(isinstance(rec['fields'], dict), f'fields is not an object: {line[:300]!r}')
    check(isinstance(rec['ts'], int) and rec['ts'] >= 0, f'ts is not a non-negative integer: {line[:300]!r}')
    check(isinstance(rec['cpu'], int) and rec['cpu'] >= 0, f'cpu is not a non-negative integer: {line[:300]!r}')
    return rec


# ----------------------------------------------------------------------------------------------
# Varlink, raw: the tests speak the wire protocol themselves where tpctl would hide what they check

class Varlink:
    def __init__(self, path, timeout=5.0):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        self.sock.settimeout(timeout)
        self.sock.connect(path)
        self.buf = b''

    def close(self):
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def send_raw(self, data):
        self.sock.sendall(data)

    def send(self, method, parameters=None, **flags):
        msg = {'method': method}
        if parameters is not None:
            msg['parameters'] = parameters
        msg.update(flags)
        self.send_raw(json.dumps(msg).encode() + b'\0')

    def recv(self, timeout=5.0):
        """Next message as a dict, or None at EOF (connection closed by the daemon)."""
        deadline = time.monotonic() + timeout
        while b'\0' not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError('no complete Varlink message within %.1f s' % timeout)
            self.sock.settimeout(left)
            try:
                chunk = self.sock.recv(65536)
            except ConnectionResetError:
                chunk = b''
            if not chunk:
                if self.buf:
                    fail(f'connection closed in the middle of a message: {self.buf[:200]!r}')
                return None
            self.buf += chunk
        msg, _, self.buf = self.buf.partition(b'\0')
        try:
            reply = json.loads(msg)
        except ValueError as e:
            fail(f'daemon sent a message that is not JSON ({e}): {msg[:300]!r}')
        check(isinstance(reply, dict), f'daemon sent a message that is not a JSON object: {msg[:300]!r}')
        return reply

    def call(self, method, parameters=None, timeout=5.0, **flags):
        self.send(method, parameters, **flags)
        reply = self.recv(timeout)
        check(reply is not None, f'daemon closed the connection instead of answering {method}')
        return reply

    def wait_closed(self, timeout=3.0):
        """True if the daemon closes the connection within timeout (replies before EOF are allowed)."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            self.sock.settimeout(left)
            try:
                chunk = self.sock.recv(65536)
            except socket.timeout:
                return False
            except (ConnectionResetError, BrokenPipeError):
                return True
            if not chunk:
                return True


# ----------------------------------------------------------------------------------------------
# processes

class LineReader:
    """Line-wise reads from a pipe with timeouts (no Python buffering between select and read)."""

    def __init__(self, fd):
        self.fd = fd
        os.set_blocking(fd, False)
        self.buf = b''
        self.eof = False

    def _fill(self, timeout):
        r, _, _ = select.select([self.fd], [], [], max(0.0, timeout))
        if not r:
            return False
        try:
            chunk = os.read(self.fd, 1 << 20)
        except BlockingIOError:
            return False
        if not chunk:
            self.eof = True
        self.buf += chunk
        return True

    def read_available(self):
        while not self.eof and self._fill(0):
            pass
        lines = self.buf.split(b'\n')
        self.buf = lines.pop()
        return lines

    def readline(self, timeout):
        deadline = time.monotonic() + timeout
        while b'\n' not in self.buf:
            if self.eof:
                return None
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            self._fill(left)
        line, _, self.buf = self.buf.partition(b'\n')
        return line


class PipeReader:
    """Reads a child's stdout pipe in a thread; read_available() never blocks the test.

    Never select() + read() in the test's own thread: a writer that splice()s from a socket into
    the pipe in blocking mode holds the pipe's lock while it waits for the socket, so a read of data
    already in the pipe (which select() reports readable) sleeps uninterruptibly until more data
    arrives (kernel 6.18). The test must stay able to time out and report that instead of hanging.

    consumer='read': blocking read() loop, like `| jq` or `| cat`. consumer='poll': wait in
    select(), then read(), like event-loop consumers (Vector, Fluent Bit, asyncio)."""

    def __init__(self, fd, consumer='read'):
        self.fd = fd
        self.consumer = consumer
        self.chunks = queue.SimpleQueue()
        self.buf = b''
        self.eof = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while True:
            try:
                if self.consumer == 'poll':
                    select.select([self.fd], [], [])
                chunk = os.read(self.fd, 1 << 16)
            except OSError:
                chunk = b''
            self.chunks.put(chunk)
            if not chunk:
                return

    def read_available(self):
        data = []
        while True:
            try:
                chunk = self.chunks.get_nowait()
            except queue.Empty:
                break
            if not chunk:
                self.eof = True
                break
            data.append(chunk)
        lines = (self.buf + b''.join(data)).split(b'\n')
        self.buf = lines.pop()
        return lines


class Process:
    """A child process the context stops on cleanup."""

    def __init__(self, ctx, name, argv, stdin=None, stdout=None, stderr=None, **kw):
        self.ctx = ctx
        self.name = name
        self.argv = argv
        self.stderr_path = os.path.join(ctx.tmpdir, f'{name}.stderr')
        self._stderr = open(self.stderr_path, 'wb') if stderr is None else None
        self.proc = subprocess.Popen(argv, stdin=stdin, stdout=stdout,
                                     stderr=self._stderr if stderr is None else stderr, close_fds=True, **kw)
        ctx._processes.append(self)
        self.pid = self.proc.pid

    def running(self):
        return self.proc.poll() is None

    def stderr_text(self, limit=4000):
        try:
            with open(self.stderr_path, 'rb') as f:
                data = f.read()
        except OSError:
            return ''
        return data[-limit:].decode(errors='replace')

    def signal(self, sig):
        if self.running():
            self.proc.send_signal(sig)

    def wait(self, timeout):
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def terminate(self, grace=3.0):
        """SIGTERM, then SIGKILL after grace seconds; waits for the exit."""
        if self.running():
            self.proc.send_signal(signal.SIGTERM)
            if self.wait(grace) is None:
                self.proc.kill()
                self.proc.wait()

    def kill(self, grace=3.0):
        self.terminate(grace)
        for f in (self.proc.stdin, self.proc.stdout):
            if f:
                try:
                    f.close()
                except OSError:
                    pass
        if self._stderr:
            self._stderr.close()


class Generator(Process):
    """One of the C load generators, driven over its stdin/stdout protocol."""

    def __init__(self, ctx, var, args):
        path = env_program(var)
        super().__init__(ctx, f'{os.path.basename(path)}-{len(ctx._processes)}', [path, *args],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self.out = LineReader(self.proc.stdout.fileno())
        self.probes = 0

    def readline(self, timeout=10.0, what='a line'):
        try:
            line = self.out.readline(timeout)
        except TimeoutError:
            fail(f'{self.name}: no {what} within {timeout} s; stderr: {self.stderr_text()!r}')
        if line is None:
            fail(f'{self.name} exited (code {self.proc.wait()}) before printing {what}; '
                 f'stderr: {self.stderr_text()!r}')
        return line.decode()

    def command(self, cmd):
        self.proc.stdin.write(cmd.encode() + b'\n')
        self.proc.stdin.flush()

    def pids(self):
        return [int(x) for x in self.readline(what='its pid').split()]

    def probe(self):
        """gen-getppid only: one event now; returns the boot-clock ns right after it."""
        self.command('probe')
        word, ts = self.readline(what='"probed"').split()
        check(word == 'probed', f'{self.name}: expected "probed", got {word!r}')
        self.probes += 1
        return int(ts)

    def go(self):
        """Releases the measured run; returns the boot-clock ns just before its first event."""
        self.command('go')
        return self.expect_go()

    def expect_go(self):
        word, ts = self.readline(what='"go"').split()[:2]
        check(word == 'go', f'{self.name}: expected "go", got {word!r}')
        return int(ts)

    def wait_done(self, timeout=120.0):
        """Waits for "done", then for a clean exit; returns the fields after "done"."""
        fields = self.readline(timeout, what='"done"').split()
        check(fields[0] == 'done', f'{self.name}: expected "done", got {fields!r}')
        rc = self.wait(10)
        check(rc == 0, f'{self.name} exited with {rc}; stderr: {self.stderr_text()!r}')
        return [int(x) for x in fields[1:]]


class Stream(Process):
    """`tpctl stream ...` with stdout to a file (default) or a pipe.

    poll() reads what arrived since the last call; every complete line goes to sink(line) if a sink
    was given (used for the million-record runs, where keeping the lines would cost too much),
    else it is kept in self.lines. nlines counts all lines seen."""

    def __init__(self, ctx, tpd, args, sink=None, pipe=False, consumer='read', **kw):
        self.out_path = os.path.join(ctx.tmpdir, f'stream-{len(ctx._processes)}.ndjson')
        argv = [env_program('TPCTL'), '--socket', tpd.socket, 'stream', *args]
        if pipe:
            super().__init__(ctx, f'stream-{len(ctx._processes)}', argv, stdout=subprocess.PIPE, **kw)
            self.reader = PipeReader(self.proc.stdout.fileno(), consumer)
            self.file = None
        else:
            with open(self.out_path, 'wb') as out:
                super().__init__(ctx, f'stream-{len(ctx._processes)}', argv, stdout=out, **kw)
            self.reader = None
            self.file = open(self.out_path, 'rb')
            self.partial = b''
        self.args = args
        self.sink = sink
        self.lines = []
        self.nlines = 0

    def poll(self):
        if self.reader:
            new = self.reader.read_available()
        else:
            data = self.partial + self.file.read()
            new = data.split(b'\n')
            self.partial = new.pop()
        for line in new:
            self.nlines += 1
            if self.sink:
                self.sink(line)
            else:
                self.lines.append(line)
        return len(new)

    def records(self):
        return [parse_record(line) for line in self.lines]

    def wait_for(self, pred, timeout, what):
        """Polls until pred() is true; fails after timeout."""
        deadline = time.monotonic() + timeout
        while True:
            self.poll()
            if pred():
                return
            if not self.running():
                self.poll()
                if pred():
                    return
                fail(f'tpctl stream {" ".join(self.args)} exited with {self.proc.returncode} while waiting for '
                     f'{what}; stderr: {self.stderr_text()!r}')
            if time.monotonic() > deadline:
                fail(f'timeout ({timeout} s) waiting for {what} on tpctl stream {" ".join(self.args)} '
                     f'({self.nlines} lines so far)')
            time.sleep(0.005)

    def drain(self, done, timeout=60.0, quiet=0.5):
        """Waits until done() is true and then `quiet` seconds without a new line (so duplicates or
        extra records would still show up), or until timeout. Returns whether done() held."""
        deadline = time.monotonic() + timeout
        while not done() and time.monotonic() < deadline and self.running():
            if not self.poll():
                time.sleep(0.05)
        last = time.monotonic()
        while time.monotonic() - last < quiet and time.monotonic() < deadline:
            if self.poll():
                last = time.monotonic()
            time.sleep(0.05)
        return done()

    def stop(self, expect=0, timeout=5.0):
        """SIGTERM, then assert the exit code (tpctl exits 0 on SIGTERM/SIGINT)."""
        self.signal(signal.SIGTERM)
        rc = self.wait(timeout)
        check(rc is not None, f'tpctl stream {" ".join(self.args)} did not exit within {timeout} s of SIGTERM')
        if self.reader:
            self.reader.thread.join(5)      # up to EOF: everything tpctl wrote
        self.poll()
        rest = self.partial if self.file else self.reader.buf
        check(not rest, f'tpctl stream {" ".join(self.args)} left an unterminated last line: {rest[:200]!r}')
        check(rc == expect, f'tpctl stream {" ".join(self.args)} exited with {rc}, expected {expect}; '
                            f'stderr: {self.stderr_text()!r}')
        return rc

    def kill(self, grace=3.0):
        self.terminate(grace)
        if self.reader:
            # The reader thread must see EOF before its fd is closed (and its number reused).
            self.reader.thread.join(5)
        super().kill(grace)
        if self.file:
            self.file.close()


# Options every tpd of the tests gets after its own: the suite again under another setting of
# the daemon (meson test --setup workers: the decode workers).
DAEMON_ARGS = os.environ.get('TPD_TEST_DAEMON_ARGS', '').split()


class Tpd:
    """One tpd daemon on a private socket and a unique tracefs instance."""

    def __init__(self, ctx, instance=None, args=(), wrapper=()):
        self.ctx = ctx
        self.wrapper = list(wrapper)  # a command that execs tpd (unshare --cgroup)
        self.instance = instance or ctx.unique_name()
        self.instance_dir = os.path.join(TRACEFS, 'instances', self.instance)
        self.socket = os.path.join(ctx.tmpdir, f'{self.instance}.sock')
        # Pins are persisted per instance name in --state-dir: a private one keeps tests from
        # leaving state in /var/lib/tpd, and survives restarts of this daemon within the test.
        self.state_dir = os.path.join(ctx.tmpdir, 'state')
        self.state_file = os.path.join(self.state_dir, f'{self.instance}.json')
        self.args = list(args)
        self.process = None
        self.runs = 0
        ctx._daemons.append(self)

    # --- life cycle

    def start(self, timeout=10.0, clean=True):
        """Starts tpd and waits until it answers. clean: disable whatever the new daemon has enabled
        (restored state of an earlier run), so that the test starts from an empty instance."""
        self.runs += 1
        argv = [*self.wrapper, env_program('TPD'), '--socket', self.socket, '--instance', self.instance,
                '--state-dir', self.state_dir,
                # A configuration of the test's own (absent unless a test writes it): whatever is
                # in /etc/tpd must not change what the tests see.
                '--config', os.path.join(self.ctx.tmpdir, 'tpd.conf'),
                '--clock', 'boot', *self.args, *DAEMON_ARGS]
        self.process = Process(self.ctx, f'tpd-{self.instance}-{self.runs}', argv, stdout=subprocess.DEVNULL)
        self.wait_ready(timeout, clean)
        return self

    def wait_ready(self, timeout, clean=True):
        """Ready = the socket accepts a connection and answers GetInfo (docs/design.md §2)."""
        start = time.monotonic()
        last = None
        while time.monotonic() - start < timeout:
            if not self.process.running():
                fail(f'tpd exited with {self.process.proc.returncode} during start-up; log:\n{self.log()}')
            try:
                with Varlink(self.socket, timeout=2) as v:
                    reply = v.call('org.varlink.service.GetInfo')
                if 'error' not in reply:
                    log(f'tpd ready after {time.monotonic() - start:.3f} s (instance {self.instance})')
                    check(os.path.isdir(self.instance_dir),
                          f'tpd is ready but its instance {self.instance_dir} does not exist')
                    if clean:
                        self._clean_slate()
                    return
                last = reply
            except (OSError, TimeoutError) as e:
                last = e
            time.sleep(0.02)
        fail(f'tpd not ready within {timeout} s (last: {last!r}); log:\n{self.log()}')

    def _clean_slate(self):
        # docs/design.md §4: pins persist in the state directory. A test must start from an instance with nothing
        # enabled, whatever an earlier run left there; say so loudly if that was not the case.
        left = enabled_events(self.instance_dir)
        if left:
            log(f'note: tpd started with events enabled {sorted(left)} (restored state?); disabling them')
            self.tpctl_ok('disable', '--all')

    def running(self):
        return self.process is not None and self.process.running()

    def stop(self, sig=signal.SIGTERM, expect=0, timeout=10.0, clear_pins=True):
        """Stops tpd and asserts a clean stop: exit code `expect`, instance directory gone."""
        if clear_pins:
            # Keep pins out of tpd's persisted state, so that they do not leak into later runs.
            r = self.tpctl('disable', '--all')
            if r.returncode != 0:
                log(f'note: tpctl disable --all before stop exited {r.returncode}: {r.stderr.strip()}')
        self.process.signal(sig)
        rc = self.process.wait(timeout)
        check(rc is not None, f'tpd did not exit within {timeout} s of {signal.Signals(sig).name}; log:\n{self.log()}')
        check(rc == expect, f'tpd exited with {rc} after {signal.Signals(sig).name}, expected {expect}; '
                            f'log:\n{self.log()}')
        if sig != signal.SIGKILL:
            check(not os.path.exists(self.instance_dir),
                  f'tpd exited but left its instance {self.instance_dir} behind')
        return rc

    def cleanup(self):
        errors = []
        if self.process:
            self.process.kill(grace=10.0)
        err = remove_instance(self.instance_dir)
        if err:
            errors.append(err)
        return errors

    def log(self, limit=6000):
        return self.process.stderr_text(limit) if self.process else ''

    def cpu_seconds(self):
        """User + system CPU time of the daemon (all threads) from /proc."""
        with open(f'/proc/{self.process.pid}/stat') as f:
            fields = f.read().rsplit(')', 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf('SC_CLK_TCK')

    # --- clients

    def tpctl(self, *args, timeout=15.0, input=None):
        argv = [env_program('TPCTL'), '--socket', self.socket, *args]
        try:
            return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, input=input)
        except subprocess.TimeoutExpired:
            fail(f'tpctl {" ".join(args)} did not finish within {timeout} s')

    def tpctl_ok(self, *args, **kw):
        r = self.tpctl(*args, **kw)
        check(r.returncode == 0, f'tpctl {" ".join(args)} exited with {r.returncode}; stderr: {r.stderr.strip()!r}; '
                                 f'tpd log:\n{self.log(2000)}')
        return r

    def varlink(self, timeout=5.0):
        return Varlink(self.socket, timeout)

    def call(self, method, parameters=None, **flags):
        with self.varlink() as v:
            return v.call(method, parameters, **flags)

    def status(self):
        r = self.tpctl_ok('status', '--json')
        try:
            st = json.loads(r.stdout)
        except ValueError as e:
            fail(f'tpctl status --json is not JSON ({e}): {r.stdout[:500]!r}')
        check(isinstance(st, dict), f'tpctl status --json is not a JSON object: {r.stdout[:500]!r}')
        return st

    def stream(self, *args, sink=None, pipe=False, consumer='read', **kw):
        """`tpctl stream ARGS`; stdout to a file, or with pipe=True to a pipe read by `consumer`;
        kw to subprocess.Popen."""
        return Stream(self.ctx, self, list(args), sink=sink, pipe=pipe, consumer=consumer, **kw)

    def marker(self, text):
        """Writes one trace_marker message into the instance (an ftrace:print record)."""
        write_text(os.path.join(self.instance_dir, 'trace_marker'), text)

    def stats(self):
        return read_cpu_stats(self.instance_dir)


def confirm_live(streams, probe, timeout=10.0, interval=0.2):
    """A stream is live once it delivered a record of the probe. Calls probe() every interval until
    every stream in `streams` has at least one line; returns the number of probes made."""
    deadline = time.monotonic() + timeout
    probes = 0
    while True:
        probe()
        probes += 1
        until = time.monotonic() + interval
        while time.monotonic() < until:
            for s in streams:
                s.poll()
                if not s.running():
                    fail(f'tpctl stream {" ".join(s.args)} exited with {s.proc.returncode} before it was live; '
                         f'stderr: {s.stderr_text()!r}')
            if all(s.nlines > 0 for s in streams):
                return probes
            time.sleep(0.005)
        if time.monotonic() > deadline:
            fail(f'streams not live within {timeout} s: '
                 + ', '.join(f'[{" ".join(s.args)}] {s.nlines} lines' for s in streams))


def cgroup_mount():
    with open('/proc/self/mountinfo') as f:
        for line in f:
            head, _, tail = line.partition(' - ')
            if tail.split()[0] == 'cgroup2':
                return head.split()[4]
    return None


class Cgroups:
    """A cgroup v2 of the test's own, with children (Context.cgroups()); removed on cleanup, their
    tasks moved to the root first."""

    def __init__(self, ctx, mount, names):
        self.mount = mount
        self.base = '/' + ctx.unique_name('-cg')
        self.dirs = []
        for name in ('', *names):
            self.mkdir(name)

    def mkdir(self, name):
        self.dirs.append(self.dir(name))
        os.mkdir(self.dirs[-1])

    def dir(self, name):
        return self.mount + self.base + (f'/{name}' if name else '')

    def path(self, name):
        return self.base + (f'/{name}' if name else '')

    def move(self, pid, name):
        with open(os.path.join(self.dir(name), 'cgroup.procs'), 'w') as f:
            f.write(f'{pid}\n')

    def close(self):
        for d in reversed(self.dirs):
            try:
                with open(os.path.join(d, 'cgroup.procs')) as f:
                    for pid in f.read().split():
                        with open(os.path.join(self.mount, 'cgroup.procs'), 'w') as up:
                            up.write(pid)
                os.rmdir(d)
            except OSError as e:
                log(f'cannot remove {d}: {e}')


# ----------------------------------------------------------------------------------------------

class Context:
    def __init__(self):
        self.tmpdir = tempfile.mkdtemp(prefix='tpdtest-')
        self._processes = []
        self._daemons = []
        self._instances = []
        self._cgroups = []
        self.rand = '%08x' % random.SystemRandom().getrandbits(32)
        self._names = 0

    def unique_name(self, suffix=''):
        # Instances are global to the machine: never collide with a parallel run or a leftover.
        self._names += 1
        return f'tpdtest-{os.getpid()}-{self.rand}-{self._names}{suffix}'

    def tpd(self, args=(), instance=None, start=True, wrapper=()):
        t = Tpd(self, instance=instance, args=args, wrapper=wrapper)
        return t.start() if start else t

    def gen(self, var, *args):
        return Generator(self, var, [str(a) for a in args])

    def make_instance(self, suffix='-ref'):
        """A tracefs instance the test drives itself (removed on cleanup)."""
        path = os.path.join(TRACEFS, 'instances', self.unique_name(suffix))
        os.mkdir(path)
        self._instances.append(path)
        return path

    def reference_instance(self, tpd, suffix, buffer_kb=16384):
        """An instance of the test's own on the trace clock of tpd's, with a buffer of buffer_kb: the
        kernel's text of the same records, to compare tpd's with."""
        ref = self.make_instance(suffix)
        clock = re.search(r'\[(\w+)\]', read_text(os.path.join(tpd.instance_dir, 'trace_clock')))[1]
        write_text(os.path.join(ref, 'trace_clock'), clock)
        check(f'[{clock}]' in read_text(os.path.join(ref, 'trace_clock')),
              f'the reference instance\'s clock is not {clock}')
        write_text(os.path.join(ref, 'buffer_size_kb'), str(buffer_kb))
        return ref, clock

    def cgroups(self, names=()):
        """A cgroup v2 of the test's own with these children (Cgroups); skips without a cgroup v2
        hierarchy."""
        mount = cgroup_mount()
        if not mount:
            raise TestSkip('no cgroup v2 hierarchy is mounted here')
        cg = Cgroups(self, mount, names)
        self._cgroups.append(cg)
        return cg

    def cleanup(self):
        errors = []
        for p in reversed(self._processes):
            if not p.name.startswith('tpd-'):
                p.kill()
        for cg in self._cgroups:
            cg.close()
        for d in reversed(self._daemons):
            errors += d.cleanup()
        for p in self._processes:
            p.kill()
        for path in self._instances:
            err = remove_instance(path)
            if err:
                errors.append(err)
        shutil.rmtree(self.tmpdir, ignore_errors=True)
        return errors


def _on_signal(signum, frame):
    raise Interrupted(f'interrupted by {signal.Signals(signum).name}')


def run(main):
    """Runs main(ctx) and exits with 0, 1 or 77."""
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    name = os.path.basename(sys.argv[0])
    try:
        ensure_tracefs()
        for var in ('TPD', 'TPCTL'):
            env_program(var)
    except TestSkip as e:
        print(f'SKIP: {name}: {e}', flush=True)
        sys.exit(EXIT_SKIP)
    except TestFailure as e:
        print(f'FAIL: {name}: {e}', flush=True)
        sys.exit(EXIT_FAIL)

    ctx = Context()
    code = EXIT_FAIL
    try:
        main(ctx)
        code = EXIT_PASS
    except TestFailure as e:
        print(f'FAIL: {name}: {e}', flush=True)
    except TestSkip as e:
        print(f'SKIP: {name}: {e}', flush=True)
        code = EXIT_SKIP
    except Interrupted as e:
        print(f'FAIL: {name}: {e}', flush=True)
    except Exception:
        print(f'FAIL: {name}: unexpected error:\n{traceback.format_exc()}', flush=True)
    finally:
        # Further signals must not abort the cleanup half-way.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        if code != EXIT_PASS or os.environ.get('TPD_TEST_VERBOSE'):
            for d in ctx._daemons:
                if d.process:
                    print(f'--- tpd log ({d.instance}, last run) ---\n{d.log()}', flush=True)
        errors = ctx.cleanup()
        if errors:
            print('FAIL: cleanup: ' + '; '.join(errors), flush=True)
            code = EXIT_FAIL
    if code == EXIT_PASS:
        print(f'PASS: {name}', flush=True)
    sys.exit(code)


# ----------------------------------------------------------------------------------------------
# State saving (added with the debounced state file)

def wait_state_saved(tpd, saves, timeout=5.0):
    """Waits until tpd's GetStatus counts at least `saves` writes of its state file (they happen
    from a debounce timer, not in the Enable call); returns the status."""
    deadline = time.monotonic() + timeout
    while True:
        st = tpd.call('io.tpd.tracing.GetStatus')['parameters']
        if st.get('state_saves', 0) >= saves:
            return st
        if time.monotonic() > deadline:
            fail(f'state not saved {saves} time(s) within {timeout} s: {st.get("state_saves")} saves, '
                 f'error {st.get("state_error")!r}')
        time.sleep(0.05)


# ----------------------------------------------------------------------------------------------
# Sanitizer builds: every call and wake-up of an ASan/UBSan tpd costs several times as much. Tests
# of time and CPU bounds scale the bound, never the property (TPD_TEST_SLOWDOWN overrides).

def run_while_stopped(process, gen, timeout=60):
    """Runs the generator gen (waiting for its go) to its end while process (tpd, a recorder) is
    stopped: nothing reads the kernel's buffer meanwhile."""
    process.signal(signal.SIGSTOP)
    try:
        gen.go()
        gen.wait_done(timeout)
    finally:
        process.signal(signal.SIGCONT)


def tpctl(*args, timeout=300):
    """tpctl without a tpd (replay, convert): its CompletedProcess, output as bytes."""
    return subprocess.run([env_program('TPCTL'), *args], capture_output=True, timeout=timeout)


def tpctl_ok(*args, timeout=300):
    """The same, which must exit 0: its standard output."""
    r = tpctl(*args, timeout=timeout)
    check(r.returncode == 0, f'tpctl {" ".join(args)} exited with {r.returncode}: {r.stderr[-2000:]!r}')
    return r.stdout


def record_ping_pong_and_markers(rec, pingpong, marker):
    """Runs a gen-pingpong and a gen-marker (both waiting for their go) while the tpctl record rec
    records, then stops it as Ctrl-C does: it must end with 0."""
    pingpong.go()
    marker.command('go')
    pingpong.wait_done(60)
    marker.wait_done(60)
    time.sleep(0.5)
    rec.signal(signal.SIGINT)
    rc = rec.wait(60)
    check(rc == 0, f'tpctl record exited with {rc}: {rec.stderr_text()!r}')


def built_with_asan():
    try:
        with open(env_program('TPD'), 'rb') as f:
            return b'__asan_init' in f.read()
    except (OSError, TestFailure, TestSkip):
        return False


ASAN = built_with_asan()
SLOWDOWN = float(os.environ.get('TPD_TEST_SLOWDOWN', '8' if ASAN else '1'))


REPORT_RE = re.compile(r'^\s*(?P<comm>.*)-(?P<pid>\d+)\s+\[(?P<cpu>\d+)\]\s*(?P<ts>\d+): (?P<event>\w+):\s*(?P<body>.*)$')
DROPPED_RE = re.compile(r'^CPU:(\d+) \[(?:(\d+) )?EVENTS DROPPED\]$')


def trace_cmd_report(path, *args):
    """Debian's trace-cmd reads a data file: its records (comm, pid, cpu, ts, event, body) and its
    lines of dropped events (cpu, count or None); a warning fails."""
    r = subprocess.run(['trace-cmd', 'report', '-N', '-t', *args, path], capture_output=True, text=True,
                       errors='replace', timeout=120)
    check(r.returncode == 0, f'trace-cmd report {path} exited with {r.returncode}: {r.stderr[:1000]!r}')
    check(not r.stderr.strip(), f'trace-cmd report {path} warned: {r.stderr[:1000]!r}')
    records, dropped = [], []
    for line in r.stdout.splitlines():
        if not line.strip() or line.startswith('cpus='):
            continue
        m = DROPPED_RE.match(line.strip())
        if m:
            dropped.append((int(m[1]), int(m[2]) if m[2] else None))
            continue
        m = REPORT_RE.match(line)
        check(m, f'cannot parse trace-cmd report line: {line!r}')
        records.append({'comm': m['comm'], 'pid': int(m['pid']), 'cpu': int(m['cpu']), 'ts': int(m['ts']),
                        'event': m['event'], 'body': m['body'].strip()})
    return records, dropped


def trace_lines(instance_dir, option=None):
    """The record lines of an instance's `trace` file (the kernel's own text output), read with
    options/OPTION turned on for the read when given (e.g. 'raw', 'fields')."""
    if option:
        write_text(os.path.join(instance_dir, 'options', option), '1')
    try:
        return [l for l in read_text(os.path.join(instance_dir, 'trace')).splitlines() if l and not l.startswith('#')]
    finally:
        if option:
            write_text(os.path.join(instance_dir, 'options', option), '0')
# ----------------------------------------------------------------------------------------------
# NATS JetStream (added with `tpctl export`): a cluster of Debian's nats-server on loopback, in the
# context's temp dir, and the test consumer (tests/integration/nats-consume.c) reading it back.

def free_ports(n):
    """n TCP ports of 127.0.0.1 free right now (bound to port 0, then released)."""
    socks, ports = [], []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(('127.0.0.1', 0))
            socks.append(s)
            ports.append(s.getsockname()[1])
    finally:
        for s in socks:
            s.close()
    return ports


class NatsCluster:
    """n nats-server nodes with JetStream; a cluster of n > 1 nodes is routed on loopback. Nodes keep
    their data dirs across stop()/start(), like machines that restart."""

    def __init__(self, ctx, n=3):
        self.ctx = ctx
        self.server = shutil.which('nats-server') or (os.path.exists('/usr/sbin/nats-server') and '/usr/sbin/nats-server')
        if not self.server:
            raise TestSkip('nats-server is not installed (Debian package nats-server)')
        self.n = n
        ports = free_ports(3 * n)
        self.client_ports = ports[:n]
        self.route_ports = ports[n:2 * n]
        self.http_ports = ports[2 * n:]
        self.names = [f'n{i + 1}' for i in range(n)]
        self.procs = [None] * n
        self.runs = [0] * n
        self.urls = ','.join(f'nats://127.0.0.1:{p}' for p in self.client_ports)
        self.dir = os.path.join(ctx.tmpdir, ctx.unique_name('-nats'))
        for i in range(n):
            d = os.path.join(self.dir, self.names[i])
            os.makedirs(os.path.join(d, 'js'))
            conf = [f'server_name: {self.names[i]}',
                    f'listen: 127.0.0.1:{self.client_ports[i]}',
                    f'http: 127.0.0.1:{self.http_ports[i]}',
                    f'jetstream {{ store_dir: "{d}/js" }}']
            if n > 1:
                routes = ', '.join(f'nats-route://127.0.0.1:{p}' for j, p in enumerate(self.route_ports) if j != i)
                conf.append(f'cluster {{ name: tpdtest, listen: 127.0.0.1:{self.route_ports[i]}, '
                            f'routes: [{routes}] }}')
            with open(os.path.join(d, 'nats.conf'), 'w') as f:
                f.write('\n'.join(conf) + '\n')

    def conf(self, i):
        return os.path.join(self.dir, self.names[i], 'nats.conf')

    def start(self, nodes=None, timeout=30.0):
        nodes = range(self.n) if nodes is None else nodes
        for i in nodes:
            self.runs[i] += 1
            self.procs[i] = Process(self.ctx, f'nats-{self.names[i]}-{self.runs[i]}', [self.server, '-c', self.conf(i)],
                                    stdout=subprocess.DEVNULL)
        self.wait_healthy(nodes, timeout)
        return self

    def wait_healthy(self, nodes, timeout):
        """Healthy = each node's /healthz says ok: JetStream is up and knows its meta leader."""
        deadline = time.monotonic() + timeout
        for i in nodes:
            while True:
                check(self.procs[i].running(), f'nats-server {self.names[i]} exited with {self.procs[i].proc.returncode}: '
                                               f'{self.procs[i].stderr_text()}')
                try:
                    with socket.create_connection(('127.0.0.1', self.http_ports[i]), timeout=1) as s:
                        s.sendall(b'GET /healthz HTTP/1.0\r\n\r\n')
                        reply = b''
                        while chunk := s.recv(4096):
                            reply += chunk
                    if b' 200 ' in reply.split(b'\r\n', 1)[0] and b'"ok"' in reply:
                        break
                except OSError:
                    pass
                check(time.monotonic() < deadline, f'nats-server {self.names[i]} not healthy within {timeout} s; '
                                                   f'log: {self.procs[i].stderr_text()}')
                time.sleep(0.1)

    def stop(self, nodes=None, sig=signal.SIGTERM):
        for i in (range(self.n) if nodes is None else nodes):
            p = self.procs[i]
            if p and p.running():
                p.signal(sig)
                check(p.wait(15) is not None, f'nats-server {self.names[i]} did not stop')
            self.procs[i] = None

    # What a JetStream API request answers while the cluster elects a stream or meta leader (a node
    # was just killed or restarted): asked again, it succeeds once the election is over.
    _ELECTING = (b'Timeout', b'No Responders', b'No Server Available', b'Connection Closed')

    def consume(self, stream, mode, timeout=60.0):
        argv = [env_program('NATS_CONSUME'), self.urls, stream, mode]
        deadline = time.monotonic() + timeout
        while True:
            try:
                r = subprocess.run(argv, capture_output=True, timeout=max(deadline - time.monotonic(), 1.0))
            except subprocess.TimeoutExpired:
                fail(f'nats-consume {stream} {mode} did not finish within {timeout} s')
            if r.returncode == 0:
                return r.stdout
            check(any(e in r.stderr for e in self._ELECTING) and time.monotonic() < deadline,
                  f'nats-consume {stream} {mode} exited with {r.returncode}: {r.stderr.decode()!r}')
            log(f'nats-consume {stream} {mode}: {r.stderr.decode().strip()}; asking again')
            time.sleep(0.5)

    def leader(self, stream, timeout=60.0):
        """The stream's leader, once it has one: none is named while an election is under way."""
        deadline = time.monotonic() + timeout
        while (name := self.consume(stream, 'leader', timeout).decode().strip()) not in self.names:
            check(name == '' and time.monotonic() < deadline, f'stream {stream} has no leader among {self.names} '
                                                              f'after {timeout} s: {name!r}')
            time.sleep(0.2)
        return self.names.index(name)

    _HEAD = re.compile(rb'\{"ts":(\d+),"cpu":(\d+),"event":"([^"]+)","pid":(\d+),')

    def records(self, stream, full=('ftrace:print',), timeout=60.0):
        """Every record in the stream: [(subject, msg_id, record dict)], in stream order. Records of
        events not in `full` are parsed only as far as ts, cpu, event and pid (json.loads of a
        million lines costs more than the test's budget)."""
        out = []
        t0 = time.monotonic()
        data = self.consume(stream, 'dump', timeout)
        t1 = time.monotonic()
        for line in data.splitlines():
            subject, msg_id, rec = line.split(b'\t', 2)
            m = self._HEAD.match(rec)
            if m and m.group(3).decode() not in full:
                d = {'ts': int(m.group(1)), 'cpu': int(m.group(2)), 'event': m.group(3).decode(),
                     'pid': int(m.group(4))}
            else:
                d = json.loads(rec)
            out.append((subject.decode(), msg_id.decode(), d))
        log(f'read {len(out)} records of {stream} back in {t1 - t0:.1f} s, parsed in {time.monotonic() - t1:.1f} s')
        return out


class CountedStream:
    """The well-behaved stream beside a test's load: a paced getppid generator on one CPU, filtered
    in the kernel on its pid, whose records a stream counts from the generator's go on."""

    def __init__(self, ctx, tpd, event, rate, count, cpu=0):
        self.tpd, self.n = tpd, count
        self.gen = ctx.gen('GEN_GETPPID', '--count', count, '--rate', rate, '--cpu', cpu)
        self.pid, = self.gen.pids()
        tpd.tpctl_ok('enable', event, '--filter', f'common_pid == {self.pid}')
        self.delivered = self.lost = 0
        self.go_ts = None
        self.stream = tpd.stream('-e', event, sink=self._sink)
        confirm_live([self.stream], self.gen.probe)

    def _sink(self, line):
        rec = parse_record(line)
        if 'lost' in rec:
            self.lost += rec['lost']
        elif self.go_ts is not None and rec['pid'] == self.pid and rec['ts'] >= self.go_ts:
            self.delivered += 1

    def go(self):
        self.stream.poll()      # the probes go to the sink before the run's ts is known
        self.go_ts = self.gen.go()

    def finish(self, timeout):
        """Waits for the generator and the stream's last records; returns (delivered, lost)."""
        log(f'generator done: {self.gen.wait_done(timeout=timeout)}')
        self.stream.drain(lambda: self.delivered + self.lost >= self.n, timeout=30)
        log(f'good stream: {self.delivered} delivered + {self.lost} lost of {self.n}')
        if self.delivered != self.n or self.lost:
            log(f'kernel stats: {self.tpd.stats()}')
        self.stream.stop()
        return self.delivered, self.lost


class TestUsers:
    """A group and users for access tests, made with groupadd/useradd and removed in remove(),
    whatever happened: users[key] names key's user; members are in the group, outsiders not. Names
    are PREFIX + 'g' (the group) or PREFIX + key in lower case, then a tag unique to the run."""

    def __init__(self, ctx, prefix, members, outsiders=()):
        self.ctx = ctx
        tag = f'{os.getpid() % 100000}{ctx.rand[:4]}'
        self.group = f'{prefix}g{tag}'
        self.names = {k: f'{prefix}{k.lower()}{tag}' for k in (*members, *outsiders)}
        self.created = []
        self.group_created = False
        self._run(['groupadd', self.group])
        self.group_created = True
        for key, name in self.names.items():
            self._run(['useradd', '-M', '-N', *(['-G', self.group] if key in members else []), name])
            self.created.append(name)
        self.gid = grp.getgrnam(self.group).gr_gid
        self.uid = {k: pwd.getpwnam(n).pw_uid for k, n in self.names.items()}
        self.primary = {k: pwd.getpwnam(n).pw_gid for k, n in self.names.items()}

    @staticmethod
    def _run(argv):
        r = subprocess.run(argv, capture_output=True, text=True)
        check(r.returncode == 0, f'{" ".join(argv)} exited with {r.returncode}: {r.stderr.strip()}')

    def setpriv(self, key, groups='init'):
        """argv prefix running as user key: with its groups from the user database ('init'); with
        its primary group only ('clear'); or with only the given gid as its group (an int)."""
        name = self.names[key]
        if groups == 'init':
            return ['setpriv', f'--reuid={name}', f'--regid={self.primary[key]}', '--init-groups']
        gid = self.primary[key] if groups == 'clear' else groups
        return ['setpriv', f'--reuid={name}', f'--regid={gid}', '--clear-groups']

    def tpd(self, args=(), start=True):
        """A tpd of the test whose socket the users reach: its access group is the test's group,
        its socket in run/ under the test's directory, both open to be passed through (0711, 0755);
        the socket's own mode decides the rest."""
        os.chmod(self.ctx.tmpdir, 0o711)
        run_dir = os.path.join(self.ctx.tmpdir, 'run')
        os.makedirs(run_dir, exist_ok=True)
        os.chmod(run_dir, 0o755)
        tpd = self.ctx.tpd(args=['--access-group', self.group, *args], start=False)
        tpd.socket = os.path.join(run_dir, f'{tpd.instance}.sock')
        return tpd.start() if start else tpd

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop_and_remove(self.ctx)
        return False

    def stop_and_remove(self, ctx):
        """At a test's end, whatever happened: stops every process the test started but tpd (nothing
        of the users may outlive them), removes the users, and fails on what could not be removed."""
        for p in reversed(ctx._processes):
            if not p.name.startswith('tpd-'):
                p.kill()
        errors = self.remove()
        if errors:
            fail('cleanup: ' + '; '.join(errors))

    def remove(self):
        errors = []
        for name in self.created:
            # Processes of the user would make userdel fail: none should be left, but be sure.
            subprocess.run(['pkill', '-KILL', '-u', name], capture_output=True)
            r = subprocess.run(['userdel', name], capture_output=True, text=True)
            if r.returncode != 0:
                errors.append(f'userdel {name}: {r.stderr.strip()}')
        if self.group_created:
            r = subprocess.run(['groupdel', self.group], capture_output=True, text=True)
            if r.returncode != 0:
                errors.append(f'groupdel {self.group}: {r.stderr.strip()}')
        return errors


def fork_child(fn, *args):
    """fn(*args, out_fd) in a forked child, which writes its report (JSON) to out_fd and _exit()s:
    returns (pid, the fd to read the report from) for collect_child()."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        fn(*args, w)
        os._exit(0)
    os.close(w)
    return pid, r


def collect_child(pid, fd, timeout):
    """The report of a fork_child(): the child is killed, and the test fails, if it has not
    reported (closed its end) within timeout seconds."""
    data = b''
    deadline = time.monotonic() + timeout
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                fail(f'child {pid} did not report within {timeout} s')
            if not select.select([fd], [], [], left)[0]:
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            data += chunk
    finally:
        os.close(fd)
        os.waitpid(pid, 0)
    check(data, f'child {pid} reported nothing')
    return json.loads(data)


class GetInfoSampler:
    """GetInfo in a loop on a connection of its own, every interval seconds; keeps the round trips
    (latencies) and what went wrong (errors), for tests of how long tpd's loop is held.

    The loop runs in a process of its own, at the test's priority: a thread would wait for this
    process's GIL while the test's other threads parse records or fork, and the test would measure
    Python instead of tpd."""

    def __init__(self, tpd, interval, timeout=10.0):
        self.args = [sys.executable, os.path.abspath(__file__), '--getinfo-sampler', tpd.socket,
                     str(interval), str(timeout)]
        self.proc = None
        self.latencies = []
        self.errors = []

    def start(self):
        self.proc = subprocess.Popen(self.args, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        # The first line says the connection is made: samples start before start() returns.
        first = self.proc.stdout.readline()
        check(first.strip() == b'connected', f'GetInfo sampler did not connect: {first!r}')

    def stop(self, timeout=30):
        """Ends the loop (its stdin closes); latencies and errors are then filled in."""
        try:
            out, _ = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            check(False, f'GetInfo sampler did not stop within {timeout} s')
        res = json.loads(out)
        self.latencies, self.errors = res['latencies'], res['errors']


def _getinfo_sampler(path, interval, timeout):
    """The GetInfoSampler's process: samples until its stdin closes, then writes them as JSON."""
    data = json.dumps({'method': 'org.varlink.service.GetInfo'}).encode() + b'\0'
    latencies, errors = [], []
    try:
        v = Varlink(path, timeout)
    except OSError as e:
        print(f'cannot connect: {e!r}', flush=True)
        return
    print('connected', flush=True)
    while True:
        t0 = time.monotonic()
        try:
            v.send_raw(data)
            reply = v.recv(timeout=timeout)
        except Exception as e:          # noqa: BLE001 - reported by the test
            errors.append(repr(e))
            break
        latencies.append(time.monotonic() - t0)
        if not reply or 'error' in reply:
            errors.append(f'GetInfo reply: {reply!r}')
        if select.select([sys.stdin], [], [], max(0.0, interval - (time.monotonic() - t0)))[0]:
            break
    sys.stdout.write(json.dumps({'latencies': latencies, 'errors': errors}))


if __name__ == '__main__' and sys.argv[1:2] == ['--getinfo-sampler']:
    _getinfo_sampler(sys.argv[2], float(sys.argv[3]), float(sys.argv[4]))
