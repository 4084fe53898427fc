#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""A member of the access group records (docs/operating.md "Recording", docs/design.md §5 "Access"), with
real users: A in a group made for the test, tpd's access group.

1. Kernel addresses: A's raw `Record` frames, read over the socket as A, hold no kernel address
   (0xffff + 12 hex digits) in any FILE frame, and no printk_formats; root's hold printk_formats
   (with addresses: the check can see them). A's `tpctl record` file holds no such address and
   no kallsyms address, and `trace-cmd report` reads it. With `[Record] KernelAddresses=yes` A
   gets printk_formats too.
2. Repairs: while A records, `echo 0 > tracing_on` and a filter written behind tpd's back make
   tpd repair its instance and tell the recording in a NOTICE frame: tpctl warns on stderr, goes
   on and exits 0; `trace-cmd report` reads the file, and it holds every record the kernel wrote
   for the generators (the instance's per-CPU stats: those written while tracing was off or the
   filter was wrong never existed), exactly.
3. Memory: A's `tpctl record` of getppid is stopped (SIGSTOP) while 1,000 threads rename
   themselves and call getppid for 60 s (TPD_TEST_SCALE scales it): tpd's VmHWM stays under the
   bound docs/design.md §5 states (16 MiB + streams x (StreamQueueKB + 64 KiB)); beside it, root's stream
   of a paced generator gets every call; after SIGCONT the recording ends with exit 0 and its
   records + lost equal what the kernel wrote, exactly.
"""

import json
import os
import re
import signal
import subprocess
import time

import tpdtest as T
from tpdtest import check, fail, log

EVENT = 'syscalls:sys_enter_getppid'
SCALE = float(os.environ.get('TPD_TEST_SCALE', '1'))
ADDR_RE = re.compile(rb'0xffff[0-9a-f]{12}')
KALLSYMS_RE = re.compile(rb'(?m)^ffff[0-9a-f]{12} [A-Za-z] \S')
SUMMARY_RE = re.compile(r'tpctl: (\d+) records in (\d+) files?, (\d+) lost')
FRAME_FILE, FRAME_NOTICE = 2, 5
QUEUE_KB = 2048
CHUNK_KB = 64
FIXED_KB = 16 * 1024

# Reads a Record's reply and frames for a while, as whoever runs it; prints what it got as JSON.
RAW_RECORD = r'''
import json, socket, struct, sys, time
path, events, seconds = sys.argv[1], json.loads(sys.argv[2]), float(sys.argv[3])
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.settimeout(0.2)
s.connect(path)
s.sendall(json.dumps({'method': 'io.tpd.tracing.Record', 'parameters': {'events': events},
                      'upgrade': True}).encode() + b'\0')
buf, reply, files, types = b'', None, {}, {}
deadline = time.monotonic() + seconds
while time.monotonic() < deadline:
    try:
        chunk = s.recv(1 << 20)
    except socket.timeout:
        chunk = None
    if chunk == b'':
        break
    buf += chunk or b''
    if reply is None:
        if b'\0' not in buf:
            continue
        msg, _, buf = buf.partition(b'\0')
        reply = json.loads(msg)
        if 'error' in reply:
            break
    while len(buf) >= 16:
        t, n, cpu, arg = struct.unpack('=IIII', buf[:16])
        if len(buf) < 16 + n:
            break
        payload, buf = buf[16:16 + n], buf[16 + n:]
        types[t] = types.get(t, 0) + 1
        if t == 2:
            name, _, content = payload.partition(b'\0')
            files[name.decode()] = content.decode('latin-1')
print(json.dumps({'reply': reply, 'files': files, 'types': types}))
'''


def trace_cmd_report(path):
    r = subprocess.run(['trace-cmd', 'report', '-N', '-t', path],
                       capture_output=True, text=True, errors='replace', timeout=300)
    check(r.returncode == 0, f'trace-cmd report {path} exited with {r.returncode}: {r.stderr[:1000]!r}')
    return r.stdout


def main(ctx):
    with T.TestUsers(ctx, 'tpr', members=('A',)) as users:
        run(ctx, users)


def run(ctx, users):
    os.chmod(ctx.tmpdir, 0o711)
    out_dir = os.path.join(ctx.tmpdir, 'a')
    os.mkdir(out_dir, 0o700)
    os.chown(out_dir, users.uid['A'], users.primary['A'])
    script = os.path.join(ctx.tmpdir, 'raw-record.py')
    with open(script, 'w') as f:
        f.write(RAW_RECORD)
    os.chmod(script, 0o644)
    conf = os.path.join(ctx.tmpdir, 'tpd.conf')

    tpd = ctx.tpd(args=['--access-group', users.group, '--stream-queue-kb', str(QUEUE_KB)])

    def as_a(argv, timeout=60):
        return subprocess.run(users.setpriv('A') + argv, capture_output=True, text=True, timeout=timeout)

    def raw_record(member):
        argv = ['python3', script, tpd.socket, json.dumps([EVENT]), '1.5']
        r = as_a(argv) if member else subprocess.run(argv, capture_output=True, text=True, timeout=60)
        check(r.returncode == 0, f'raw Record exited {r.returncode}: {r.stderr[-2000:]!r}')
        got = json.loads(r.stdout)
        reply = got['reply']
        check(reply and 'error' not in reply, f'Record refused: {reply!r}')
        check(reply['parameters'].get('frames') == 1, f'Record reply names frames {reply["parameters"]!r}')
        check(got['files'], 'no FILE frames')
        return got

    def tpctl_record_as_a(out, *args, timeout=60):
        return as_a([T.env_program('TPCTL'), '--socket', tpd.socket, 'record', '-o', out, *args], timeout)

    # ------------------------------------------------------------------------------------------
    log('--- 1. kernel addresses')
    got = raw_record(member=True)
    files = got['files']
    log(f'member A got {len(files)} files: {sorted(files)}')
    check('printk_formats' not in files, 'a member got printk_formats')
    for name, text in files.items():
        m = ADDR_RE.search(text.encode('latin-1'))
        check(not m, f'FILE frame {name} sent to a member holds a kernel address: {m and m[0]!r}')
    check(f'events/{EVENT.replace(":", "/")}/format' in files, f'no format of {EVENT} in {sorted(files)}')
    root_got = raw_record(member=False)
    check('printk_formats' in root_got['files'], f'root got no printk_formats: {sorted(root_got["files"])}')
    check(ADDR_RE.search(root_got['files']['printk_formats'].encode('latin-1')),
          'root\'s printk_formats hold no address: the check cannot see one')

    member_dat = os.path.join(out_dir, 'member.dat')
    r = tpctl_record_as_a(member_dat, '-e', EVENT, '--duration', '1')
    check(r.returncode == 0, f'tpctl record as A exited {r.returncode}: {r.stderr!r}')
    data = open(member_dat, 'rb').read()
    m = ADDR_RE.search(data) or KALLSYMS_RE.search(data)
    check(not m, f'the member\'s capture holds a kernel address: {m and m[0]!r}')
    trace_cmd_report(member_dat)
    # What the kernel shows A of /proc/kallsyms: zeros (no CAP_SYSLOG) are left out of the file.
    first = as_a(['head', '-1', '/proc/kallsyms']).stdout
    if first.startswith('0' * 16):
        check(b' T _stext\n' not in data, 'the member\'s capture holds kallsyms of zeros')
    root_dat = os.path.join(ctx.tmpdir, 'root.dat')
    tpd.tpctl_ok('record', '-o', root_dat, '-e', EVENT, '--duration', '1')
    root_data = open(root_dat, 'rb').read()
    check(ADDR_RE.search(root_data) and KALLSYMS_RE.search(root_data),
          'root\'s capture holds no printk_formats or kallsyms address: the checks cannot see them')
    log(f'member capture {len(data)} bytes without kernel addresses; root\'s {len(root_data)} bytes with them')

    with open(conf, 'w') as f:
        f.write('[Record]\nKernelAddresses=yes\n')
    tpd.stop()
    tpd.start()
    got = raw_record(member=True)
    check('printk_formats' in got['files'], 'KernelAddresses=yes: the member got no printk_formats')
    os.unlink(conf)
    tpd.stop()
    tpd.start()

    # ------------------------------------------------------------------------------------------
    log('--- 2. repairs behind tpd\'s back during a member\'s recording')
    n = int(20_000 * SCALE)
    gens = [ctx.gen('GEN_GETPPID', '--count', n, '--rate', 20_000) for _ in range(4)]
    pids = [g.pids()[0] for g in gens]
    flt = ' || '.join(f'common_pid == {p}' for p in pids)
    tpd.tpctl_ok('enable', EVENT, '--filter', flt)
    out = os.path.join(out_dir, 'repairs.dat')
    rec = start_recording(ctx, tpd, users, out)
    before = tpd.stats()
    inst = tpd.instance_dir
    filter_path = os.path.join(inst, 'events', *EVENT.split(':'), 'filter')

    gens[0].go()
    gens[0].wait_done(60)
    T.write_text(os.path.join(inst, 'tracing_on'), '0')
    gens[1].go()          # while tracing is off (until tpd puts it back): not written
    gens[1].wait_done(60)
    wait_for(lambda: T.read_text(os.path.join(inst, 'tracing_on')).strip() == '1', 10, 'tpd to set tracing_on back')
    gens[2].go()
    gens[2].wait_done(60)
    T.write_text(filter_path, 'common_pid == 1')
    gens[3].go()          # while the filter is wrong (until tpd puts it back): not written
    gens[3].wait_done(60)
    wait_for(lambda: T.read_text(filter_path).strip() != 'common_pid == 1', 10, 'tpd to set the filter back')
    after = tpd.stats()
    time.sleep(0.3)
    rec.signal(signal.SIGINT)
    rc = rec.wait(60)
    err = rec.stderr_text()
    check(rc == 0, f'the member\'s recording exited {rc} through the repairs: {err!r}')
    check(err.count('tpd notice instance-changed') >= 2, f'tpctl did not warn of two repairs: {err!r}')
    check('tracing_on' in err and 'filter' in err, f'the warnings do not say what was repaired: {err!r}')
    m = SUMMARY_RE.search(err)
    check(m, f'no summary from tpctl record: {err!r}')
    recorded, lost = int(m[1]), int(m[3])
    written = T.written(after) - T.written(before)
    report = trace_cmd_report(out)
    calls = sum(1 for line in report.splitlines() if 'sys_enter_getppid' in line)
    log(f'recording through 2 repairs: {recorded} records, {lost} lost, kernel wrote {written}, '
        f'trace-cmd report lists {calls}; generators made {4 * n} calls')
    check(lost == 0 and T.kernel_lost(T.stats_delta(before, after)) == 0, f'{lost} lost')
    check(recorded == written == calls, f'recorded {recorded}, report {calls}, kernel wrote {written}')
    check(2 * n <= written < 4 * n, f'kernel wrote {written}: not the 2 runs with tracing on '
                                    f'({2 * n}) and parts of the others')
    tpd.tpctl_ok('disable', EVENT)

    # ------------------------------------------------------------------------------------------
    seconds = max(5, int(60 * SCALE))
    log(f'--- 3. a stopped recording and 1,000 self-renaming threads for {seconds} s')
    good_n = int(2000 * seconds)
    good = ctx.gen('GEN_GETPPID', '--count', good_n, '--rate', 2000)
    good_pid = good.pids()[0]
    rename = ctx.gen('GEN_RENAME', '--threads', 1000, '--seconds', seconds, '--rate', 50_000)
    _, lo, hi = rename.pids()
    # The instance writes only the generators' records: its stats count what the recording selects.
    tpd.tpctl_ok('enable', EVENT, '--filter',
                 f'(common_pid >= {lo} && common_pid <= {hi}) || common_pid == {good_pid}')
    out = os.path.join(out_dir, 'stopped.dat')
    rec = start_recording(ctx, tpd, users, out)
    rec_before = tpd.stats()
    # Over the socket: the bound below counts queues (a shared-memory ring would add its own).
    stream = tpd.stream('--transport=socket', '-e', EVENT, '-p', str(good_pid))
    T.confirm_live([stream], good.probe)
    rec.signal(signal.SIGSTOP)
    before = tpd.stats()
    stream.poll()
    probes_seen = stream.nlines
    tpd_pid = tpd.process.pid
    go_ts = good.go()
    rename.go()
    peak = T.vm_kb(tpd_pid, 'VmRSS')
    deadline = time.monotonic() + seconds + 30
    while rename.running() and time.monotonic() < deadline:
        peak = max(peak, T.vm_kb(tpd_pid, 'VmRSS'))
        stream.poll()
        time.sleep(0.5)
    calls = rename.wait_done(30)[1]
    good.wait_done(60)
    time.sleep(1)
    after = tpd.stats()
    hwm = T.vm_kb(tpd_pid, 'VmHWM')
    bound = FIXED_KB + 2 * (QUEUE_KB + CHUNK_KB)
    log(f'{calls} renaming calls; tpd VmRSS peak sampled {peak} KiB, VmHWM {hwm} KiB; bound {bound} KiB '
        f'(2 streams x ({QUEUE_KB} + {CHUNK_KB}) KiB + {FIXED_KB} KiB)')
    if T.ASAN:
        log('sanitizer build: RSS not checked (quarantine and shadow memory)')
    else:
        check(hwm <= bound, f'tpd peak RSS {hwm} KiB exceeds the documented bound {bound} KiB')

    kernel_lost = T.kernel_lost(T.stats_delta(before, after))
    stream.drain(lambda: False, timeout=3, quiet=1.0)
    delivered = lost_client = lost_other = 0
    for line in stream.lines[probes_seen:]:
        rec_ = T.parse_record(line)
        if 'lost' in rec_:
            if rec_['cause'] == 'client':
                lost_client += rec_['lost']
            else:
                lost_other += rec_['lost']
        elif 'notice' not in rec_ and rec_['ts'] >= go_ts:
            delivered += 1
    stream.stop()
    log(f'root\'s stream: {delivered} of {good_n} delivered, {lost_client} client, {lost_other} other; '
        f'the kernel lost {kernel_lost}')
    check(lost_client == 0, f'the well-behaved stream lost {lost_client} to its queue')
    if kernel_lost == 0:
        check(delivered == good_n and lost_other == 0, f'the well-behaved stream got {delivered} of {good_n}')
    else:
        log('the kernel overwrote records (a busy machine): bounds only')
        check(delivered + lost_other >= good_n, f'{delivered} + {lost_other} < {good_n}')

    rec.signal(signal.SIGCONT)
    time.sleep(1)
    rec_after = tpd.stats()
    rec.signal(signal.SIGINT)
    rc = rec.wait(120)
    err = rec.stderr_text()
    check(rc == 0, f'the stopped recording exited {rc}: {err!r}')
    m = SUMMARY_RE.search(err)
    check(m, f'no summary from tpctl record: {err!r}')
    recorded, lost = int(m[1]), int(m[3])
    written = T.written(rec_after) - T.written(rec_before)
    log(f'stopped recording: {recorded} records + {lost} lost = {recorded + lost}; kernel wrote {written}')
    check(lost > 0, 'stopped through the storm, yet nothing lost')
    check(recorded + lost == written, f'recorded {recorded} + lost {lost} != {written} written')
    trace_cmd_report(out)
    tpd.stop()


def wait_for(pred, timeout, what):
    deadline = time.monotonic() + timeout
    while not pred():
        check(time.monotonic() < deadline, f'timeout ({timeout} s) waiting for {what}')
        time.sleep(0.05)


def start_recording(ctx, tpd, users, out, timeout=10.0):
    """`tpctl record -o OUT -e EVENT` as A, once tpd lists it (a connection of A streaming)."""
    rec = T.Process(ctx, f'record-{len(ctx._processes)}',
                    users.setpriv('A') + [T.env_program('TPCTL'), '--socket', tpd.socket, 'record', '-o', out,
                                          '-e', EVENT], stdout=subprocess.DEVNULL)

    def live():
        check(rec.running(), f'tpctl record exited {rec.proc.returncode}: {rec.stderr_text()!r}')
        st = tpd.call('io.tpd.tracing.GetStatus')['parameters']
        return any(c['uid'] == users.uid['A'] and c['streaming'] for c in st['connections'])
    wait_for(live, timeout, 'the recording to start')
    return rec


if __name__ == '__main__':
    T.run(main)
