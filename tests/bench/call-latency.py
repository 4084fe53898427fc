#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""How long one call keeps tpd's loop busy: Enable with 4096 `*:*`, with 4096 distinct globs, with
4096 unknown names, ListEvents, DescribeEvent of unknown names. Prints the reply time of each
(median of a few runs). Needs root; run from the build tree:

    TPD=build/daemon/tpd TPCTL=build/client/tpctl python3 tests/bench/call-latency.py
"""

import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), '..', 'integration'))
import tpdtest as T  # noqa: E402


def timed(v, method, params, timeout=300):
    t0 = time.monotonic()
    reply = v.call(method, params, timeout=timeout)
    return time.monotonic() - t0, reply.get('error', 'ok')


def main(ctx):
    tpd = ctx.tpd()
    events = [e['name'] for e in tpd.call('io.tpd.tracing.ListEvents')['parameters']['events']]
    systems = sorted({e.split(':')[0] for e in events})
    # Distinct globs that all match nearly every event: nothing fails early.
    chars = 'abcdefghijklmnopqrstuvwxyz0123456789_'
    distinct = [f'*[!{a}]:[!{b}]*' for a in chars for b in chars]
    distinct += [f'*[!{a}]:*[!{b}]' for a in chars for b in chars]
    distinct += [f'[!{a}]*:[!{b}]*' for a in chars for b in chars]
    cases = {
        'Enable 4096 distinct globs': ('io.tpd.tracing.Enable', {'events': distinct[:4096]}),
        'Enable 64 distinct globs': ('io.tpd.tracing.Enable', {'events': distinct[:64]}),
        'Enable 4096 unknown names': ('io.tpd.tracing.Enable',
                                      {'events': [f'n:e{i}' for i in range(4096)]}),
        'Enable 4096 system globs': ('io.tpd.tracing.Enable',
                                     {'events': [f'{systems[i % len(systems)]}:*' for i in range(4096)]}),
        'ListEvents *:*': ('io.tpd.tracing.ListEvents', {'pattern': '*:*'}),
        'ListEvents': ('io.tpd.tracing.ListEvents', {}),
        'Enable 4096 x *:*': ('io.tpd.tracing.Enable', {'events': ['*:*'] * 4096}),
        'DescribeEvent unknown': ('io.tpd.tracing.DescribeEvent', {'event': 'nosuch:event'}),
    }
    runs = int(os.environ.get('RUNS', '3'))
    with tpd.varlink(timeout=300) as v:
        for name, (method, params) in cases.items():
            times = []
            for _ in range(runs):
                dt, what = timed(v, method, params)
                times.append(dt)
            print(f'{name:32} {statistics.median(times) * 1000:10.1f} ms  ({what})', flush=True)
    tpd.tpctl('disable', '--all')


T.run(main)
