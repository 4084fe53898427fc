#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""tpd's side-by-side benchmark (docs/performance.md): one generated load through tpd, trace-cmd and perf.

    python3 tests/bench/bench.py --build build [--quick] [--json out.json] [--events N]
    python3 tests/bench/bench.py --build build --fanout     (1 to 32 streams, selective, Python)

or `meson test -C build --benchmark --verbose` (writes build/tests/bench/side-by-side.json). Needs
root, tracefs and CPUs 0 and 1; builds nothing (run `meson compile -C build` first). A full run takes
about 5 minutes, --quick about 1. Generators run on CPU 0; this script pins itself, and so every
tracer and consumer it starts, to CPU 1. tests/bench/README.md says what each column means.

Exit status: 0 whatever the numbers (a benchmark, not a test), 1 when a measurement could not be
made, 77 when tracefs or the CPUs cannot be had, 130 when interrupted.
"""

import argparse
import array
import fcntl
import json
import os
import platform
import re
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
# The integration tests' harness owns process, instance and Varlink plumbing; the benchmark reuses it.
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(HERE, '..', 'integration'))
import tpdtest as T  # noqa: E402
from tpdtest import check, fail, log  # noqa: E402

GEN_CPU, TRACER_CPU = 0, 1
# Executables of a meson build directory, by the environment variable tests/integration uses.
BUILD_PROGRAMS = {
    'TPD': 'daemon/tpd',
    'TPCTL': 'client/tpctl',
    'GEN_GETPPID': 'tests/integration/gen-getppid',
    'GEN_MARKER': 'tests/integration/gen-marker',
    'GEN_PINGPONG': 'tests/integration/gen-pingpong',
    'NATS_CONSUME': 'tests/integration/nats-consume',
}
# What a plain run measures on getppid and pingpong, in this order (with --streams N, tpdN for tpd8).
TRACERS = ('tpd1', 'tpdsym', 'tpd8', 'tpdtop', 'tpdcount', 'tpd-record', 'tc-record', 'tc-stream', 'perf')
# tpdN: tpd with N `tpctl stream > /dev/null`; tpdNsel: N streams with a filter each, which pass half
# of the records on average (N even); tpdNpy: N streams and a Python client speaking plain Varlink.
# A "sock" suffix: the streams read their socket (--transport=socket) instead of tpd's shared
# memory (tpctl's default), for the two side by side. A "wK" suffix: tpd decodes on K worker threads
# (--decode-workers=K) instead of its event loop.
TPD_STREAMS = re.compile(r'tpd([1-9][0-9]*)(sel|py)?(sock)?(?:w([1-9][0-9]*))?$')
# tpdpid: one stream of the generator's pids (-p, over the socket, as a following stream goes);
# tpdfollow: the same with --follow, tpd reading forks for it; tpdcgroup: one stream --cgroup of a
# cgroup holding the generator; tpdwithcgroup: one stream --with cgroup (each record names its
# task's cgroup; over the socket, as such a stream goes). Not in the default run.
SCOPE_TRACERS = ('tpdpid', 'tpdfollow', 'tpdcgroup', 'tpdwithcgroup')
# tpdhist: one `tpctl hist --json` (tpd's Aggregate) instead of a stream; tpdstack, tc-record-stack,
# perf-stack: the kernel's stack of each record (tpctl stream --stack, trace-cmd record -T, perf
# record -g). Not in the default run.
EXTRA_TRACERS = ('tpdhist', 'tpdstack', 'tc-record-stack', 'perf-stack', 'tpd-record-perfetto')
FANOUT_TRACERS = ('tpd1', 'tpd2', 'tpd4', 'tpd8', 'tpd32', 'tpd8sel', 'tpd8py', 'tpd1sock', 'tpd8sock',
                  'tpd32sock')
FANOUT_WORKLOADS = ('getppid', 'pingpong')
VARLINK_STREAM = os.path.join(HERE, 'varlink-stream.py')
WORKLOADS = ('getppid', 'pingpong', 'latency', 'idle', 'startup', 'export')
CLK_TCK = os.sysconf('SC_CLK_TCK')
NS = 1_000_000_000
CONSUMER_PIPE_SIZE = 1 << 20
TC_STREAM_GRACE_S = 10
SO_TIMESTAMPNS = getattr(socket, 'SO_TIMESTAMPNS', 35)

# The bounds each run is checked against (docs/performance.md, "What the benchmark checks").
# Daemon CPU per record: 250 ns for getppid records (20 bytes raw, ~121 bytes of JSON); sched_switch
# records are about three times larger in both, and get 400 ns.
TARGET_DAEMON_NS = {'getppid': 250, 'pingpong': 400}
TARGET_FANOUT_RATIO = 2.0
TARGET_LATENCY_P99_MS = 150
TARGET_IDLE_PCT = 0.1
TARGET_READY_MS = 100
TARGET_RSS_MIB = 16


# ----------------------------------------------------------------------------------------------
# measuring processes

def _proc_stat(pid):
    with open(f'/proc/{pid}/stat') as f:
        rest = f.read().rpartition(')')[2]
    return rest.split()        # rest[1] is ppid (field 4); rest[11:15] utime stime cutime cstime


def tree_cpu_ns(root):
    """CPU time of a process and its live descendants (every thread's schedstat run time, exact), plus
    the user + system time of the children they already reaped (clock ticks), in ns. 0 if gone."""
    parents, reaped = {}, {}
    for name in os.listdir('/proc'):
        if not name.isdigit():
            continue
        try:
            f = _proc_stat(name)
        except (OSError, IndexError):
            continue
        parents[int(name)] = int(f[1])
        reaped[int(name)] = int(f[13]) + int(f[14])
    total = 0
    for pid in parents:
        p = pid
        while p > 1 and p != root:
            p = parents.get(p, 0)
        if p == root:
            total += (runtime_ns(pid) or 0) + reaped[pid] * NS // CLK_TCK
    return total


def stat_cpu_ns(pid):
    """utime + stime of a live process from /proc/PID/stat (clock-tick resolution), in ns."""
    f = _proc_stat(pid)
    return (int(f[11]) + int(f[12])) * NS // CLK_TCK


def runtime_ns(pid):
    """Exact on-CPU time of all threads of a live process (schedstat), or None."""
    total = 0
    try:
        for tid in os.listdir(f'/proc/{pid}/task'):
            with open(f'/proc/{pid}/task/{tid}/schedstat') as f:
                total += int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return total


def proc_status(pid, key):
    """An integer line of /proc/PID/status (kB for the Vm* keys), or None."""
    try:
        for line in T.read_text(f'/proc/{pid}/status').splitlines():
            k, _, v = line.partition(':')
            if k == key:
                v = v.strip()
                return int(v.split()[0]) if v[:1].isdigit() and v.split()[0].isdigit() else v
    except OSError:
        pass
    return None


class Child(T.Process):
    """A process whose resource usage is collected with wait4() (all its reaped descendants included).

    Popen must never reap it (that would lose the rusage): running(), wait(), signal() and kill()
    go through wait4()/kill() directly. Started in its own session, so that cleanup can end the
    helpers it forked (trace-cmd's per-CPU recorders) with it."""

    def __init__(self, ctx, name, argv, **kw):
        self.rusage = None
        self.forced = None
        self.started = time.monotonic()
        self.ended = None
        super().__init__(ctx, name, argv, start_new_session=True, **kw)

    def running(self):
        if self.proc.returncode is not None:
            return False
        try:
            pid, status, ru = os.wait4(self.pid, os.WNOHANG)
        except ChildProcessError:
            self.proc.returncode = -1
            return False
        if pid == 0:
            return True
        self.ended = time.monotonic()
        self.proc.returncode = os.waitstatus_to_exitcode(status)
        self.rusage = ru
        return False

    def wait(self, timeout):
        deadline = time.monotonic() + timeout
        while self.running():
            if time.monotonic() > deadline:
                return None
            time.sleep(0.005)
        return self.proc.returncode

    def signal(self, sig):
        if self.running():
            os.kill(self.pid, sig)

    def kill(self, grace=3.0):
        # SIGINT first, to the whole group: the way trace-cmd and perf stop cleanly, reaping their
        # helpers (killed helpers of a killed parent would linger as zombies of PID 1). The group
        # id is ours while the leader is unreaped, and stays its helpers' (never reused) while one
        # of them lives: ESRCH then says none is left.
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGKILL):
            if not self.running():
                break
            try:
                os.killpg(self.pid, sig)
            except OSError:
                pass
            self.wait(grace if sig != signal.SIGKILL else 10)
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except OSError:
            pass
        super().kill(grace)

    def finish(self, sig, timeout, what, again_s=None):
        """Sends sig to the process group (as ^C in a terminal does), waits, and returns the CPU ns of
        the whole life (user + system time, reaped descendants included). again_s: repeat the signal
        to the leader at that interval (trace-cmd 3.1.6 stream sits in a restarted poll() after the
        first SIGINT and only stops at the second). After timeout the group gets SIGTERM, then
        SIGKILL, and self.forced says so (trace-cmd stream now and then deadlocks at its stop: a
        recorder blocks writing into its pipe while the main process waits for it)."""
        self.forced = None
        if self.running():
            os.killpg(self.pid, sig)
        deadline = time.monotonic() + timeout
        while self.wait(min(again_s or timeout, max(0.0, deadline - time.monotonic()))) is None:
            if time.monotonic() >= deadline:
                waits = sorted(set(self.group_wchans()))
                for force in (signal.SIGTERM, signal.SIGKILL):
                    self.forced = (f'{what} ignored {signal.Signals(sig).name} for {timeout} s (waiting in '
                                   f'{", ".join(waits) or "?"}): ended by {force.name}')
                    os.killpg(self.pid, force)
                    if self.wait(10) is not None:
                        break
                else:
                    fail(f'{what} survived SIGKILL; stderr: {self.stderr_text()!r}')
                log(f'warning: {self.forced}')
                break
            self.signal(sig)
        return self.cpu_ns()

    def group_wchans(self):
        """Where the processes of its group sleep in the kernel (/proc/PID/wchan)."""
        for name in os.listdir('/proc'):
            try:
                if name.isdigit() and os.getpgid(int(name)) == self.pid:
                    yield T.read_text(f'/proc/{name}/wchan') or '-'
            except OSError:
                pass

    def cpu_ns(self):
        return int((self.rusage.ru_utime + self.rusage.ru_stime) * NS)

    def maxrss_kb(self):
        return self.rusage.ru_maxrss


def run_to_end(ctx, name, argv, timeout, stdout=subprocess.DEVNULL, consume=None):
    """Runs a post-processing command; returns (wall s, CPU ns, max RSS kB, stderr text). consume: gets
    its stdout (stdout=PIPE) in chunks of about 1 MiB."""
    p = Child(ctx, name, argv, stdout=stdout)
    if consume:
        tail = b''
        while chunk := p.proc.stdout.read1(1 << 20):
            lines, _, rest = (tail + chunk).rpartition(b'\n')
            consume(lines)
            tail = rest
        consume(tail)
    if p.wait(timeout) is None:
        fail(f'{" ".join(argv)} did not finish within {timeout} s')
    if p.proc.returncode != 0:
        fail(f'{" ".join(argv)} exited with {p.proc.returncode}; stderr: {p.stderr_text()!r}')
    return p.ended - p.started, p.cpu_ns(), p.maxrss_kb(), p.stderr_text(20000)


def settle(sample, timeout, quiet, ready=lambda v: True):
    """Polls sample() every 0.1 s until ready(value) and the value has not changed for `quiet`
    seconds. Returns the last value and whether it settled before the timeout."""
    deadline = time.monotonic() + timeout
    last, since = None, time.monotonic()
    while True:
        v = sample()
        now = time.monotonic()
        if v != last:
            last, since = v, now
        elif ready(v) and now - since >= quiet:
            return v, True
        if now > deadline:
            return v, False
        time.sleep(0.1)


def wakeup_cost_ns(seconds, interval=0.1):
    """CPU ns that one timer wakeup of an otherwise idle thread costs on this machine (a VM pays for
    the timer interrupt and the switch from idle): the floor under any daemon's idle cost."""
    path = '/proc/thread-self/schedstat'
    start, n = int(T.read_text(path).split()[0]), 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        time.sleep(interval)
        n += 1
    return (int(T.read_text(path).split()[0]) - start) / max(1, n)


def percentiles(samples):
    if not samples:
        return None
    s = sorted(samples)

    def rank(q):
        return s[min(len(s) - 1, max(0, -(-len(s) * q // 100) - 1))]
    return {'n': len(s), 'p50_ms': rank(50) / 1e6, 'p99_ms': rank(99) / 1e6, 'max_ms': s[-1] / 1e6}


# ----------------------------------------------------------------------------------------------
# the counting consumer

class LineCounter:
    """Reads a stream's NDJSON in a thread (a tpctl stream's stdout, or the socket after a Stream call
    with "upgrade", whose first bytes may have come with the reply: initial): counts lines and lost
    records, and samples the latency from each record's ts (boot clock) to its arrival here
    (CLOCK_BOOTTIME after read()).

    every_line: a sample per record (low rates). Otherwise the first and the last complete line of
    each read() (the oldest and the newest record that arrived together): parsing millions of lines
    in Python would make the consumer the bottleneck."""

    def __init__(self, fd, every_line, initial=b''):
        self.fd = fd
        self.initial = initial
        self.every_line = every_line
        self.lines = 0
        self.lost_records = 0
        self.lost = {'overrun': 0, 'client': 0}
        self.latency_ns = array.array('q')
        self.errors = []
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _sample(self, line, now):
        try:
            self.latency_ns.append(now - int(line[6:line.index(b',', 6)]))
        except ValueError:
            if len(self.errors) < 3:
                self.errors.append(f'line without a leading "ts": {line[:200]!r}')

    def _run(self):
        partial = self.initial
        # One buffer for every read: os.read() would allocate (and the kernel map) a fresh MiB for
        # each, which costs more than the records of a small read.
        buf = bytearray(1 << 20)
        view = memoryview(buf)
        while True:
            try:
                n = os.readv(self.fd, [buf])
            except OSError:
                n = 0
            now = time.clock_gettime_ns(time.CLOCK_BOOTTIME)
            if not n:
                return
            data = partial + view[:n]
            end = data.rfind(b'\n')
            if end < 0:
                partial = data
                continue
            partial = data[end + 1:]
            data = data[:end]
            self.lines += data.count(b'\n') + 1
            pos = data.find(b'"lost":')
            while pos >= 0:
                start = data.rfind(b'\n', 0, pos) + 1
                stop = data.find(b'\n', pos)
                try:
                    rec = T.parse_record(data[start:stop if stop >= 0 else len(data)])
                except T.TestFailure as e:
                    rec = {}
                    if len(self.errors) < 3:
                        self.errors.append(str(e))
                if 'lost' in rec:
                    self.lost_records += 1
                    self.lost[rec['cause']] += rec['lost']
                if stop < 0:
                    break
                pos = data.find(b'"lost":', stop)
            if self.every_line:
                for line in data.split(b'\n'):
                    self._sample(line, now)
            else:
                first = data.find(b'\n')
                self._sample(data[:first] if first >= 0 else data, now)
                if first >= 0:
                    self._sample(data[data.rfind(b'\n') + 1:], now)

    def records(self):
        return self.lines - self.lost_records


# ----------------------------------------------------------------------------------------------
# tpd

class BenchContext(T.Context):
    def unique_name(self, suffix=''):
        self._names += 1
        return f'tpdbench-{os.getpid()}-{self.rand}-{self._names}{suffix}'


class BenchTpd(T.Tpd):
    """tpd on a private socket and instance, nothing persisted, READY=1 sent to our own socket."""

    def start(self, timeout=10.0, clean=True):
        notify_path = os.path.join(self.ctx.tmpdir, f'{self.instance}.notify')
        notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
        try:
            notify.bind(notify_path)
            notify.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
            self.runs += 1
            argv = [T.env_program('TPD'), '--socket', self.socket, '--instance', self.instance,
                    '--state-dir', '', *self.args]
            start_rt, start = time.time_ns(), time.monotonic_ns()
            self.process = T.Process(self.ctx, f'tpd-{self.instance}-{self.runs}', argv,
                                     stdout=subprocess.DEVNULL, env=dict(os.environ, NOTIFY_SOCKET=notify_path))
            self.getinfo_ms = self._poll_getinfo(start, timeout)
            self.ready_ms = self._ready(notify, start_rt, timeout)
        finally:
            notify.close()
            try:
                os.unlink(notify_path)
            except OSError:
                pass
        check(os.path.isdir(self.instance_dir), f'tpd is ready but {self.instance_dir} does not exist')
        affinity = proc_status(self.process.pid, 'Cpus_allowed_list')
        check(str(affinity) == str(TRACER_CPU), f'tpd runs on CPUs {affinity}, expected {TRACER_CPU}')
        return self

    def _poll_getinfo(self, start, timeout):
        # Every millisecond: the target is 100 ms, tpdtest's 20 ms poll would blur it.
        while time.monotonic_ns() - start < timeout * NS:
            if not self.process.running():
                fail(f'tpd exited with {self.process.proc.returncode} during start-up; log:\n{self.log()}')
            try:
                with T.Varlink(self.socket, timeout=2) as v:
                    reply = v.call('org.varlink.service.GetInfo')
                if 'error' not in reply:
                    return (time.monotonic_ns() - start) / 1e6
            except (OSError, TimeoutError):
                pass
            time.sleep(0.001)
        fail(f'tpd did not answer GetInfo within {timeout} s; log:\n{self.log()}')

    def _ready(self, notify, start_rt, timeout):
        """ms from exec to READY=1, from the kernel's arrival timestamp of the datagram (so that
        polling GetInfo meanwhile does not delay it); None if tpd never sent it."""
        notify.settimeout(timeout)
        while True:
            try:
                msg, anc, _, _ = notify.recvmsg(4096, 256)
            except socket.timeout:
                return None
            arrived = time.time_ns()
            for level, kind, data in anc:
                if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(data) >= 16:
                    sec, nsec = struct.unpack('qq', data[:16])
                    arrived = sec * NS + nsec
            if b'READY=1' in msg.split(b'\n'):
                return (arrived - start_rt) / 1e6

    def status(self):
        reply = self.call('io.tpd.tracing.GetStatus')
        check('error' not in reply, f'GetStatus failed: {reply}')
        return reply['parameters']

    def wait_streams(self, k, streams, timeout=10.0):
        deadline = time.monotonic() + timeout
        while self.status()['streams'] < k:
            for s in streams:
                check(s.running(), f'{s.name} exited with {s.proc.returncode}: {s.stderr_text()!r}')
            check(time.monotonic() < deadline, f'tpd does not list {k} streams after {timeout} s')
            time.sleep(0.02)

    def cpu_ns(self):
        return tree_cpu_ns(self.process.pid)

    def stat_cpu_ns(self):
        return stat_cpu_ns(self.process.pid)


def client_lost(status):
    return sum(c.get('lost_client', 0) for c in status['connections'] if c['streaming'])


def start_stream(ctx, tpd, args, counting):
    argv = [T.env_program('TPCTL'), '--socket', tpd.socket, 'stream', *args]
    name = f'tpctl-stream-{len(ctx._processes)}'
    if not counting:
        return Child(ctx, name, argv, stdout=subprocess.DEVNULL), None
    p = Child(ctx, name, argv, stdout=subprocess.PIPE)
    # Fewer, larger reads keep the consumer's cost per record low (a log shipper would do the same);
    # the measured costs are tpd's and tpctl's, not this script's.
    try:
        fcntl.fcntl(p.proc.stdout.fileno(), fcntl.F_SETPIPE_SZ, CONSUMER_PIPE_SIZE)
    except OSError:
        pass
    return p, LineCounter(p.proc.stdout.fileno(), every_line=counting == 'every')


class Bench:
    def __init__(self, ctx, opts):
        self.ctx = ctx
        self.opts = opts
        self.rows = []
        self.startups = []
        self.idle = None
        self.errors = []
        self.missing = set()
        self.rep = 0

    def new_tpd(self, args=()):
        tpd = BenchTpd(self.ctx, args=args).start()
        self.startups.append({'getinfo_ms': tpd.getinfo_ms, 'ready_ms': tpd.ready_ms, 'during': 'run'})
        return tpd

    def profile_start(self, tpd, label):
        """perf record of tpd for one run (--profile): returns the function that stops it."""
        if not self.opts.profile:
            return lambda: None
        os.makedirs(self.opts.profile, exist_ok=True)
        path = os.path.join(self.opts.profile, re.sub(r'[^A-Za-z0-9]+', '-', label).strip('-') + '.data')
        # DWARF unwinding: a debugoptimized build has no frame pointers, so -g would cut every stack.
        p = Child(self.ctx, 'perf-profile', ['perf', 'record', '-q', '--call-graph', 'dwarf,16384', '-F', '999',
                                             '-p', str(tpd.process.pid), '-o', path], stdout=subprocess.DEVNULL)
        time.sleep(0.5)

        def stop():
            p.finish(signal.SIGINT, 60, 'perf record -p')
            with open(path[:-5] + '.txt', 'w') as f:
                subprocess.run(['perf', 'report', '-i', path, '--no-children', '--percent-limit', '1', '--stdio',
                                '-g', 'none'], stdout=f, stderr=subprocess.DEVNULL, timeout=600)
            log(f'profile: {path[:-5]}.txt')
        return stop

    def guarded(self, what, fn, *args):
        """Runs one measurement; a failure is reported and ends that measurement's processes and
        instances, and the benchmark goes on with the next one."""
        marks = (len(self.ctx._processes), len(self.ctx._daemons), len(self.ctx._instances))
        log(f'--- {what}' + (f' (run {self.rep + 1} of {self.opts.repeat})'
                             if self.rep is not None and self.opts.repeat > 1 else ''))
        try:
            fn(*args)
        except Exception as e:      # noqa: BLE001 -- any failure of one run, reported and survived
            log(f'ERROR: {what}: {e}' + ('' if isinstance(e, T.TestFailure) else '\n' + traceback.format_exc()))
            self.errors.append(f'{what}: {e}')
            for p in self.ctx._processes[marks[0]:]:
                if not p.name.startswith('tpd-'):
                    p.kill()
            for d in self.ctx._daemons[marks[1]:]:
                d.cleanup()
            for path in self.ctx._instances[marks[2]:]:
                T.remove_instance(path)

    def warm_up(self):
        """One small unreported tpd run: the first measurement of a session tends to come out dearer
        than the same one repeated (cold caches and page tables)."""
        self.tpd_bulk(GetppidLoad(min(self.opts.events, 500_000)), 'warm-up', 1, None)
        self.rows.pop()

    # --- tpd on a bulk load

    def tpd_bulk(self, load, tracer, k, counting, extra=(), top=False, selective=False, python=False,
                 workers=0, scope=None):
        """tpd with k `tpctl stream`s of the load's event. selective: stream i filters with
        load.selections[i % 2] (k even: each pair passes every record once); python: one more
        stream, the Python Varlink client (varlink-stream.py); workers: tpd's decode workers;
        scope: -p of each of the generator's pids, and these options after them; 'cgroup': --cgroup
        of a cgroup the generator is moved into."""
        tpd = self.new_tpd((f'--decode-workers={workers}',) if workers else ())
        gen, flt = load.spawn(self.ctx)
        if scope == 'cgroup':
            cg = self.ctx.cgroups()
            for pid in load.pids:
                cg.move(pid, '')
            extra = (*extra, '--cgroup', cg.path(''))
        elif scope is not None:
            extra = (*extra, *(a for pid in load.pids for a in ('-p', str(pid))), *scope)
        tpd.tpctl_ok('enable', load.event, '--filter', flt)
        streams = [start_stream(self.ctx, tpd, ['-e', load.event, *extra,
                                                *(('--filter', load.selections[i % 2]) if selective else ())],
                                counting) for i in range(k)]
        procs = [p for p, _ in streams]
        counter = streams[0][1]
        py = Child(self.ctx, 'varlink-stream', [sys.executable, VARLINK_STREAM, tpd.socket, load.event],
                   stdout=subprocess.PIPE) if python else None
        if py:
            procs.append(py)
        n = len(procs)
        tpd.wait_streams(n, procs)
        # `tpctl top` keeps tpd's per-event counters on: what they cost tpd is the difference to the
        # run without it.
        top_proc = T.Process(self.ctx, 'tpctl-top', [T.env_program('TPCTL'), '--socket', tpd.socket, 'top'],
                             stdout=subprocess.DEVNULL) if top else None
        stop_profile = self.profile_start(tpd, f'{load.key}-{tracer}-run{self.rep + 1}')
        time.sleep(0.2)

        stats0, st0 = tpd.stats(), tpd.status()
        cpu0, stat0 = tpd.cpu_ns(), tpd.stat_cpu_ns()
        clients0 = [tree_cpu_ns(p.pid) for p in procs]
        elapsed = load.run(gen)

        def sample():
            st = tpd.status()
            return (sum(s.get('entries', 0) for s in tpd.stats().values()), st['delivered'],
                    counter.lines if counter else 0, sum(runtime_ns(p.pid) or 0 for p in procs))
        # With stacks the buffer never empties: every sched_switch of the machine, tpd's own included, writes
        # a stack record (the trigger fires before the filter). Drained then = nothing more delivered.
        stack = '--stack' in extra
        if stack:
            _, settled = settle(lambda: sample()[1:], timeout=120, quiet=0.5)
        else:
            _, settled = settle(sample, timeout=120, quiet=0.3, ready=lambda v: v[0] == 0)
        cpu1, stat1 = tpd.cpu_ns(), tpd.stat_cpu_ns()
        stats1, st1 = tpd.stats(), tpd.status()
        hwm = proc_status(tpd.process.pid, 'VmHWM')
        stop_profile()
        clients = [p.finish(signal.SIGTERM, 10, p.name) - c0 for p, c0 in zip(procs, clients0)]
        if top_proc:
            top_proc.terminate()
        for p in procs:
            check(p.proc.returncode == 0, f'{p.name} exited with {p.proc.returncode}: {p.stderr_text()!r}')
        if counter:
            counter.thread.join(10)
        tpd.stop(clear_pins=False)

        delta = T.stats_delta(stats0, stats1)
        # The kernel counts the fork, exit and move records tpd reads for a following stream (or one
        # --with cgroup); no stream gets them.
        own = sum(st1.get('follow', {}).get(k, 0) - st0.get('follow', {}).get(k, 0)
                  for k in ('forks', 'exits', 'moves'))
        written = T.written(delta) - own
        queued = st1['delivered'] - st0['delivered']
        lost = {'kernel_overrun': T.kernel_lost(delta),
                'tpd_overrun': st1['lost']['overrun'] - st0['lost']['overrun'],
                # By connection: a shared-memory stream's own losses are its reader's word (STATS).
                'client': client_lost(st1) - client_lost(st0)}
        row = self.row(load, tracer, written, elapsed, settled)
        if stack:
            self.stack_generated(row, load, written)
        row.update({
            'streams': n,
            'fanout': counting is None and not extra and not top,
            'selective': selective,
            'selections': list(load.selections) if selective else None,
            'delivered': counter.records() if counter else queued / n,
            'delivered_source': 'lines read by the counting consumer' if counter else 'GetStatus delivered / streams',
            'delivered_all_streams': queued,
            'lost': lost['kernel_overrun'] + lost['client'] / n,
            'lost_detail': lost,
            'tracer_cpu_ns': cpu1 - cpu0,
            'tracer_cpu_ns_proc_stat': stat1 - stat0,
            'client_cpu_ns': sum(clients),
            'peak_rss_kb': hwm,
        })
        if counter:
            row['lost_records'] = counter.lost_records
            row['lost_detail']['reported_to_consumer'] = counter.lost
            row['latency'] = percentiles(counter.latency_ns)
            row['latency_sampling'] = 'first and last record of each read()'
            if counter.errors:
                row['warnings'].append('; '.join(counter.errors))
        if py:
            self.python_client(row, py, clients[-1])
        if not stack:
            self.check_bulk_counts(row, counter, k, n)
        self.add(row)

    def stack_generated(self, row, load, written):
        """A stack row: tpd's stacktrace trigger writes an ftrace:kernel_stack record for every call of the
        event (before its filter: those of other tasks too, which tpd reads and drops), so the kernel's count
        is no measure of the load: the load's estimate is."""
        row.update({'generated': load.expected, 'generated_source': load.expected_source, 'written_with_stacks': written})
        row['notes'].append(f'the kernel wrote {written:,} records, ftrace:kernel_stack ones included; generated is '
                            f'{load.expected_source}')

    def tpd_hist(self, load):
        """tpd with one `tpctl hist EVENT --field common_pid --by comm --json --interval 1` (Aggregate) instead of
        a stream. What the socket carried: the bytes of its --json stdout over the run (the snapshots'
        parameters without the Varlink envelope; tpctl receives with recvmsg(), which /proc/PID/io does not
        count). With --json it prints nothing more at SIGTERM: after the drain it gets one more snapshot,
        which is the final one, and whose records + lost must be what the kernel wrote."""
        tpd = self.new_tpd()
        gen, flt = load.spawn(self.ctx)
        tpd.tpctl_ok('enable', load.event, '--filter', flt)
        hist = Child(self.ctx, 'tpctl-hist', [T.env_program('TPCTL'), '--socket', tpd.socket, 'hist', load.event,
                                              '--field', 'common_pid', '--by', 'comm', '--json', '--interval', '1'],
                     stdout=subprocess.PIPE)
        out = {'lines': [], 'bytes': 0, 'n': 0}

        def read():
            for line in hist.proc.stdout:
                out['bytes'] += len(line)
                out['n'] += 1
                out['lines'] = out['lines'][-1:] + [line]
        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        deadline = time.monotonic() + 10
        while not out['lines']:        # the first snapshot: the aggregation is live
            check(hist.running(), f'tpctl hist exited with {hist.proc.returncode}: {hist.stderr_text()!r}')
            check(time.monotonic() < deadline, 'tpctl hist printed no snapshot within 10 s')
            time.sleep(0.02)
        stop_profile = self.profile_start(tpd, f'{load.key}-hist-run{self.rep + 1}')
        time.sleep(0.2)
        stats0, cpu0, client0, bytes0 = tpd.stats(), tpd.cpu_ns(), tree_cpu_ns(hist.pid), out['bytes']
        start = time.monotonic()
        elapsed = load.run(gen)
        _, settled = settle(lambda: (sum(s.get('entries', 0) for s in tpd.stats().values()), runtime_ns(tpd.process.pid)),
                            timeout=120, quiet=0.3, ready=lambda v: v[0] == 0)
        cpu1, stats1 = tpd.cpu_ns(), tpd.stats()
        hwm = proc_status(tpd.process.pid, 'VmHWM')
        n = out['n']
        settle(lambda: out['n'], timeout=3, quiet=0, ready=lambda v: v > n)
        socket_bytes, seconds = out['bytes'] - bytes0, time.monotonic() - start
        stop_profile()
        client = hist.finish(signal.SIGTERM, 10, 'tpctl hist') - client0
        check(hist.proc.returncode == 0, f'tpctl hist exited with {hist.proc.returncode}: {hist.stderr_text()!r}')
        reader.join(10)
        tpd.stop(clear_pins=False)
        final = json.loads(out['lines'][-1]) if out['lines'] else {}
        delta = T.stats_delta(stats0, stats1)
        written = T.written(delta)
        row = self.row(load, 'tpd, 1 × tpctl hist', written, elapsed, settled)
        row.update({'streams': 1, 'delivered': final.get('records'), 'delivered_source': 'records of the final snapshot',
                    'lost': final.get('lost'), 'lost_detail': {'kernel_overrun': T.kernel_lost(delta)},
                    'tracer_cpu_ns': cpu1 - cpu0, 'client_cpu_ns': client, 'peak_rss_kb': hwm,
                    'socket_bytes': socket_bytes, 'socket_bytes_source': 'tpctl hist --json stdout',
                    'socket_bytes_per_s': socket_bytes / seconds})
        row['notes'].append(f'the socket carried {socket_bytes:,} bytes of snapshots in {seconds:.1f} s '
                            f'({socket_bytes / seconds:,.0f} B/s; bytes of tpctl\'s --json stdout)')
        if (final.get('records') or 0) + (final.get('lost') or 0) != written:
            row['warnings'].append(f'COUNT MISMATCH: records {final.get("records")} + lost {final.get("lost")} '
                                   f'!= written {written}')
        self.add(row)

    def python_client(self, row, py, cpu):
        """What varlink-stream.py counted, in the row's notes; a count short of the load is a warning."""
        try:
            got = json.loads(py.proc.stdout.read() or b'{}')
        except ValueError as e:
            got = {'errors': [f'varlink-stream.py printed no JSON: {e}']}
        row['python_client'] = dict(got, cpu_ns=cpu)
        lost = row['lost_detail']
        records = got.get('records')
        lat = got.get('latency')
        row['notes'].append(f'Python Varlink client: {fmt(records)} records, lost {got.get("lost")}, '
                            f'{fmt(cpu / row["generated"] if row["generated"] else None)} ns per record'
                            + (f', latency p50 {lat["p50_ms"]:.1f} ms, p99 {lat["p99_ms"]:.1f} ms' if lat else ''))
        row['warnings'] += got.get('errors') or []
        if records is None or records + lost['kernel_overrun'] + got['lost']['client'] != row['generated']:
            row['warnings'].append(f'COUNT MISMATCH: the Python client read {records} + lost {got.get("lost")} '
                                   f'+ kernel overrun {lost["kernel_overrun"]} != written {row["generated"]}')

    def check_bulk_counts(self, row, counter, k, n):
        """delivered + lost == written for every stream; a selective pair of streams passes every record
        once, so k selective streams get k / 2 × what the kernel kept."""
        lost, written = row['lost_detail'], row['generated']
        if row['selective']:
            row['expected_all_streams'] = k // 2 * (written - lost['kernel_overrun'])
            row['notes'].append(f'{k} streams with a filter each ({" / ".join(row["selections"])}, alternately): '
                                f'delivered is per stream on average, ns/ev per generated record')
        else:
            row['expected_all_streams'] = n * (written - lost['kernel_overrun'])
        if counter:
            accounted = row['delivered'] + lost['kernel_overrun'] + lost['client'] / k
            if accounted != written:
                row['warnings'].append(f'COUNT MISMATCH: delivered {row["delivered"]} + lost {lost} '
                                       f'!= written {written}')
        elif not lost['client']:
            if row['delivered_all_streams'] != row['expected_all_streams']:
                row['warnings'].append(f'COUNT MISMATCH: delivered {row["delivered_all_streams"]} to {n} streams, '
                                       f'expected {row["expected_all_streams"]} (written {written}, lost {lost})')
        else:
            # GetStatus counts a stream's lost records among its delivered ones: only a count read from the
            # stream separates them.
            row['notes'].append('delivered includes the "lost" records (GetStatus counts them as delivered)')

    def tpd_record(self, load, ext='dat'):
        """`tpctl record` into a trace-cmd data file (raw pages, nothing decoded by tpd), or with
        ext 'perfetto-trace' into a Perfetto trace (the same pages, encoded by tpctl)."""
        tpd = self.new_tpd()
        gen, flt = load.spawn(self.ctx)
        tpd.tpctl_ok('enable', load.event, '--filter', flt)
        out = os.path.join(self.ctx.tmpdir, f'record-{len(self.rows)}.{ext}')
        rec = Child(self.ctx, 'tpctl-record', [T.env_program('TPCTL'), '--socket', tpd.socket, 'record', '-o', out,
                                               '-e', load.event], stdout=subprocess.DEVNULL)
        tpd.wait_streams(1, [rec])
        stop_profile = self.profile_start(tpd, f'{load.key}-record-run{self.rep + 1}')
        time.sleep(0.2)

        stats0 = tpd.stats()
        cpu0 = tpd.cpu_ns()
        client0 = tree_cpu_ns(rec.pid)
        elapsed = load.run(gen)

        def sample():
            return sum(s.get('entries', 0) for s in tpd.stats().values()), runtime_ns(rec.pid) or 0
        _, settled = settle(sample, timeout=120, quiet=0.3, ready=lambda v: v[0] == 0)
        cpu1 = tpd.cpu_ns()
        stats1 = tpd.stats()
        hwm = proc_status(tpd.process.pid, 'VmHWM')
        stop_profile()
        client = rec.finish(signal.SIGINT, 120, 'tpctl record') - client0
        check(rec.proc.returncode == 0, f'tpctl record exited with {rec.proc.returncode}: {rec.stderr_text()!r}')
        m = re.search(r'tpctl: (\d+) records in \d+ files?, (\d+) lost', rec.stderr_text())
        check(m, f'no summary from tpctl record: {rec.stderr_text()!r}')
        tpd.stop(clear_pins=False)

        delta = T.stats_delta(stats0, stats1)
        written = T.written(delta)
        row = self.row(load, f'tpd, tpctl record (.{ext})', written, elapsed, settled)
        row.update({'streams': 1, 'delivered': int(m[1]), 'delivered_source': 'records tpctl record wrote',
                    'lost': int(m[2]), 'tracer_cpu_ns': cpu1 - cpu0, 'client_cpu_ns': client, 'peak_rss_kb': hwm,
                    'file_bytes': os.path.getsize(out)})
        if row['delivered'] + row['lost'] != written:
            row['warnings'].append(f'COUNT MISMATCH: recorded {row["delivered"]} + lost {row["lost"]} != written {written}')
        os.unlink(out)
        self.add(row)

    def row(self, load, tracer, generated, elapsed, settled=True):
        return {'workload': load.key, 'load': load.title, 'tracer': tracer, 'generated': generated,
                'generated_source': 'tracefs per_cpu stats', 'gen_seconds': elapsed,
                'gen_rate_per_s': generated / elapsed if elapsed else None, 'run': (self.rep or 0) + 1,
                'notes': [], 'warnings': [] if settled else ['did not settle within the drain timeout']}

    def add(self, row):
        # Per delivered record: what a record that reaches the user costs. A tool that drops most of the
        # load (trace-cmd stream) would otherwise look cheap. Without losses it is per generated event.
        # Selective streams pass part of the load each: their cost is per generated record.
        g = row['generated'] if row.get('selective') else row.get('delivered') or 0
        for key in ('tracer', 'client'):
            v = row.get(f'{key}_cpu_ns')
            row[f'{key}_ns_per_event'] = v / g if v is not None and g else None
            row[f'{key}_ns_per_generated_event'] = v / row['generated'] if v is not None and row['generated'] else None
        row['total_ns_per_event'] = sum(row.get(f'{k}_ns_per_event') or 0 for k in ('tracer', 'client')) or None
        self.rows.append(row)
        log(f'{row["tracer"]}: generated {row["generated"]}, delivered {row.get("delivered")}, '
            f'lost {row.get("lost")}, tracer {fmt(row["tracer_ns_per_event"])} ns/ev, '
            f'client {fmt(row["client_ns_per_event"])} ns/ev {"; ".join(row["notes"] + row["warnings"])}')

    # --- tpctl export into NATS JetStream

    def export_run(self, rate, seconds, nodes, batch_kb):
        """A paced getppid load exported by `tpctl export` into a JetStream cluster of `nodes` on this
        machine (stream with as many replicas); delivered = records read back from the stream. tracer:
        tpd; client: tpctl export; the nats-servers' CPU is in the notes."""
        n = int(rate * seconds)
        load = Load('export', f'getppid {n:,} at {rate:,}/s → JetStream ({nodes} node{"s" if nodes > 1 else ""}, '
                    f'R{nodes})', 'syscalls:sys_enter_getppid')
        # The servers may use both CPUs, like a cluster of its own would; tpd and export stay on CPU 1.
        mask = os.sched_getaffinity(0)
        os.sched_setaffinity(0, set(T.online_cpus()))
        try:
            cluster = T.NatsCluster(self.ctx, nodes).start()
        finally:
            os.sched_setaffinity(0, mask)
        tpd = self.new_tpd()
        gen = self.ctx.gen('GEN_GETPPID', '--count', n, '--cpu', GEN_CPU, '--rate', rate)
        pid, = gen.pids()
        tpd.tpctl_ok('enable', load.event, '--filter', f'common_pid == {pid}')
        prefix = f'bench{nodes}n{batch_kb}b'
        export = Child(self.ctx, 'tpctl-export', [T.env_program('TPCTL'), '--socket', tpd.socket, 'export',
                                                  cluster.urls, '--subject-prefix', prefix, '--create-stream',
                                                  '--replicas', str(nodes), '-e', load.event, '--batch-size',
                                                  str(batch_kb)],
                       stdout=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while 'exporting to' not in export.stderr_text():
            check(export.running() and time.monotonic() < deadline, f'tpctl export did not start: {export.stderr_text()}')
            time.sleep(0.1)
        tpd.wait_streams(1, [export])
        time.sleep(0.5)
        nats_pids = [p.pid for p in cluster.procs]
        stats0, cpu0 = tpd.stats(), tpd.cpu_ns()
        nats0 = sum(tree_cpu_ns(p) for p in nats_pids)
        export0 = runtime_ns(export.pid) or 0
        elapsed = load_run_paced(gen, n)
        # Drained = the stream's message count stops growing.
        count, since = None, time.monotonic()
        while time.monotonic() - since < 2.0 and time.monotonic() < deadline + 120:
            c = cluster.consume(prefix.upper(), 'count')
            if c != count:
                count, since = c, time.monotonic()
            time.sleep(0.2)
        cpu1, stats1 = tpd.cpu_ns(), tpd.stats()
        nats1 = sum(tree_cpu_ns(p) for p in nats_pids)
        export_cpu = (runtime_ns(export.pid) or 0) - export0
        export.finish(signal.SIGTERM, 20, 'tpctl export')
        summary = export.stderr_text().strip().splitlines()[-1]
        rows = cluster.records(prefix.upper(), full=(), timeout=600)
        delivered = sum(1 for _, _, r in rows if r.get('pid') == pid)
        lost = {}
        for _, _, r in rows:
            if 'lost' in r:
                lost[r['cause']] = lost.get(r['cause'], 0) + r['lost']
        messages = len({m for _, m, _ in rows})
        tpd.stop(clear_pins=False)
        cluster.stop()
        delta = T.stats_delta(stats0, stats1)
        row = self.row(load, f'tpd + tpctl export --batch-size {batch_kb}', T.written(delta), elapsed)
        row.update({'streams': 1, 'delivered': delivered, 'delivered_source': 'records read back from JetStream',
                    'lost': sum(lost.values()), 'lost_detail': lost, 'tracer_cpu_ns': cpu1 - cpu0,
                    'client_cpu_ns': export_cpu, 'nats_cpu_ns': nats1 - nats0, 'messages': messages})
        row['nats_ns_per_event'] = (nats1 - nats0) / delivered if delivered else None
        row['notes'].append(f'{messages} messages ({delivered / messages if messages else 0:.0f} records each); '
                            f'nats-server × {nodes}: {fmt(row["nats_ns_per_event"])} ns per record; lost {lost or 0}; '
                            f'export says: {summary.removeprefix("tpctl: ")}')
        if delivered + sum(lost.values()) != row['generated']:
            row['warnings'].append(f'COUNT MISMATCH: delivered {delivered} + lost {lost} != written {row["generated"]}')
        self.add(row)

    # --- trace-cmd

    def trace_cmd(self, load, mode, stack=False):
        inst = self.ctx.make_instance('-tc')
        name = os.path.basename(inst)
        out = os.path.join(self.ctx.tmpdir, f'{name}.dat')
        gen, flt = load.spawn(self.ctx)
        argv = ['trace-cmd', mode, '-k', '-d', '-B', name, '-e', load.event, '-f', flt, *(('-T',) if stack else ())]
        if mode == 'record':
            argv += ['-o', out]
        tc = Child(self.ctx, f'trace-cmd-{mode}', argv, stdout=subprocess.DEVNULL)
        enable = os.path.join(inst, 'events', *load.event.split(':'), 'enable')
        deadline = time.monotonic() + 20
        while T.read_text(enable).strip() != '1':
            check(tc.running(), f'trace-cmd {mode} exited with {tc.proc.returncode}: {tc.stderr_text()!r}')
            check(time.monotonic() < deadline, f'trace-cmd {mode} did not enable {load.event} within 20 s')
            time.sleep(0.02)
        time.sleep(0.5)         # its per-CPU readers start after the enable
        check(tc.running(), f'trace-cmd {mode} exited with {tc.proc.returncode}: {tc.stderr_text()!r}')

        stats0 = T.read_cpu_stats(inst)
        cpu0 = tree_cpu_ns(tc.pid)
        elapsed = load.run(gen)

        def sample():
            s = T.read_cpu_stats(inst)
            return sum(c.get('entries', 0) for c in s.values()), sum(c.get('read events', 0) for c in s.values())
        # record moves whole pages on its own schedule and flushes the rest at SIGINT. stream reads a
        # backlog at a few pages a second (≈ 90 s for a full default buffer): after TC_STREAM_GRACE_S
        # what it has not read counts as not delivered.
        if mode == 'record':
            _, settled = settle(sample, timeout=120, quiet=1.0)
        else:
            settled = True
            settle(sample, timeout=TC_STREAM_GRACE_S, quiet=1.0, ready=lambda v: v[0] == 0)
        stop = time.monotonic()
        # What it used up to here: the measure if it has to be killed (helpers it did not reap are not
        # in its rusage then).
        live = tree_cpu_ns(tc.pid)
        cpu = tc.finish(signal.SIGINT, 30, f'trace-cmd {mode}', again_s=1.0 if mode == 'stream' else None)
        cpu = (max(cpu, live) if tc.forced else cpu) - cpu0
        stop_s = time.monotonic() - stop
        stats1 = T.read_cpu_stats(inst)
        err = T.remove_instance(inst)
        check(err is None, err)

        delta = T.stats_delta(stats0, stats1)
        written = T.written(delta)
        row = self.row(load, f'trace-cmd {mode}' + (' -T' if stack else '') + (' + report' if mode == 'record' else ''),
                       written, elapsed, settled)
        if tc.forced:
            row['forced'] = True
            row['warnings'].append(tc.forced + ' (CPU time counted up to the stop)')
        unread = sum(c.get('entries', 0) for c in delta.values())
        if unread:
            row['warnings'].append(f'{unread:,} records still unread {TC_STREAM_GRACE_S} s after the load '
                                   'ended (counted as lost)')
        row.update({'delivered': sum(c.get('read events', 0) for c in delta.values()),
                    'delivered_source': 'tracefs read events', 'lost': T.kernel_lost(delta) + unread,
                    'unread': unread,
                    'tracer_cpu_ns': cpu, 'peak_rss_kb': tc.maxrss_kb(), 'stop_seconds': stop_s,
                    'client_cpu_ns': None})
        if mode == 'record':
            events = [0]
            if stack:       # each record is followed by its <stack trace>: count the event's own lines
                short = load.event.split(':')[1].encode() + b':'
                wall, rcpu, rss, _ = run_to_end(self.ctx, 'trace-cmd-report', ['trace-cmd', 'report', '-i', out], 1200,
                                                subprocess.PIPE, lambda d: events.__setitem__(0, events[0] + d.count(short)))
                row['notes'].append(f'the kernel wrote {written:,} records, stacks included; delivered: '
                                    f'{load.event} lines of the report')
                row.update({'written_with_stacks': written, 'delivered': events[0],
                            'generated': events[0] + row['lost']})
            else:
                wall, rcpu, rss, _ = run_to_end(self.ctx, 'trace-cmd-report', ['trace-cmd', 'report', '-i', out], 1200)
            row.update({'client_cpu_ns': rcpu, 'post_seconds': wall, 'post_rss_kb': rss,
                        'file_bytes': os.path.getsize(out)})
            os.unlink(out)
        self.add(row)

    # --- perf

    def perf(self, load, stack=False):
        out = os.path.join(self.ctx.tmpdir, 'perf.data')
        ctl, ack = (os.path.join(self.ctx.tmpdir, f'perf-{x}.fifo') for x in ('ctl', 'ack'))
        for path in (ctl, ack):
            if os.path.exists(path):
                os.unlink(path)
            os.mkfifo(path)
        gen, flt = load.spawn(self.ctx)
        # Started with its events disabled (-D -1) and enabled over the control fifo: the ack says
        # exactly when it records, without guessing how long its start-up takes.
        argv = ['perf', 'record', '-e', load.event, '--filter', flt, '-a', '-o', out, '-D', '-1',
                '--control', f'fifo:{ctl},{ack}', *(('-g',) if stack else ())]
        pr = Child(self.ctx, 'perf-record', argv, stdout=subprocess.DEVNULL)
        # O_RDWR: opening a fifo never blocks then, even if perf died before opening its end.
        ctl_fd = os.open(ctl, os.O_RDWR | os.O_CLOEXEC)
        ack_fd = os.open(ack, os.O_RDWR | os.O_CLOEXEC)
        try:
            os.write(ctl_fd, b'enable\n')
            ack_reader = T.LineReader(ack_fd)
            try:
                line = ack_reader.readline(30)
            except TimeoutError:
                line = None
            check(line == b'ack', f'perf record did not ack "enable" ({line!r}): {pr.stderr_text()!r}')
        finally:
            os.close(ctl_fd)
            os.close(ack_fd)
        cpu0 = tree_cpu_ns(pr.pid)
        elapsed = load.run(gen)
        time.sleep(0.2)
        stop = time.monotonic()
        cpu = pr.finish(signal.SIGINT, 120, 'perf record') - cpu0
        stop_s = time.monotonic() - stop
        m = re.search(r'\((\d+) samples\)', pr.stderr_text(20000))
        wall, scpu, rss, _ = run_to_end(self.ctx, 'perf-script', ['perf', 'script', '-i', out], 1200)

        stats = subprocess.run(['perf', 'report', '-i', out, '--stats'], capture_output=True, text=True,
                               timeout=600).stdout
        section = stats.partition(f'{load.event} stats:')[2]
        samples = re.search(r'SAMPLE events:\s+(\d+)', section)
        lost = re.search(r'LOST_SAMPLES events:\s+(\d+)', section)
        delivered = int(samples.group(1)) if samples else int(m.group(1)) if m else None
        row = self.row(load, f'perf record{" -g" if stack else ""} + script', load.expected, elapsed)
        if lost:
            lost_n = int(lost.group(1))
        elif delivered is not None:
            lost_n = max(0, load.expected - delivered) if not section else 0
        else:
            lost_n = None
        if delivered is not None and delivered > load.expected:
            row['notes'].append(f'{delivered - load.expected} samples more than {load.expected_source}{load.excess}')
        row.update({'generated_source': load.expected_source, 'delivered': delivered,
                    'delivered_source': 'perf samples', 'lost': lost_n,
                    'tracer_cpu_ns': cpu, 'peak_rss_kb': pr.maxrss_kb(), 'stop_seconds': stop_s,
                    'client_cpu_ns': scpu, 'post_seconds': wall, 'post_rss_kb': rss,
                    'file_bytes': os.path.getsize(out)})
        os.unlink(out)
        self.add(row)

    # --- tpd only

    def latency(self, rate, seconds):
        tpd = self.new_tpd()
        n = int(rate * seconds)
        gen = self.ctx.gen('GEN_MARKER', '--instance', tpd.instance, '--rate', rate, '--count', n,
                           '--cpu', GEN_CPU, '--wait', '--seq', 'tpd-bench-latency')
        gen.pids()
        stream, counter = start_stream(self.ctx, tpd, [], 'every')
        tpd.wait_streams(1, [stream])
        stop_profile = self.profile_start(tpd, 'latency')
        time.sleep(0.2)
        stats0, cpu0 = tpd.stats(), tpd.cpu_ns()
        clients0 = tree_cpu_ns(stream.pid)
        start = time.monotonic()
        gen.command('go')
        _, writes = gen.wait_done(timeout=seconds * 3 + 30)
        elapsed = time.monotonic() - start
        check(writes == n, f'gen-marker wrote {writes}, expected {n}')
        _, settled = settle(lambda: counter.lines, timeout=10, quiet=0.5, ready=lambda v: v >= n)
        cpu = tpd.cpu_ns() - cpu0
        stats1 = tpd.stats()
        hwm = proc_status(tpd.process.pid, 'VmHWM')
        stop_profile()
        clients = stream.finish(signal.SIGTERM, 10, 'tpctl stream') - clients0
        counter.thread.join(10)
        tpd.stop(clear_pins=False)
        delta = T.stats_delta(stats0, stats1)
        row = self.row(Load('latency', f'trace_marker {rate}/s × {seconds:g} s', 'ftrace:print'),
                       'tpd, 1 × counting consumer', T.written(delta), elapsed, settled)
        row.update({'streams': 1, 'delivered': counter.records(), 'delivered_source': 'lines read',
                    'lost': T.kernel_lost(delta) + counter.lost['client'], 'lost_records': counter.lost_records,
                    'tracer_cpu_ns': cpu, 'client_cpu_ns': clients, 'peak_rss_kb': hwm,
                    'latency': percentiles(counter.latency_ns), 'latency_sampling': 'every record'})
        self.add(row)

    def idle_run(self, seconds):
        tpd = self.new_tpd()
        # An event that is enabled (its tracepoint is live) but never fires: pid 0 makes no syscalls.
        event = 'syscalls:sys_enter_getppid'
        tpd.tpctl_ok('enable', event, '--filter', 'common_pid == 0')
        stream, _ = start_stream(self.ctx, tpd, ['-e', event], None)
        tpd.wait_streams(1, [stream])
        stop_profile = self.profile_start(tpd, 'idle')
        time.sleep(1.0)
        pid = tpd.process.pid
        stats0, cpu0, stat0 = tpd.stats(), tpd.cpu_ns(), tpd.stat_cpu_ns()
        sw0 = proc_status(pid, 'voluntary_ctxt_switches') or 0
        start = time.monotonic()
        time.sleep(seconds)
        wall = time.monotonic() - start
        cpu, stat = tpd.cpu_ns() - cpu0, tpd.stat_cpu_ns() - stat0
        wakeups = (proc_status(pid, 'voluntary_ctxt_switches') or 0) - sw0
        stats1 = tpd.stats()
        rss, hwm = proc_status(pid, 'VmRSS'), proc_status(pid, 'VmHWM')
        stop_profile()
        stream.finish(signal.SIGTERM, 10, 'tpctl stream')
        tpd.stop(clear_pins=False)
        bare = wakeup_cost_ns(min(seconds, 5.0))
        self.idle = {'seconds': wall, 'event': event, 'streams': 1,
                     'events_seen': T.written(T.stats_delta(stats0, stats1)),
                     'cpu_ns': cpu, 'cpu_ns_proc_stat': stat, 'cpu_pct': 100 * cpu / (wall * NS),
                     'wakeups_per_s': wakeups / wall, 'cpu_ns_per_wakeup': cpu / max(1, wakeups),
                     'bare_wakeup_ns': bare, 'rss_kb': rss, 'peak_rss_kb': hwm}
        log(f'idle: {self.idle["cpu_pct"]:.4f} % CPU, {self.idle["wakeups_per_s"]:.1f} wakeups/s, RSS {rss} kB')

    def startup(self, k):
        for _ in range(k):
            tpd = BenchTpd(self.ctx).start()
            self.startups.append({'getinfo_ms': tpd.getinfo_ms, 'ready_ms': tpd.ready_ms, 'during': 'startup',
                                  'rss_kb': proc_status(tpd.process.pid, 'VmRSS')})
            tpd.stop(clear_pins=False)
            time.sleep(0.1)


def load_run_paced(gen, n):
    gen.go()
    _, count, elapsed_ns = gen.wait_done(timeout=120 + n / 20_000)
    check(count == n, f'gen-getppid made {count} calls, expected {n}')
    return elapsed_ns / NS


class Load:
    """A generated load. spawn() starts its generator and returns it with the kernel filter that keeps
    its records; a bulk load also sets selections then: two stream filters that split those records
    between them, each record passing exactly one."""

    def __init__(self, key, title, event):
        self.key, self.title, self.event = key, title, event
        self.selections = None


class GetppidLoad(Load):
    def __init__(self, n):
        super().__init__('getppid', f'getppid storm {n:,}', 'syscalls:sys_enter_getppid')
        self.n = self.expected = n
        self.expected_source = 'generator count'
        self.excess = ' (perf writes a few duplicates)'

    def spawn(self, ctx):
        gen = ctx.gen('GEN_GETPPID', '--count', self.n, '--cpu', GEN_CPU)
        pid, = gen.pids()
        self.pids = (pid,)
        # One process on one CPU: a stream filter passes all of it or nothing.
        self.selections = (f'common_pid == {pid}', f'common_pid != {pid}')
        return gen, f'common_pid == {pid}'

    def run(self, gen):
        gen.go()
        _, count, elapsed_ns = gen.wait_done(timeout=60 + self.n / 50_000)
        check(count == self.n, f'gen-getppid made {count} calls, expected {self.n}')
        return elapsed_ns / NS


class PingpongLoad(Load):
    def __init__(self, n):
        super().__init__('pingpong', f'pipe ping-pong {n:,} round trips', 'sched:sched_switch')
        self.n = n
        self.expected = 2 * n
        self.expected_source = '2 × round trips (an estimate: preemptions add a few)'
        self.excess = ''

    def spawn(self, ctx):
        gen = ctx.gen('GEN_PINGPONG', '--count', self.n, '--cpu', GEN_CPU)
        parent, child = gen.pids()
        self.pids = (parent, child)
        # Each switch away from one of the two: the pair of filters passes every record once.
        self.selections = (f'prev_pid == {parent}', f'prev_pid == {child}')
        return gen, f'common_pid == {parent} || common_pid == {child}'

    def run(self, gen):
        go_ts = gen.go()
        done_ts, count = gen.wait_done(timeout=60 + self.n / 20_000)
        check(count == self.n, f'gen-pingpong made {count} round trips, expected {self.n}')
        return (done_ts - go_ts) / NS


# ----------------------------------------------------------------------------------------------
# report

def fmt(v, digits=0):
    if v is None:
        return '-'
    if isinstance(v, float) and not v.is_integer() or digits:
        return f'{v:,.{digits}f}'
    return f'{int(v):,}'


def rate(v):
    if not v:
        return '-'
    if v >= 1e6:
        return f'{v / 1e6:.2f}M'
    return f'{v / 1e3:.0f}K' if v >= 1e4 else f'{v:.0f}'


def table(rows, headers, aligns):
    widths = [max(len(str(r[i])) for r in [headers] + rows) for i in range(len(headers))]
    out = []
    for r in [headers] + rows:
        out.append('  '.join(str(c).ljust(w) if a == '<' else str(c).rjust(w) for c, w, a in zip(r, widths, aligns)))
        if r is headers:
            out.append('  '.join('-' * w for w in widths))
    return '\n'.join(out)


def render(result):
    lines = []
    m = result['machine']
    lines.append(f'tpd side-by-side benchmark: kernel {m["kernel"]}, {m["cpus"]} CPUs, generator on CPU {GEN_CPU}, '
                 f'tracers and consumers on CPU {TRACER_CPU}; {m["tpd_version"]}, {m["trace_cmd_version"]}, '
                 f'{m["perf_version"]}')
    lines.append('busy before the run (other processes): ' +
                 ', '.join(f'cpu{c} {p:.0f} %' for c, p in m['busy_pct_before'].items()))
    lines.append('ns/ev: CPU time (user + system) per delivered record (= per generated event when nothing is lost).\n'
                 'tracer: tpd / trace-cmd record or stream / perf record; client: every tpctl / trace-cmd report / '
                 'perf script.\n× tpd: total against tpd with one stream on the same workload. post s: wall time of '
                 'report / script. gen/s: the generator\'s rate while traced.')
    headers = ['workload', 'tracer', 'generated', 'delivered', 'lost', 'gen/s', 'tracer ns/ev', 'client ns/ev',
               'total ns/ev', '× tpd', 'post s', 'peak RSS MiB', 'latency p50/p99/max ms']
    aligns = '<<>>>>>>>>>><'
    body = []
    base = {}
    for r in result['runs']:
        if r['tracer'] == 'tpd, 1 × tpctl stream' and r['total_ns_per_event']:
            base[r['workload']] = r['total_ns_per_event']
    last = None
    for r in result['runs']:
        ratio = (r['total_ns_per_event'] / base[r['workload']]
                 if r['total_ns_per_event'] and r['workload'] in base else None)
        lat = r.get('latency')
        rss = r.get('peak_rss_kb')
        if r.get('post_rss_kb') and rss:
            rss = max(rss, r['post_rss_kb'])
        body.append([r['load'] if r['load'] != last else '', r['tracer'], fmt(r['generated']),
                     fmt(r.get('delivered')), fmt(r.get('lost')), rate(r.get('gen_rate_per_s')),
                     fmt(r['tracer_ns_per_event']), fmt(r['client_ns_per_event']), fmt(r['total_ns_per_event']),
                     f'{ratio:.2f}' if ratio else '-', fmt(r.get('post_seconds'), 1) if r.get('post_seconds') else '-',
                     fmt(rss / 1024, 1) if rss else '-',
                     f'{lat["p50_ms"]:.1f} / {lat["p99_ms"]:.1f} / {lat["max_ms"]:.1f}' if lat else '-'])
        last = r['load']
    lines.append(table(body, headers, aligns))
    lines += render_fanout(result['runs'])
    notes = [f'  {r["load"]}, {r["tracer"]}: {n}' for r in result['runs'] for n in r['warnings'] + r['notes']]
    if notes:
        lines.append('notes:\n' + '\n'.join(notes))
    idle = result.get('idle')
    if idle:
        lines.append(f'idle: tpd {idle["cpu_pct"]:.4f} % CPU over {idle["seconds"]:.0f} s ({idle["event"]} enabled, '
                     f'{idle["streams"]} stream, {idle["events_seen"]} events): {idle["wakeups_per_s"]:.1f} wakeups/s '
                     f'at {idle["cpu_ns_per_wakeup"] / 1000:.0f} µs each; a bare 10 Hz sleep loop costs '
                     f'{idle["bare_wakeup_ns"] / 1000:.0f} µs per wakeup here; RSS {idle["rss_kb"] / 1024:.1f} MiB')
    st = result.get('startup')
    if st:
        lines.append(f'start-up (n = {st["n"]}): READY=1 after median {fmt(st["ready_ms_median"], 1)} ms, '
                     f'max {fmt(st["ready_ms_max"], 1)} ms; GetInfo answered after median '
                     f'{fmt(st["getinfo_ms_median"], 1)} ms, max {fmt(st["getinfo_ms_max"], 1)} ms')
    if result['targets']:
        lines.append('targets (docs/performance.md):')
        for t in result['targets']:
            lines.append(f'  [{"met" if t["met"] else "MISSED"}] {t["target"]}: {t["measured"]}')
    if result['errors']:
        lines.append('runs that failed:\n' + '\n'.join(f'  {e}' for e in result['errors']))
    return '\n'.join(lines)


def render_fanout(runs):
    """The tpd rows of plain, selective and Python streams side by side, per generated record (= per
    delivered record of each stream when the streams pass everything and nothing is lost)."""
    rows = [r for r in runs if r.get('fanout')]
    if not any(r['streams'] > 1 for r in rows):
        return []
    # Each transport against its own one stream.
    def transport(r):
        return 'socket' if r['tracer'].endswith('(socket)') else 'shm'
    base = {(r['workload'], transport(r)): r['tracer_ns_per_generated_event'] for r in rows
            if r['tracer'] in ('tpd, 1 × tpctl stream', 'tpd, 1 × tpctl stream (socket)')
            and r['tracer_ns_per_generated_event']}
    body, last = [], None
    for r in rows:
        tpd, clients = r['tracer_ns_per_generated_event'], r['client_ns_per_generated_event']
        total = (tpd or 0) + (clients or 0)
        key = (r['workload'], transport(r))
        ratio = tpd / base[key] if tpd and key in base else None
        body.append([r['load'] if r['load'] != last else '', r['tracer'], r['streams'], fmt(r['generated']),
                     fmt(r['delivered_all_streams']), fmt(r['expected_all_streams']), fmt(r.get('lost')), fmt(tpd),
                     fmt(clients), fmt(total or None), fmt(total / r['streams'] if total else None),
                     f'{ratio:.2f}' if ratio else '-'])
        last = r['load']
    headers = ['workload', 'tracer', 'consumers', 'generated', 'delivered (all)', 'expected (all)', 'lost',
               'tpd ns/rec', 'clients ns/rec', 'total ns/rec', 'per consumer', 'tpd × tpd1']
    return ['fan-out, CPU per generated record: tpd; all consumers together; the total; the total per consumer; '
            'tpd against tpd with one stream of the same transport (shared memory, or the socket).\ndelivered (all): GetStatus delivered to all streams; expected: '
            'what the kernel kept × the streams (selective: × half of them). lost: per stream.',
            table(body, headers, '<<>>>>>>>>>>')]


def aggregate(rows):
    """One row per (workload, tracer): the run with the median total cost, so that every number of a
    row comes from the same run; the largest loss of any run; the other runs' costs in the JSON."""
    groups = {}
    for r in rows:
        groups.setdefault((r['load'], r['tracer']), []).append(r)
    out = []
    for runs in groups.values():
        # Runs that had to be killed are chosen only when every run had to be.
        clean = [r for r in runs if not r.get('forced')] or runs
        costed = sorted((r for r in clean if r['total_ns_per_event'] is not None),
                        key=lambda r: r['total_ns_per_event'])
        chosen = costed[(len(costed) - 1) // 2] if costed else clean[0]
        row = dict(chosen, notes=list(chosen['notes']), warnings=list(chosen['warnings']), runs=len(runs),
                   total_ns_per_event_runs=[r['total_ns_per_event'] for r in runs],
                   tracer_ns_per_event_runs=[r['tracer_ns_per_event'] for r in runs])
        # Every number of the row is the chosen run's; a larger loss in another run is said.
        for r in runs:
            if (r.get('lost') or 0) > (row.get('lost') or 0):
                row['warnings'].append(f'run {r["run"]} lost {fmt(r["lost"])}')
        for r in runs:
            if r is not chosen:
                row['warnings'] += [f'run {r["run"]}: {n}' for n in r['warnings']]
        totals = [t for t in row['total_ns_per_event_runs'] if t]
        if len(totals) > 1 and max(totals) - min(totals) > 0.25 * row['total_ns_per_event']:
            row['notes'].append('total ns/ev of the runs: ' + ', '.join(f'{t:.0f}' for t in totals))
        out.append(row)
    return out


def median(values):
    v = sorted(x for x in values if x is not None)
    return v[len(v) // 2] if v else None


def targets(result):
    out = []

    def add(target, met, measured):
        out.append({'target': target, 'met': bool(met), 'measured': measured})

    runs = {(r['workload'], r['tracer']): r for r in result['runs']}
    one = runs.get(('getppid', 'tpd, 1 × tpctl stream'))
    if one:
        add('lossless getppid storm to one tpctl stream', one['lost'] == 0 and one['delivered'] == one['generated'],
            f'{fmt(one["generated"])} written, {fmt(one["delivered"])} delivered, {fmt(one["lost"])} lost '
            f'at {rate(one["gen_rate_per_s"])}/s')
    for w in ('getppid', 'pingpong'):
        r = runs.get((w, 'tpd, 1 × tpctl stream'))
        if r and r['tracer_ns_per_event']:
            add(f'daemon CPU ≤ {TARGET_DAEMON_NS[w]} ns per record ({w})',
                r['tracer_ns_per_event'] <= TARGET_DAEMON_NS[w],
                f'{r["tracer_ns_per_event"]:.0f} ns')
        r8 = runs.get((w, f'tpd, {result["config"]["streams"]} × tpctl stream'))
        if r and r8 and r['tracer_ns_per_event'] and r8['tracer_ns_per_event']:
            ratio = r8['tracer_ns_per_event'] / r['tracer_ns_per_event']
            add(f'{r8["streams"]} streams ≤ {TARGET_FANOUT_RATIO:g} × one stream, daemon CPU ({w})',
                ratio <= TARGET_FANOUT_RATIO and r8['lost'] == 0,
                f'{ratio:.2f} × ({r8["tracer_ns_per_event"]:.0f} vs {r["tracer_ns_per_event"]:.0f} ns), '
                f'{fmt(r8["lost"])} lost per stream')
    lat = runs.get(('latency', 'tpd, 1 × counting consumer'))
    if lat and lat.get('latency'):
        add(f'p99 latency ≤ {TARGET_LATENCY_P99_MS} ms at {result["config"]["marker_rate"]} events/s',
            lat['latency']['p99_ms'] <= TARGET_LATENCY_P99_MS, f'p99 {lat["latency"]["p99_ms"]:.1f} ms')
    if result.get('idle'):
        add(f'idle ≤ {TARGET_IDLE_PCT} % CPU', result['idle']['cpu_pct'] <= TARGET_IDLE_PCT,
            f'{result["idle"]["cpu_pct"]:.4f} %')
    st = result.get('startup')
    if st and st['ready_ms_median'] is not None:
        add(f'start to READY=1 ≤ {TARGET_READY_MS} ms', st['ready_ms_max'] <= TARGET_READY_MS,
            f'median {st["ready_ms_median"]:.1f} ms, max {st["ready_ms_max"]:.1f} ms')
    low = [r['peak_rss_kb'] for r in result['runs'] if r['tracer'].startswith('tpd') and r['workload'] == 'latency']
    if result.get('idle'):
        low.append(result['idle']['peak_rss_kb'])
    if low:
        add(f'RSS ≤ {TARGET_RSS_MIB} MiB (plus client queues; idle and 100/s runs)',
            max(low) <= TARGET_RSS_MIB * 1024, f'peak {max(low) / 1024:.1f} MiB')
    return out


# ----------------------------------------------------------------------------------------------

def cpu_busy(seconds=1.0):
    def sample():
        out = {}
        for line in T.read_text('/proc/stat').splitlines():
            m = re.match(r'cpu(\d+) (.*)', line)
            if m:
                v = [int(x) for x in m.group(2).split()]
                out[int(m.group(1))] = (sum(v[:8]), v[3] + v[4])
        return out
    a = sample()
    time.sleep(seconds)
    b = sample()
    return {c: 100 * (1 - (b[c][1] - a[c][1]) / max(1, b[c][0] - a[c][0])) for c in b}


def version(argv):
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=30)
        return (r.stdout + r.stderr).strip().splitlines()[0] if (r.stdout + r.stderr).strip() else '?'
    except (OSError, subprocess.SubprocessError):
        return 'missing'


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument('--build', help='meson build directory with tpd, tpctl and the generators (default: take '
                    'them from $TPD, $TPCTL, $GEN_GETPPID, $GEN_MARKER, $GEN_PINGPONG, as meson sets them)')
    ap.add_argument('--json', help='also write the results as JSON to this file')
    ap.add_argument('--quick', action='store_true', help='smaller loads and shorter waits (about 1 minute)')
    ap.add_argument('--events', type=int, help='getppid calls (default 5,000,000; --quick 1,000,000)')
    ap.add_argument('--round-trips', type=int, help='ping-pong round trips (default 500,000; --quick 100,000)')
    ap.add_argument('--repeat', type=int, help='runs of each bulk measurement, interleaved; the table shows the '
                    'run with the median total cost (default 3; --quick 1)')
    ap.add_argument('--streams', type=int, default=8, help='concurrent streams of the default fan-out run, tpd8, '
                    'and of its bound (default 8)')
    ap.add_argument('--marker-rate', type=int, default=100, help='trace_marker writes per second (default 100)')
    ap.add_argument('--latency-seconds', type=float, help='length of the latency run (default 10; --quick 5)')
    ap.add_argument('--idle-seconds', type=float, help='length of the idle measurement (default 30; --quick 5)')
    ap.add_argument('--starts', type=int, help='extra start-up measurements (default 5; --quick 3)')
    ap.add_argument('--profile', metavar='DIR', help='record `perf record --call-graph dwarf` of tpd during each '
                    'tpd run into DIR (with a perf report summary next to it); perf then shares CPU 1 with tpd, '
                    'so the costs of those runs are inflated')
    ap.add_argument('--export-rate', type=int, default=100_000, help='getppid calls per second of the export runs '
                    '(default 100,000)')
    ap.add_argument('--export-seconds', type=float, help='length of the export runs (default 10; --quick 5)')
    ap.add_argument('--workloads', help=f'subset of {",".join(WORKLOADS)} (default: all)')
    ap.add_argument('--tracers', help=f'on getppid and pingpong, in this order: {",".join(TRACERS)} (the default), '
                    'or tpdN (N streams), tpdNsel (N streams with a filter each, N even), tpdNpy (N streams and a '
                    'Python Varlink client), tpdpid and tpdfollow (one stream -p of the generator, without and with '
                    '--follow), tpdcgroup (one stream --cgroup of the generator\'s cgroup), tpdwithcgroup (one stream '
                    '--with cgroup), tpdhist (one tpctl hist instead of a stream), tpdstack, tc-record-stack, '
                    'perf-stack (each record\'s kernel stack: tpctl stream --stack, trace-cmd record -T, perf record -g)')
    ap.add_argument('--fanout', action='store_true', help=f'the fan-out comparison: --workloads '
                    f'{",".join(FANOUT_WORKLOADS)} --tracers {",".join(FANOUT_TRACERS)}')
    o = ap.parse_args()
    if o.fanout:
        if o.workloads or o.tracers:
            ap.error('--fanout chooses the workloads and tracers itself')
        o.workloads, o.tracers = ','.join(FANOUT_WORKLOADS), ','.join(FANOUT_TRACERS)
    o.workloads = o.workloads or ','.join(WORKLOADS)
    o.tracers = o.tracers or ','.join(t if t != 'tpd8' else f'tpd{o.streams}' for t in TRACERS)
    q = o.quick
    o.events = o.events or (1_000_000 if q else 5_000_000)
    o.round_trips = o.round_trips or (100_000 if q else 500_000)
    o.latency_seconds = o.latency_seconds or (5 if q else 10)
    o.idle_seconds = o.idle_seconds if o.idle_seconds is not None else (5 if q else 30)
    o.starts = o.starts if o.starts is not None else (3 if q else 5)
    o.export_seconds = o.export_seconds or (5 if q else 10)
    o.repeat = max(1, o.repeat or (1 if q else 3))
    o.workloads = o.workloads.split(',')
    o.tracers = list(dict.fromkeys(o.tracers.split(',')))
    bad = set(o.workloads) - set(WORKLOADS)
    if bad:
        ap.error(f'unknown workload {", ".join(sorted(bad))}; known: {", ".join(WORKLOADS)}')
    bad = {t for t in o.tracers if t not in TRACERS + SCOPE_TRACERS + EXTRA_TRACERS and not TPD_STREAMS.match(t)}
    if bad:
        ap.error(f'unknown tracer {", ".join(sorted(bad))}; known: {", ".join(TRACERS + SCOPE_TRACERS + EXTRA_TRACERS)}, '
                 'tpdN, tpdNsel, tpdNpy')
    odd = [t for t in o.tracers if t.endswith('sel') and int(TPD_STREAMS.match(t)[1]) % 2]
    if odd:
        ap.error(f'{", ".join(odd)}: selective streams come in pairs, N must be even')
    return o


def setup_programs(build):
    if build:
        for var, rel in BUILD_PROGRAMS.items():
            os.environ[var] = os.path.join(os.path.abspath(build), rel)
    for var in BUILD_PROGRAMS:
        path = os.environ.get(var)
        if not path or not os.access(path, os.X_OK):
            sys.exit(f'bench: {var}={path} is not an executable: pass --build DIR of a build made with '
                     f'`meson setup DIR && meson compile -C DIR`, or run `meson test -C DIR --benchmark`')


def run_tracer(bench, load, tracer):
    """One measurement of a tracer (TRACERS, TPD_STREAMS) on a bulk load."""
    m = TPD_STREAMS.match(tracer)
    if m:
        k, kind, sock, workers = int(m[1]), m[2], bool(m[3]), int(m[4] or 0)
        label = f'tpd, {k} × tpctl stream' + {None: '', 'sel': ' -f (selective)', 'py': ' + Python client'}[kind]
        what = f'tpd, {k} stream{"s" if k > 1 else ""}' + {None: '', 'sel': ', selective',
                                                             'py': ' and a Python Varlink client'}[kind]
        if sock:
            label += ' (socket)'
            what += ', over the socket'
        if workers:
            label += f' ({workers} decode worker{"s" if workers > 1 else ""})'
            what += f', {workers} decode worker{"s" if workers > 1 else ""}'
        bench.guarded(f'{load.title}: {what}', bench.tpd_bulk, load, label, k, None,
                      ('--transport=socket',) if sock else ('--transport=shm',), False, kind == 'sel', kind == 'py',
                      workers)
    elif tracer in SCOPE_TRACERS:
        extra, scope, what, label = {
            'tpdpid': ((), ('--transport=socket',), 'the generator\'s pids', '-p GEN (socket)'),
            'tpdfollow': ((), ('--follow',), 'the generator\'s pids, following', '-p GEN --follow'),
            'tpdcgroup': ((), 'cgroup', 'the generator\'s cgroup', '--cgroup CG'),
            'tpdwithcgroup': (('--with', 'cgroup'), None, 'the event, with each record\'s cgroup',
                              '--with cgroup'),
        }[tracer]
        bench.guarded(f'{load.title}: tpd, 1 stream of {what}', bench.tpd_bulk, load,
                      f'tpd, 1 × tpctl stream {label}', 1, None, extra, False, False, False, 0, scope)
    elif tracer == 'tpdhist':
        bench.guarded(f'{load.title}: tpd, tpctl hist', bench.tpd_hist, load)
    elif tracer == 'tpdstack':
        bench.guarded(f'{load.title}: tpd, 1 stream --stack', bench.tpd_bulk, load,
                      'tpd, 1 × tpctl stream --stack', 1, None, ('--stack',))
    elif tracer == 'tpdsym':
        bench.guarded(f'{load.title}: tpd, 1 stream --symbolic', bench.tpd_bulk, load,
                      'tpd, 1 × tpctl stream --symbolic', 1, None, ('--symbolic',))
    elif tracer == 'tpdtop':
        bench.guarded(f'{load.title}: tpd, 1 stream and tpctl top', bench.tpd_bulk, load,
                      'tpd, 1 × tpctl stream + tpctl top', 1, None, (), True)
    elif tracer == 'tpdcount':
        bench.guarded(f'{load.title}: tpd, counting consumer', bench.tpd_bulk, load,
                      'tpd, 1 × counting consumer', 1, 'sampled')
    elif tracer == 'tpd-record':
        bench.guarded(f'{load.title}: tpd, tpctl record', bench.tpd_record, load)
    elif tracer == 'tpd-record-perfetto':
        bench.guarded(f'{load.title}: tpd, tpctl record -o x.perfetto-trace', bench.tpd_record, load,
                      'perfetto-trace')
    elif tracer in ('tc-record', 'tc-stream', 'tc-record-stack'):
        if bench.machine['trace_cmd_version'] != 'missing':
            mode, _, stack = tracer.removeprefix('tc-').partition('-')
            bench.guarded(f'{load.title}: trace-cmd {mode}{" -T" if stack else ""}', bench.trace_cmd, load, mode,
                          bool(stack))
        else:
            bench.missing.add('trace-cmd is not installed (Debian package trace-cmd)')
    elif tracer in ('perf', 'perf-stack'):
        if bench.machine['perf_version'] != 'missing':
            bench.guarded(f'{load.title}: perf{" -g" if tracer != "perf" else ""}', bench.perf, load,
                          tracer != 'perf')
        else:
            bench.missing.add('perf is not installed (Debian package linux-perf)')


def run_all(bench, o):
    loads = []
    if 'getppid' in o.workloads:
        loads.append(GetppidLoad(o.events))
    if 'pingpong' in o.workloads:
        loads.append(PingpongLoad(o.round_trips))
    if loads:
        bench.guarded('warm-up (not reported)', bench.warm_up)
    for rep, load in ((r, load) for r in range(o.repeat) for load in loads):
        bench.rep = rep
        for tracer in o.tracers:
            run_tracer(bench, load, tracer)
    bench.rep = None
    if 'latency' in o.workloads:
        bench.guarded(f'latency: trace_marker at {o.marker_rate}/s for {o.latency_seconds:g} s', bench.latency,
                      o.marker_rate, o.latency_seconds)
    if 'idle' in o.workloads and o.idle_seconds > 0:
        bench.guarded(f'idle: {o.idle_seconds:g} s', bench.idle_run, o.idle_seconds)
    if 'startup' in o.workloads:
        bench.guarded(f'start-up: {o.starts} starts', bench.startup, o.starts)
    if 'export' in o.workloads:
        if not T.shutil.which('nats-server') and not os.path.exists('/usr/sbin/nats-server'):
            bench.missing.add('nats-server is not installed (Debian package nats-server)')
        else:
            for nodes, batch in ((3, 64), (1, 64), (1, 0)):
                bench.guarded(f'export: getppid at {o.export_rate}/s into a {nodes}-node JetStream cluster, '
                              f'--batch-size {batch}', bench.export_run, o.export_rate, o.export_seconds, nodes,
                              batch)


class Interrupted(BaseException):
    pass


def _on_signal(signum, frame):
    raise Interrupted(signal.Signals(signum).name)


def main():
    o = parse_args()
    setup_programs(o.build)
    try:
        T.ensure_tracefs()
    except T.TestSkip as e:
        print(f'SKIP: {e}', flush=True)
        return T.EXIT_SKIP
    if len(T.online_cpus()) < 2 or TRACER_CPU not in os.sched_getaffinity(0):
        print(f'SKIP: the benchmark needs CPUs {GEN_CPU} and {TRACER_CPU}', flush=True)
        return T.EXIT_SKIP
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)

    machine = {'kernel': platform.release(), 'cpus': len(T.online_cpus()),
               'tpd_version': version([os.environ['TPD'], '--version']),
               'trace_cmd_version': version(['trace-cmd', '--version']).replace('version ', ''),
               'perf_version': version(['perf', '--version']).replace('version ', ''),
               'busy_pct_before': cpu_busy()}
    if max(machine['busy_pct_before'].values()) > 10:
        log(f'warning: the CPUs are already busy ({machine["busy_pct_before"]}): numbers will be noisy')
    # What `taskset -c 1` does: everything started from here (tpd, tpctl, trace-cmd, perf, the counting
    # consumer thread) runs on CPU 1; the generators move themselves to CPU 0 (--cpu).
    os.sched_setaffinity(0, {TRACER_CPU})

    ctx = BenchContext()
    bench = Bench(ctx, o)
    bench.machine = machine
    started = time.monotonic()
    interrupted = None
    try:
        run_all(bench, o)
    except Interrupted as e:
        interrupted = str(e)
        bench.errors.append(f'interrupted by {e}')
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        errors = ctx.cleanup()
        bench.errors += [f'cleanup: {e}' for e in errors]

    ups = bench.startups
    result = {
        'machine': machine,
        'config': {k: getattr(o, k) for k in ('events', 'round_trips', 'streams', 'marker_rate', 'latency_seconds',
                                              'idle_seconds', 'starts', 'repeat', 'quick', 'workloads',
                                              'tracers')},
        'seconds': time.monotonic() - started,
        'runs': aggregate(bench.rows),
        'all_runs': bench.rows,
        'idle': bench.idle,
        'startup': {'n': len(ups), 'samples': ups,
                    'ready_ms_median': median(u['ready_ms'] for u in ups),
                    'ready_ms_max': max((u['ready_ms'] for u in ups if u['ready_ms'] is not None), default=None),
                    'getinfo_ms_median': median(u['getinfo_ms'] for u in ups),
                    'getinfo_ms_max': max((u['getinfo_ms'] for u in ups), default=None)} if ups else None,
        'errors': bench.errors + sorted(bench.missing),
    }
    result['targets'] = targets(result)
    print(render(result), flush=True)
    log(f'benchmark took {result["seconds"]:.0f} s')
    if o.json:
        with open(o.json, 'w') as f:
            json.dump(result, f, indent=2)
            f.write('\n')
    if interrupted:
        return 130
    return 1 if bench.errors else 0


if __name__ == '__main__':
    sys.exit(main())
