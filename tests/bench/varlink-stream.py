#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""A stream consumer in Python that speaks plain Varlink to tpd's socket (bench.py's tpd8py tracer).

    varlink-stream.py SOCKET EVENT...

Calls io.tpd.tracing.Stream with "upgrade", then counts the NDJSON records that follow, as any
client that knows nothing but the socket and the protocol would. At SIGTERM or SIGINT (or when tpd
ends the stream) it prints one JSON object on stdout: records, lost records, records lost by cause
and the latency of the first and last record of each read(). Exit status 1 if the call failed.

The Varlink call is tests/integration/tpdtest.py's, the counting bench.py's LineCounter: the same
code the benchmark's counting consumer and the integration tests use.
"""

import json
import os
import signal
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402
from bench import T  # noqa: E402


class Stop(Exception):
    pass


def _stop(signum, frame):
    raise Stop()


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__.split('\n\n')[1].strip())
    path, events = sys.argv[1], sys.argv[2:]
    stop = {signal.SIGTERM, signal.SIGINT}
    # Blocked while the reading thread starts, so that it inherits the mask: the signals then
    # interrupt the main thread's join() below, which sleeps without polling (bench.py waits for the
    # consumers' CPU time to stop growing before it stops them).
    signal.pthread_sigmask(signal.SIG_BLOCK, stop)
    for sig in stop:
        signal.signal(sig, _stop)
    v = T.Varlink(path, timeout=10)
    reply = v.call('io.tpd.tracing.Stream', {'events': events}, timeout=10, upgrade=True)
    if 'error' in reply:
        print(json.dumps({'error': reply}), flush=True)
        return 1
    # Back to a blocking socket: the counter reads the descriptor itself.
    v.sock.settimeout(None)
    counter = bench.LineCounter(v.sock.fileno(), every_line=False, initial=v.buf)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, stop)
    try:
        counter.thread.join()
    except Stop:
        pass
    print(json.dumps({'records': counter.records(), 'lost_records': counter.lost_records, 'lost': counter.lost,
                      'latency': bench.percentiles(counter.latency_ns), 'errors': counter.errors}), flush=True)
    return 0


if __name__ == '__main__':
    sys.exit(main())
