#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""`tpctl export` into a 3-node NATS JetStream cluster on loopback, read back with nats-consume.

1. Exact: export creates the stream (3 replicas); N paced getppid calls and M numbered markers
   arrive exactly once each on their event subjects, nothing lost, no message stored twice.
2. Failover: the node that leads the stream is killed (SIGKILL) during the export and restarted:
   again exactly N records, nothing lost, no duplicate (a batch sent again after a lost
   acknowledgement is dropped by JetStream's de-duplication).
3. Outage: the whole cluster is stopped for 5 s while export has a 1 MB buffer: records delivered
   plus records reported lost equals what the kernel wrote, the "export" part is not zero, and
   export resumes by itself (records written after the restart arrive).
4. Memory: with the cluster stopped and --buffer-size 16, 1,000,000 records (about 120 MB) are
   generated, once as one record per message (--batch-size 0, where the messages' own cost is
   largest) and once in batches: export's peak RSS (VmHWM) stays under 2 x 16 MiB + 16 MiB, and
   after the cluster is back delivered + lost = written, exactly.
5. Secrets: servers with a password read from --servers-file; the password is in no message, also
   when the servers cannot be reached.
"""

import os
import re
import signal
import subprocess
import time

import tpdtest as T
from tpdtest import check, log

EVENT = 'syscalls:sys_enter_getppid'
MARKER = 'ftrace:print'
GEN_CPU = 0
SUBJECT_EVENT = 'syscalls.sys_enter_getppid'
SUBJECT_MARKER = 'ftrace.print'


class Export(T.Process):
    def __init__(self, ctx, tpd, cluster, prefix, *args):
        self.prefix = prefix
        self.stream = prefix.upper()
        argv = [T.env_program('TPCTL'), '--socket', tpd.socket, 'export', cluster.urls, '--subject-prefix', prefix,
                *args]
        super().__init__(ctx, f'export-{prefix}', argv, stdout=subprocess.DEVNULL)

    def stop(self):
        check(self.running(), f'tpctl export exited early with {self.proc.returncode}: {self.stderr_text()}')
        self.signal(signal.SIGTERM)
        rc = self.wait(20)
        check(rc == 0, f'tpctl export exited with {rc} after SIGTERM: {self.stderr_text()}')
        log('export: ' + self.stderr_text().strip().replace('\n', '\n        '))


class Books:
    """What a stream holds, split by subject: the run's records of pid, markers, lost records."""

    def __init__(self, rows, prefix, pid, go_ts):
        host = rows[0][0].split('.')[1] if rows else ''
        self.event_subject = f'{prefix}.{host}.{SUBJECT_EVENT}'
        self.marker_subject = f'{prefix}.{host}.{SUBJECT_MARKER}'
        self.lost_subject = f'{prefix}.{host}.lost'
        self.run = []
        self.markers = []
        self.lost = {}
        self.msg_ids = {}
        self.errors = []
        for subject, msg_id, rec in rows:
            self.msg_ids.setdefault(msg_id, subject)
            if self.msg_ids[msg_id] != subject:
                self.errors.append(f'message id {msg_id} on two subjects')
            if 'lost' in rec:
                if subject != self.lost_subject:
                    self.errors.append(f'lost record on {subject}: {rec}')
                self.lost[rec['cause']] = self.lost.get(rec['cause'], 0) + rec['lost']
            elif rec.get('event') == EVENT:
                if subject != self.event_subject:
                    self.errors.append(f'{EVENT} record on {subject}')
                if rec['pid'] == pid and rec['ts'] >= go_ts:
                    self.run.append((rec['cpu'], rec['ts']))
            elif rec.get('event') == MARKER:
                if subject != self.marker_subject:
                    self.errors.append(f'{MARKER} record on {subject}')
                self.markers.append(rec['fields']['buf'].strip())
            else:
                self.errors.append(f'unexpected record on {subject}: {rec}')

    @property
    def lost_total(self):
        return sum(self.lost.values())

    def check_unique(self):
        check(not self.errors, 'bad records in the stream:\n  ' + '\n  '.join(self.errors[:5]))
        check(len(set(self.run)) == len(self.run),
              f'{len(self.run) - len(set(self.run))} records of the run are in the stream twice')


def stable_count(cluster, stream, deadline, timeout):
    """The stream's message count once it stopped growing for longer than export's back-off."""
    count, since = None, time.monotonic()
    while time.monotonic() - since < 2.5:
        c = int(cluster.consume(stream, 'count'))
        if c != count:
            count, since = c, time.monotonic()
        check(time.monotonic() < deadline, f'stream {stream} still growing after {timeout} s')
        time.sleep(0.2)
    return count


def finish(cluster, export, books_count):
    """Stops export; nothing may arrive after the books were read (a late duplicate, say)."""
    export.stop()
    count = int(cluster.consume(export.stream, 'count'))
    check(count == books_count, f'{count - books_count} messages arrived in {export.stream} after export was complete')


def wait_records(cluster, stream, prefix, pid, go_ts, n, timeout):
    """Reads the stream back until n records of the run are delivered or reported lost; returns the
    books and the message count they were read at."""
    deadline = time.monotonic() + timeout
    while True:
        # Reading everything back costs seconds: only once the stream stopped growing.
        count = stable_count(cluster, stream, deadline, timeout)
        books = Books(cluster.records(stream), prefix, pid, go_ts)
        if len(books.run) + len(books.markers) + books.lost_total >= n:
            return books, count
        check(time.monotonic() < deadline, f'{len(books.run)} records + {len(books.markers)} markers + '
                                           f'{books.lost_total} lost of {n} in the stream after {timeout} s')


def start_run(ctx, cluster, prefix, n, rate, *export_args):
    """A tpd, a paced generator filtered in the kernel, and an export whose stream is proven live."""
    # A shared machine can take the CPU away from export for a second (JetStream recovering on the
    # same two CPUs): a 64 MiB queue in tpd keeps that from showing up as "client" losses.
    tpd = ctx.tpd(args=['--stream-queue-kb', '65536'])
    gen = ctx.gen('GEN_GETPPID', '--count', n, '--cpu', GEN_CPU, '--rate', rate)
    pid, = gen.pids()
    tpd.tpctl_ok('enable', EVENT, '--filter', f'common_pid == {pid}')
    export = Export(ctx, tpd, cluster, prefix, '-e', EVENT, '-e', MARKER, *export_args)

    # Live = a probe of the generator is in the stream; the books start after the probes.
    deadline = time.monotonic() + 30
    while True:
        check(export.running(), f'tpctl export exited with {export.proc.returncode}: {export.stderr_text()}')
        gen.probe()
        time.sleep(0.3)
        if 'exporting to' in export.stderr_text():
            rows = cluster.records(export.stream)
            if any(r[2].get('pid') == pid for r in rows):
                break
        check(time.monotonic() < deadline, f'export not live within 30 s: {export.stderr_text()}')
    return tpd, gen, pid, export


def exact_run(ctx, cluster):
    n, rate, markers = 100_000, 50_000, 100
    log(f'--- exact: {n} getppid calls at {rate}/s and {markers} markers')
    tpd, gen, pid, export = start_run(ctx, cluster, 'tpdx', n, rate, '--create-stream', '--replicas', '3')
    check(cluster.consume(export.stream, 'leader') != b'', 'stream has no leader')
    before = tpd.stats()
    go_ts = gen.go()
    for i in range(markers):
        tpd.marker(f'tpdexport {i}')
    books, count = wait_records(cluster, export.stream, export.prefix, pid, go_ts, n + markers, 60)
    delta = T.stats_delta(before, tpd.stats())
    finish(cluster, export, count)
    log(f'stream: {len(books.run)} records of the run, {len(books.markers)} markers, lost {books.lost}; '
        f'kernel written {T.written(delta)}')
    books.check_unique()
    check(T.written(delta) == n + markers, f'kernel stats say {T.written(delta)} written, expected {n} + {markers}')
    check(books.lost_total == 0, f'lost records at {rate}/s: {books.lost}')
    check(len(books.run) == n, f'{len(books.run)} records of the run in the stream, expected {n}')
    check(books.markers == [f'tpdexport {i}' for i in range(markers)],
          f'markers in the stream: {len(books.markers)}, first {books.markers[:3]}, expected 0..{markers - 1} in order')
    tpd.stop()


def failover_run(ctx, cluster):
    n, rate = 200_000, 50_000
    log(f'--- failover: {n} getppid calls at {rate}/s, the stream leader killed and restarted')
    tpd, gen, pid, export = start_run(ctx, cluster, 'tpdf', n, rate, '--create-stream', '--replicas', '3')
    before = tpd.stats()
    go_ts = gen.go()
    time.sleep(1.0)
    leader = cluster.leader(export.stream)
    log(f'killing the stream leader {cluster.names[leader]}')
    cluster.stop([leader], signal.SIGKILL)
    time.sleep(1.0)
    cluster.start([leader], timeout=60)
    log(f'{cluster.names[leader]} back; leader now {cluster.names[cluster.leader(export.stream)]}')
    gen.wait_done(timeout=60)
    books, count = wait_records(cluster, export.stream, export.prefix, pid, go_ts, n, 60)
    delta = T.stats_delta(before, tpd.stats())
    finish(cluster, export, count)
    log(f'stream: {len(books.run)} records of the run, lost {books.lost}; kernel written {T.written(delta)}')
    books.check_unique()
    check(T.written(delta) == n, f'kernel stats say {T.written(delta)} written, expected {n}')
    check(books.lost_total == 0, f'lost records across the failover: {books.lost}')
    check(len(books.run) == n, f'{len(books.run)} records of the run in the stream, expected {n}')
    tpd.stop()


def check_losses(books, delta, n, what):
    """Delivered + lost = written, exactly, with export's own losses among them."""
    written = T.written(delta)
    log(f'stream: {len(books.run)} records of the run, {len(books.markers)} markers, lost {books.lost}; '
        f'kernel written {written}, kernel lost {T.kernel_lost(delta)}')
    books.check_unique()
    check(written == n, f'kernel stats say {written} written, expected {n}')
    delivered = len(books.run) + len(books.markers)
    check(delivered + books.lost_total == written,
          f'{len(books.run)} + {len(books.markers)} delivered + {books.lost_total} lost ({books.lost}) != {written} written')
    check(books.lost.get('export', 0) > 0, f'no "export" loss over {what}: {books.lost}')
    check(books.lost.get('overrun', 0) == T.kernel_lost(delta),
          f'overrun lost records say {books.lost.get("overrun", 0)}, the kernel {T.kernel_lost(delta)}')


def outage_run(ctx, cluster):
    n, rate, outage, markers = 1_000_000, 100_000, 5.0, 100
    log(f'--- outage: {n} getppid calls at {rate}/s, the whole cluster stopped for {outage} s, 1 MB buffer')
    tpd, gen, pid, export = start_run(ctx, cluster, 'tpdo', n, rate, '--create-stream', '--replicas', '3',
                                      '--buffer-size', '1')
    before = tpd.stats()
    go_ts = gen.go()
    time.sleep(1.0)
    cluster.stop()
    log('cluster stopped')
    time.sleep(outage)
    # A whole cluster coming back takes 2 to 25 s here before JetStream is healthy (meta and stream
    # leaders elected, replicas current), depending on the machine's load.
    cluster.start(timeout=60)
    log('cluster back')
    gen.wait_done(timeout=60)
    # Written once export caught up after the outage: they must arrive without anyone touching export.
    stable_count(cluster, export.stream, time.monotonic() + 60, 60)
    for i in range(markers):
        tpd.marker(f'tpdexport {i}')
    books, count = wait_records(cluster, export.stream, export.prefix, pid, go_ts, n + markers, 60)
    delta = T.stats_delta(before, tpd.stats())
    finish(cluster, export, count)
    check_losses(books, delta, n + markers, f'a {outage} s outage with a 1 MB buffer')
    check(books.markers == [f'tpdexport {i}' for i in range(markers)],
          f'markers written after the cluster came back: {len(books.markers)} arrived, expected {markers} '
          f'(export did not resume?)')
    tpd.stop()


def vm_kb(pid, key):
    m = re.search(rf'^{key}:\s+(\d+) kB', open(f'/proc/{pid}/status').read(), re.M)
    return int(m[1])


def sanitized():
    """An ASan build keeps freed memory in quarantine and shadows all of it: RSS says nothing there."""
    r = subprocess.run(['ldd', T.env_program('TPCTL')], capture_output=True, text=True)
    return 'libasan' in r.stdout or T.ASAN


def memory_run(ctx, cluster, prefix, batch_kb):
    n, rate, buffer_mb = 1_000_000, 100_000, 16
    bound_kb = (2 * buffer_mb + 16) * 1024
    log(f'--- memory: {n} getppid calls at {rate}/s with the cluster stopped, --buffer-size {buffer_mb}, '
        f'--batch-size {batch_kb}')
    tpd, gen, pid, export = start_run(ctx, cluster, prefix, n, rate, '--create-stream', '--replicas', '3',
                                      '--buffer-size', str(buffer_mb), '--batch-size', str(batch_kb))
    export_pid = export.proc.pid
    rss_live = vm_kb(export_pid, 'VmHWM')
    cluster.stop()
    log('cluster stopped')
    before = tpd.stats()
    go_ts = gen.go()
    gen.wait_done(timeout=60)
    # The buffer filled (the most export holds); what it reads after that is only counted.
    deadline = time.monotonic() + 30
    while 'counting records as lost' not in export.stderr_text():
        check(export.running(), f'tpctl export exited with {export.proc.returncode}: {export.stderr_text()}')
        check(time.monotonic() < deadline, f'export did not fill its buffer within 30 s: {export.stderr_text()}')
        time.sleep(0.2)
    time.sleep(2.0)
    hwm = vm_kb(export_pid, 'VmHWM')
    rss = vm_kb(export_pid, 'VmRSS')
    log(f'export RSS: VmHWM {rss_live} KiB while live, VmHWM {hwm} KiB and VmRSS {rss} KiB after {n} records '
        f'with the cluster stopped (bound {bound_kb} KiB)')
    if sanitized():
        log('sanitizer build: RSS not checked (quarantine and shadow memory)')
    else:
        check(hwm < bound_kb, f'export peak RSS {hwm} KiB with --buffer-size {buffer_mb}: not under {bound_kb} KiB')
    cluster.start(timeout=60)
    log('cluster back')
    books, count = wait_records(cluster, export.stream, export.prefix, pid, go_ts, n, 120)
    delta = T.stats_delta(before, tpd.stats())
    finish(cluster, export, count)
    check_losses(books, delta, n, f'{n} records with the cluster stopped')
    tpd.stop()


def memory_runs(ctx, cluster):
    memory_run(ctx, cluster, 'tpdm', 0)
    memory_run(ctx, cluster, 'tpdb', 64)


PASSWORD = 'tpd-Pw0rd/with:odd@chars'


def secrets_run(ctx, cluster):
    """A server that wants a password, given only in --servers-file: export connects, publishes, and
    the password is neither on its command line nor in anything it says, also when it fails."""
    log('--- secrets: servers with a password from --servers-file')
    auth = T.NatsCluster(ctx, 1)
    with open(auth.conf(0), 'a') as f:
        f.write(f'authorization {{ user: tpduser, password: "{PASSWORD}" }}\n')
    auth.start()
    port = auth.client_ports[0]
    url = f'nats://tpduser:{PASSWORD}@127.0.0.1:{port}'
    servers = os.path.join(ctx.tmpdir, 'nats-servers')
    with open(servers, 'w') as f:
        f.write(f'# the server of the test\n  {url}\n\n')
    os.chmod(servers, 0o600)

    tpd = ctx.tpd()
    gen = ctx.gen('GEN_GETPPID', '--count', 1, '--cpu', GEN_CPU)
    pid, = gen.pids()
    tpd.tpctl_ok('enable', EVENT, '--filter', f'common_pid == {pid}')
    argv = [T.env_program('TPCTL'), '--socket', tpd.socket, 'export', '--servers-file', servers,
            '--subject-prefix', 'tpds', '--create-stream', '--replicas', '1', '-e', EVENT]
    export = T.Process(ctx, 'export-tpds', argv, stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while 'exporting to' not in export.stderr_text():
        check(export.running(), f'tpctl export exited with {export.proc.returncode}: {export.stderr_text()}')
        check(time.monotonic() < deadline, f'export not exporting within 30 s: {export.stderr_text()}')
        time.sleep(0.1)
    cmdline = open(f'/proc/{export.proc.pid}/cmdline', 'rb').read()
    check(PASSWORD.encode() not in cmdline and b'--servers-file' in cmdline,
          f'export\'s command line: {cmdline!r}')
    check(f'at nats://…@127.0.0.1:{port} ' in export.stderr_text(),
          f'export does not name its server without the password: {export.stderr_text()!r}')
    for _ in range(3):
        gen.probe()
    deadline = time.monotonic() + 30
    while True:
        r = subprocess.run([T.env_program('NATS_CONSUME'), url, 'TPDS', 'count'], capture_output=True, timeout=60)
        check(r.returncode == 0, f'nats-consume: {r.stderr!r}')
        if int(r.stdout) > 0:
            break
        check(time.monotonic() < deadline, 'no message in TPDS within 30 s')
        time.sleep(0.2)
    # The server goes away and comes back: the messages about it name it without the password.
    auth.stop()
    time.sleep(1.0)
    auth.start()
    deadline = time.monotonic() + 30
    while 'reconnected to NATS' not in export.stderr_text():
        check(time.monotonic() < deadline, f'export did not reconnect within 30 s: {export.stderr_text()}')
        time.sleep(0.1)
    export.signal(signal.SIGTERM)
    check(export.wait(20) == 0, f'tpctl export exited with {export.proc.returncode}: {export.stderr_text()}')
    text = export.stderr_text()
    log('export: ' + text.strip().replace('\n', '\n        '))
    check(PASSWORD not in text and 'tpd-Pw0rd' not in text, f'the password is in export\'s messages: {text!r}')
    check(f'reconnected to NATS at nats://…@127.0.0.1:{port}' in text, f'no redacted reconnect message: {text!r}')

    # Failures: a wrong password, no server at all; the messages name the servers, never a password.
    def run(content):
        with open(servers, 'w') as f:
            f.write(content)
        return subprocess.run([T.env_program('TPCTL'), '--socket', tpd.socket, 'export', '--servers-file', servers],
                              capture_output=True, text=True, timeout=60)
    r = run(f'nats://tpduser:wrong-{PASSWORD}@127.0.0.1:{port}\n')
    check(r.returncode == 1 and 'cannot connect to NATS' in r.stderr and PASSWORD not in r.stderr and
          'wrong-' not in r.stderr and f'nats://…@127.0.0.1:{port}' in r.stderr,
          f'export with a wrong password: exit {r.returncode}, stderr {r.stderr!r}')
    free, = T.free_ports(1)
    r = run(f'tpduser:{PASSWORD}@127.0.0.1:{free}, nats://{PASSWORD}@127.0.0.1:{free}\n')
    check(r.returncode == 1 and 'cannot connect to NATS' in r.stderr and 'Pw0rd' not in r.stderr and
          f'…@127.0.0.1:{free}' in r.stderr, f'export to no server: exit {r.returncode}, stderr {r.stderr!r}')
    r = subprocess.run([T.env_program('TPCTL'), '--socket', os.path.join(ctx.tmpdir, 'none.sock'), 'export', url,
                        '--subject-prefix', 'tpds'], capture_output=True, text=True, timeout=60)
    check(r.returncode == 69 and 'user information is on the command line' in r.stderr and PASSWORD not in r.stderr,
          f'export with a password on its command line: exit {r.returncode}, stderr {r.stderr!r}')
    r = run('# nothing\n\n')
    check(r.returncode == 1 and 'names no server' in r.stderr, f'export with an empty servers file: exit '
          f'{r.returncode}, stderr {r.stderr!r}')
    r = subprocess.run([T.env_program('TPCTL'), 'export', '--servers-file', os.path.join(ctx.tmpdir, 'none')],
                       capture_output=True, text=True, timeout=30)
    check(r.returncode == 1 and 'cannot open the servers file' in r.stderr,
          f'export with a missing servers file: exit {r.returncode}, stderr {r.stderr!r}')
    r = subprocess.run([T.env_program('TPCTL'), 'export', url, '--servers-file', servers],
                       capture_output=True, text=True, timeout=30)
    check(r.returncode == 2 and PASSWORD not in r.stderr,
          f'export with servers twice: exit {r.returncode}, stderr {r.stderr!r}')
    auth.stop()
    tpd.stop()


def usage_errors(ctx, cluster):
    """Bad options exit 2; a missing stream is an error that says how to create it (exit 1)."""
    tpctl = T.env_program('TPCTL')

    def run(*args):
        return subprocess.run([tpctl, '--socket', os.path.join(ctx.tmpdir, 'none.sock'), 'export', *args],
                              capture_output=True, text=True, timeout=30)
    for args, what in (((cluster.urls, '--create-stream'), '--create-stream without --replicas'),
                       ((cluster.urls, '--replicas', '3'), '--replicas without --create-stream'),
                       ((cluster.urls, '--subject-prefix', 'a..b'), 'an empty subject token'),
                       ((cluster.urls, '--subject-prefix', 'a*'), 'a wildcard in the prefix'),
                       ((cluster.urls, '--buffer-size', '0'), '--buffer-size 0'),
                       ((cluster.urls, '--batch-size', '513'), '--batch-size above 512'),
                       ((cluster.urls, '--print'), '--print'),
                       ((), 'no server')):
        r = run(*args)
        check(r.returncode == 2, f'tpctl export with {what}: exit {r.returncode}, expected 2; {r.stderr.strip()!r}')
    r = run(cluster.urls, '--stream', 'TPDNONE')
    check(r.returncode == 1 and "stream 'TPDNONE' does not exist" in r.stderr and '--create-stream' in r.stderr,
          f'tpctl export to a missing stream: exit {r.returncode}, stderr {r.stderr.strip()!r}')
    port, = T.free_ports(1)
    r = run(f'nats://127.0.0.1:{port}')
    check(r.returncode == 1 and 'cannot connect to NATS' in r.stderr,
          f'tpctl export to no server: exit {r.returncode}, stderr {r.stderr.strip()!r}')


def main(ctx):
    cluster = T.NatsCluster(ctx, 3)
    if not os.environ.get('NATS_CONSUME'):
        raise T.TestSkip('$NATS_CONSUME is not set: run through meson')
    t0 = time.monotonic()
    cluster.start()
    log(f'3-node JetStream cluster healthy after {time.monotonic() - t0:.1f} s: {cluster.urls}')
    phases = os.environ.get('TPD_TEST_EXPORT_PHASES', 'usage,secrets,exact,failover,outage,memory').split(',')
    for name, run in (('usage', usage_errors), ('secrets', secrets_run), ('exact', exact_run),
                      ('failover', failover_run), ('outage', outage_run), ('memory', memory_runs)):
        if name in phases:
            run(ctx, cluster)
    cluster.stop()


if __name__ == '__main__':
    T.run(main)
