#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""`tpctl metrics`: tpd's counters for Prometheus.

After a known load (numbered trace_marker writes read by one stream, the writer stopped so that the
counters stand still), `tpctl metrics` is taken between two GetStatus calls that agree, and:

- `promtool check metrics` accepts it (exit 0, no complaint);
- every family has HELP and TYPE, counters' samples end in _total;
- its numbers equal GetStatus': delivered, lost by cause, undecoded pages, every per-CPU kernel
  counter, connections and streams by uid, events; and delivered equals the records the stream got;
- `--openmetrics` gives the same samples in OpenMetrics 1.0 (family names without _total, # EOF),
  which prometheus_client's strict OpenMetrics parser reads;
- where node_exporter is installed, its textfile collector serves the file without an error;
- `metrics --json=short` gives the same samples as JSON objects; with --openmetrics it is a usage
  error (2); with no tpd, exit 69.
"""

import json
import os
import re
import shutil
import socket
import subprocess
import time
import urllib.request

import tpdtest as T
from tpdtest import check, fail, log

MARKERS = 20000
SAMPLE_RE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$')
LABEL_RE = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse(text):
    """{(name, frozenset(labels)): value} and {family: type}; checks HELP/TYPE before samples."""
    samples, types, helps = {}, {}, set()
    for line in text.splitlines():
        if line.startswith('# HELP '):
            helps.add(line.split()[2])
        elif line.startswith('# TYPE '):
            _, _, name, typ = line.split()
            types[name] = typ
        elif line.startswith('#'):
            check(line == '# EOF', f'unexpected comment line {line!r}')
        else:
            m = SAMPLE_RE.match(line)
            check(m, f'not a sample line: {line!r}')
            name, labels, value = m.groups()
            key = (name, frozenset(LABEL_RE.findall(labels or '')))
            check(key not in samples, f'sample repeated: {line!r}')
            samples[key] = float(value)
    return samples, types, helps


def status_counters(st):
    """What must not move between two GetStatus calls for the metrics taken between them."""
    return json.dumps({k: st[k] for k in ('cpus', 'delivered', 'lost', 'events', 'streams', 'state_saves')},
                      sort_keys=True)


def node_exporter_textfile(ctx, r_text, delivered):
    """Where node_exporter is installed (Debian: prometheus-node-exporter), its textfile collector
    reads the file as written by the recipe of docs/operating.md and serves tpd's samples without an error."""
    exporter = shutil.which('prometheus-node-exporter') or shutil.which('node_exporter')
    if not exporter:
        log('node_exporter is not installed: the textfile collector check is not run')
        return
    textdir = os.path.join(ctx.tmpdir, 'textfile')
    os.mkdir(textdir)
    with open(os.path.join(textdir, 'tpd.prom.tmp'), 'w') as f:
        f.write(r_text)
    os.rename(os.path.join(textdir, 'tpd.prom.tmp'), os.path.join(textdir, 'tpd.prom'))
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        port = s.getsockname()[1]
    p = T.Process(ctx, 'node-exporter', [exporter, '--collector.disable-defaults', '--collector.textfile',
                                         f'--collector.textfile.directory={textdir}',
                                         f'--web.listen-address=127.0.0.1:{port}'], stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while True:
        try:
            with urllib.request.urlopen(f'http://127.0.0.1:{port}/metrics', timeout=2) as resp:
                scraped = resp.read().decode()
            break
        except OSError as e:
            check(p.running() and time.monotonic() < deadline, f'node_exporter did not serve: {e}; '
                                                               f'{p.stderr_text()!r}')
            time.sleep(0.1)
    p.kill()
    check('node_textfile_scrape_error 0' in scraped, 'node_exporter could not read the textfile: ' +
          ' '.join(l for l in scraped.splitlines() if 'textfile' in l))
    check(f'tpd_delivered_total {delivered}' in scraped.splitlines(),
          f'node_exporter does not serve tpd_delivered_total {delivered}')
    check('# TYPE tpd_lost_total counter' in scraped.splitlines(), 'node_exporter lost the counter type')
    log(f'node_exporter ({exporter}) serves the textfile: tpd_delivered_total {delivered}')


def main(ctx):
    promtool = shutil.which('promtool')
    if not promtool:
        fail('promtool (Debian package prometheus) is missing: .ci/deps installs it')
    tpd = ctx.tpd()
    tag = f'tpdmetrics-{ctx.rand}'
    stream = tpd.stream()
    T.confirm_live([stream], lambda: tpd.marker('tpdtest-probe'))
    # The books start once the stream is live: a probe written before tpd had the stream was
    # drained with nobody to deliver it to.
    stream.drain(lambda: True, timeout=5)
    st0 = tpd.call('io.tpd.tracing.GetStatus')['parameters']
    gen = ctx.gen('GEN_MARKER', '--instance', tpd.instance, '--count', MARKERS, '--rate', 50000, tag)
    gen.pids()
    gen.wait_done(timeout=60)
    stream.drain(lambda: sum(tag.encode() in l for l in stream.lines) >= MARKERS, timeout=60)
    records = [T.parse_record(l) for l in stream.lines]
    lost_lines = [r for r in records if 'lost' in r]
    got = sum(1 for r in records if 'lost' not in r and tag in r['fields'].get('buf', ''))
    log(f'stream got {got} of {MARKERS} markers, {len(records)} lines, lost records {lost_lines}')
    check(got + sum(r['lost'] for r in lost_lines) == MARKERS, f'{got} markers + lost != {MARKERS}')

    # Metrics between two statuses that agree: nothing moved meanwhile.
    for attempt in range(20):
        before = tpd.call('io.tpd.tracing.GetStatus')['parameters']
        r = tpd.tpctl('metrics')
        om = tpd.tpctl('metrics', '--openmetrics')
        after = tpd.call('io.tpd.tracing.GetStatus')['parameters']
        check(r.returncode == 0 and om.returncode == 0, f'tpctl metrics: {r.returncode} {r.stderr!r} {om.stderr!r}')
        if status_counters(before) == status_counters(after):
            break
        time.sleep(0.2)
    else:
        fail('GetStatus never stood still around tpctl metrics')
    st = after

    r_prom = r.stdout
    p = subprocess.run([promtool, 'check', 'metrics'], input=r.stdout, capture_output=True, text=True)
    check(p.returncode == 0 and not p.stdout.strip() and not p.stderr.strip(),
          f'promtool check metrics: exit {p.returncode}: {p.stdout}{p.stderr}')
    log('promtool check metrics: accepted')

    samples, types, helps = parse(r.stdout)
    check(not r.stdout.rstrip().endswith('# EOF'), 'the Prometheus format ends with # EOF')
    for name, typ in types.items():
        check(name in helps, f'{name} has no HELP')
        check((typ == 'counter') == name.endswith('_total'), f'{typ} {name}: counters and only they end in _total')
    for name, _ in samples:
        check(name in types, f'sample {name} has no TYPE')

    def value(name, **labels):
        key = (name, frozenset(labels.items()))
        check(key in samples, f'no sample {name}{labels}')
        return samples[key]

    check(value('tpd_delivered_total') == st['delivered'], f'delivered {value("tpd_delivered_total")} != {st["delivered"]}')
    check(st['delivered'] == len(records) - len(lost_lines),
          f'GetStatus delivered {st["delivered"]}, the stream got {len(records) - len(lost_lines)} records')
    for cause in ('overrun', 'client', 'unknown', 'dropped'):
        check(value('tpd_lost_total', cause=cause) == st['lost'][cause], f'lost {cause} differs')
    check(st['lost']['dropped'] == sum(c['dropped'] for c in st['cpus']),
          f'GetStatus lost.dropped {st["lost"]["dropped"]} is not the sum of the CPUs\' {st["cpus"]}')
    check(value('tpd_undecoded_pages_total') == st['lost']['decode_pages'], 'undecoded pages differ')
    for c in st['cpus']:
        cpu = str(c['cpu'])
        check(value('tpd_cpu_online', cpu=cpu) == int(c['online']), f'cpu {cpu} online differs')
        check(value('tpd_kernel_entries', cpu=cpu) == c['entries'], f'cpu {cpu} entries differ')
        for key in ('written', 'read', 'overrun', 'dropped'):
            check(value(f'tpd_kernel_{key}_total', cpu=cpu) == c[key], f'cpu {cpu} {key} differs')
    written = sum(c['written'] for c in st['cpus']) - sum(c['written'] for c in st0['cpus'])
    # One stream of everything: every record the kernel wrote since it was live was delivered or
    # counted lost.
    lost_total = sum(st['lost'][k] - st0['lost'][k] for k in ('overrun', 'client', 'unknown'))
    delivered = st['delivered'] - st0['delivered']
    check(written == delivered + lost_total and written >= MARKERS,
          f'kernel written {written} != delivered {delivered} + lost {lost_total} since the stream was live')
    # The stream's connection and the caller's (tpctl metrics then, GetStatus now): both root's.
    check(value('tpd_connections', uid='0') == len(st['connections']) == 2,
          f'connections: {value("tpd_connections", uid="0")} vs {st["connections"]}')
    check(value('tpd_streams', uid='0') == st['streams'] == 1, 'streams differ')
    check(value('tpd_records_total') == st['records'] == st['delivered'],
          f'records: {value("tpd_records_total")}, GetStatus {st["records"]}, delivered {st["delivered"]}')
    conn = [c for c in st['connections'] if c['streaming']]
    check(len(conn) == 1 and conn[0]['pid'] == stream.pid, f'the stream\'s connection: {st["connections"]}')
    check(value('tpd_stream_delivered_total', uid='0', pid=str(stream.pid)) == conn[0]['delivered'] == st['delivered'],
          f'stream delivered: {conn[0]}')
    check(value('tpd_stream_lost_total', uid='0', pid=str(stream.pid), cause='client') == conn[0]['lost_client'],
          f'stream lost: {conn[0]}')
    check(value('tpd_events_enabled') == len(st['events']), 'events differ')
    check(value('tpd_info', version=st['version'], instance=tpd.instance, clock='boot') == 1, 'tpd_info')
    check(value('tpd_buffer_size_bytes') == st['buffer_size_kb'] * 1024, 'buffer size differs')
    check(value('tpd_state_saves_total') == st['state_saves'], 'state saves differ')
    # The loop's account moves with every call: the metrics' lies between the two statuses'.
    loop_max = round(value('tpd_loop_dispatch_max_seconds') * 1e6)
    check(before['loop']['max_usec'] <= loop_max <= after['loop']['max_usec'] and loop_max > 0,
          f'loop max {loop_max} us outside {before["loop"]["max_usec"]}..{after["loop"]["max_usec"]}')
    check(before['loop']['slow'] <= value('tpd_loop_slow_dispatches_total') <= after['loop']['slow'],
          f'slow dispatches {value("tpd_loop_slow_dispatches_total")} outside {before["loop"]} .. {after["loop"]}')
    log(f'metrics equal GetStatus: delivered {st["delivered"]}, written {written}, lost {st["lost"]}')

    # OpenMetrics: the same samples, families named without _total, # EOF last.
    check(om.stdout.endswith('# EOF\n'), f'--openmetrics does not end with # EOF: {om.stdout[-100:]!r}')
    om_samples, om_types, _ = parse(om.stdout)
    check(om_samples == samples, 'the OpenMetrics samples differ from the Prometheus ones')
    check(om_types.get('tpd_delivered') == 'counter' and 'tpd_delivered_total' not in om_types,
          f'OpenMetrics counter family names: {sorted(om_types)}')
    parser = ('import sys\n'
              'from prometheus_client.openmetrics.parser import text_string_to_metric_families as p\n'
              'print(sum(len(f.samples) for f in p(sys.stdin.read())))\n')
    p = subprocess.run(['/usr/bin/python3', '-c', parser], input=om.stdout, capture_output=True, text=True)
    check(p.returncode == 0 and int(p.stdout) == len(samples),
          f'prometheus_client rejects the OpenMetrics output (python3-prometheus-client): {p.stderr[-500:]}')
    log('prometheus_client parsed the OpenMetrics output')

    # --json: the same samples as objects (counters stood still: compare with the text taken above).
    r = tpd.tpctl('metrics', '--json=short')
    check(r.returncode == 0 and r.stdout.count('\n') == 1, f'metrics --json=short: {r.returncode} {r.stderr!r}')
    as_json = {(o['name'], frozenset(o['labels'].items())): float(o['value']) for o in json.loads(r.stdout)}
    check(as_json == samples, 'metrics --json differs from the text samples')
    r = tpd.tpctl('metrics', '--json', '--openmetrics')
    check(r.returncode == 2 and 'exclude' in r.stderr, f'metrics --json --openmetrics: {r.returncode} {r.stderr!r}')
    node_exporter_textfile(ctx, r_text=r_prom, delivered=st['delivered'])

    r = tpd.tpctl('--socket', os.path.join(ctx.tmpdir, 'none.sock'), 'metrics')
    check(r.returncode == 69 and not r.stdout, f'metrics without tpd: {r.returncode} {r.stdout!r}')

    stream.stop()
    tpd.stop()


if __name__ == '__main__':
    T.run(main)
