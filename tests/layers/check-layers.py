#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""The walls the build enforces, checked on the built tree.

Layers, lowest first: base (include/: protocol, util.h, Varlink framing), pure (decode, encode,
filter, names, config, stream, queue: no I/O, no event loop), engine (tracefs control, readers,
comm, state), glue (manager, server, peer, api, main). tpctl (client/) stands on base and pure
(replay decodes captures with tpd's own decoder).

- Every `#include "…"` of a file goes to its own layer or a lower one; client/ includes base, pure
  and client/ headers only. A header belongs to the layer of the library that compiles its .c file.
- No include cycle among the daemon's modules (a module is NAME.c with NAME.h).
- The pure library is compiled against libtraceevent and json-c only (its -I flags name no other
  package), and references no symbol of libtracefs, libsystemd or tpd's engine and glue.
- Unit tests and fuzz targets link the pure library alone: they define no symbol of the engine or
  the glue and need no libtracefs or libsystemd.
Usage: check-layers.py SOURCE_ROOT BUILD_ROOT
"""

import json
import os
import re
import subprocess
import sys

LAYERS = ['base', 'pure', 'engine', 'glue']
LIBRARIES = {'tpd-varlink': 'base', 'tpd-pure': 'pure', 'tpd-engine': 'engine', 'tpd-glue': 'glue'}
FOREIGN_PACKAGES = ('tracefs', 'systemd')
failures = []


def fail(msg):
    failures.append(msg)
    print('FAIL: ' + msg, flush=True)


def includes(path):
    with open(path, errors='replace') as f:
        return re.findall(r'^\s*#\s*include\s+"([^"]+)"', f.read(), re.M)


def defined_symbols(path):
    out = subprocess.run(['nm', '--defined-only', '-g', path], capture_output=True, text=True).stdout
    return {l.split()[-1] for l in out.splitlines() if len(l.split()) >= 3 and l.split()[1] in 'TDBR'}


def undefined_symbols(path):
    out = subprocess.run(['nm', '-u', path], capture_output=True, text=True).stdout
    return {l.split()[-1] for l in out.splitlines() if l.strip()}


def main(src, build):
    with open(os.path.join(build, 'meson-info', 'intro-targets.json')) as f:
        targets = json.load(f)
    by_name = {t['name']: t for t in targets}

    layer_of = {}   # relative source path -> layer
    for name, layer in LIBRARIES.items():
        t = by_name.get(name)
        if not t:
            fail(f'no library {name} in the build')
            continue
        for s in t['target_sources']:
            for f in s['sources']:
                rel = os.path.relpath(f, src)
                if not rel.startswith('..') and rel.endswith('.c'):
                    layer_of[rel] = layer
    for rel in ('daemon/main.c',):
        layer_of[rel] = 'glue'
    # Headers of include/ are base; a daemon header takes its .c file's layer.
    header_layer = {}
    for d in ('include', 'daemon'):
        for f in os.listdir(os.path.join(src, d)):
            if f.endswith('.h'):
                rel = f'{d}/{f}'
                c = rel[:-2] + '.c'
                # A header without a .c (ratelimit.h) holds inline code of the pure kind.
                header_layer[f] = 'base' if d == 'include' else layer_of.get(c, None if os.path.exists(
                    os.path.join(src, c)) else 'pure')
    header_layer['build-config.h'] = 'base'

    # 1. Includes go down or sideways.
    for d in ('include', 'daemon', 'client'):
        for f in sorted(os.listdir(os.path.join(src, d))):
            if not f.endswith(('.c', '.h')):
                continue
            rel = f'{d}/{f}'
            mine = 'client' if d == 'client' else layer_of.get(rel) or layer_of.get(rel[:-2] + '.c') \
                or ('base' if d == 'include' else header_layer.get(f))
            if mine is None:
                fail(f'{rel} belongs to no layer (no library compiles it)')
                continue
            for inc in includes(os.path.join(src, rel)):
                if d == 'client':
                    if os.path.exists(os.path.join(src, 'client', inc)) or header_layer.get(inc) in ('base', 'pure'):
                        continue
                    fail(f'{rel} (client) includes "{inc}", which is not in include/, the pure layer or client/')
                    continue
                theirs = header_layer.get(inc)
                if theirs is None:
                    fail(f'{rel} includes "{inc}", which belongs to no layer')
                elif LAYERS.index(theirs) > LAYERS.index(mine):
                    fail(f'{rel} ({mine}) includes "{inc}" ({theirs}): arrows go down only')

    # 2. No include cycle among daemon modules.
    graph = {}
    for f in os.listdir(os.path.join(src, 'daemon')):
        if f.endswith(('.c', '.h')):
            mod = f[:-2]
            for inc in includes(os.path.join(src, 'daemon', f)):
                if os.path.exists(os.path.join(src, 'daemon', inc)) and inc[:-2] != mod:
                    graph.setdefault(mod, set()).add(inc[:-2])
    state = {}

    def visit(m, stack):
        state[m] = 'open'
        for n in sorted(graph.get(m, ())):
            if state.get(n) == 'open':
                fail('include cycle: ' + ' -> '.join(stack[stack.index(n):] + [n]))
            elif n not in state:
                visit(n, stack + [n])
        state[m] = 'done'
    for m in sorted(graph):
        if m not in state:
            visit(m, [m])

    # 3. The pure library's packages and symbols.
    pure = by_name.get('tpd-pure')
    engine_glue_syms = set()
    for name in ('tpd-engine', 'tpd-glue'):
        if name in by_name:
            engine_glue_syms |= defined_symbols(by_name[name]['filename'][0])
    if pure:
        for s in pure['target_sources']:
            for p in s['parameters']:
                if p.startswith('-I/usr') and any(pkg in p for pkg in FOREIGN_PACKAGES):
                    fail(f'the pure library is compiled with {p}')
        undef = undefined_symbols(pure['filename'][0])
        bad = sorted(s for s in undef if s.startswith(('tracefs_', 'sd_')) or s in engine_glue_syms)
        if bad:
            fail(f'the pure library references {bad[:10]}')

    # 4. Unit tests and fuzz targets link the pure library alone.
    n_checked = 0
    for t in targets:
        if t['type'] != 'executable' or not t['defined_in'].startswith(os.path.join(src, 'tests', '')):
            continue
        if not re.search(r'tests/(unit|fuzz)/', t['defined_in']):
            continue
        exe = t['filename'][0]
        if not os.path.exists(exe):
            fail(f'{exe} is not built')
            continue
        n_checked += 1
        leaked = sorted(defined_symbols(exe) & engine_glue_syms)
        if leaked:
            fail(f'{t["name"]} links engine or glue code: {leaked[:8]}')
        needed = subprocess.run(['readelf', '-d', exe], capture_output=True, text=True).stdout
        for pkg in ('libtracefs', 'libsystemd'):
            if pkg in needed:
                fail(f'{t["name"]} needs {pkg}')
    if n_checked == 0:
        fail('no unit or fuzz executable found to check')

    print(f'{len(layer_of)} sources in {len(LAYERS)} layers, {n_checked} test executables checked, '
          f'{len(failures)} failures')
    return 1 if failures else 0


if __name__ == '__main__':
    sys.exit(main(os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])))
