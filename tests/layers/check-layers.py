#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""The walls the build enforces, checked on the built tree: a folder is a layer.

Layers, lowest first:
- include/  base: the protocol, util.h, Varlink framing (library tpd-varlink);
- core/     core: what tpd and tpctl share to read records (library tpd-core): pages, decoder,
            encoder, filters, names, clocks, streams, queues, counters;
- daemon/   tpd, itself in three libraries, lowest first: tpd-daemon-base (settings, state, CPUs,
            log), tpd-engine (tracefs, readers, comm), tpd-glue (manager, server, peers, API);
- client/   tpctl.
daemon/ and client/ stand side by side on core/ and include/: neither includes or links the other.

Checks:
1. Every `#include "…"` goes to the file's own folder or a lower layer, and a header of another
   folder is named with its folder ("core/stream.h"); include/ headers are named bare. Inside
   daemon/, a file includes only headers of its own library or a lower one.
2. No include cycle among modules anywhere (a module is FOLDER/NAME, its .c and .h together).
3. The core library is compiled against libtraceevent and json-c only (no -I of another package)
   and references no symbol of libtracefs, libsystemd, daemon/ or client/.
4. tpctl (and the replay library it shares with the capture fuzzer) defines no symbol of a daemon/
   library and compiles no daemon/ source.
5. Unit tests and fuzz targets link no engine or glue code and need no libtracefs or libsystemd.
Usage: check-layers.py SOURCE_ROOT BUILD_ROOT
"""

import json
import os
import re
import subprocess
import sys

FOLDERS = {'include': 0, 'core': 1, 'daemon': 2, 'client': 2}   # rank; equal ranks are siblings
DAEMON_LIBRARIES = ['tpd-daemon-base', 'tpd-engine', 'tpd-glue']  # lowest first
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


def sources_of(target, src):
    out = []
    for s in target['target_sources']:
        for f in s['sources']:
            rel = os.path.relpath(f, src)
            if not rel.startswith('..'):
                out.append(rel)
    return out


def resolve(src, folder, inc):
    """The file an include names, as FOLDER/NAME, or None when it is no file of the tree."""
    if '/' in inc:
        return inc if os.path.exists(os.path.join(src, inc)) else None
    if inc == 'build-config.h':
        return 'include/build-config.h'
    for d in (folder, 'include'):
        if os.path.exists(os.path.join(src, d, inc)):
            return f'{d}/{inc}'
    return None


def main(src, build):
    with open(os.path.join(build, 'meson-info', 'intro-targets.json')) as f:
        targets = json.load(f)
    by_name = {t['name']: t for t in targets}
    for name in ['tpd-varlink', 'tpd-core', 'tpctl', 'tpctl-replay'] + DAEMON_LIBRARIES:
        if name not in by_name:
            fail(f'no target {name} in the build')
    if failures:
        return 1

    # Inside daemon/, each source's library rank.
    daemon_rank = {}
    for i, name in enumerate(DAEMON_LIBRARIES):
        for rel in sources_of(by_name[name], src):
            if rel.startswith('daemon/') and rel.endswith('.c'):
                daemon_rank[rel[:-2]] = i
    daemon_rank['daemon/main'] = len(DAEMON_LIBRARIES)

    # 1. Includes go down or sideways within a folder.
    n_files = 0
    graph = {}
    for d in FOLDERS:
        for f in sorted(os.listdir(os.path.join(src, d))):
            if not f.endswith(('.c', '.h')):
                continue
            n_files += 1
            rel = f'{d}/{f}'
            mod = rel[:-2]
            for inc in includes(os.path.join(src, rel)):
                target = resolve(src, d, inc)
                if target is None:
                    fail(f'{rel} includes "{inc}", which is no file of the tree')
                    continue
                folder = target.split('/')[0]
                if folder not in FOLDERS:
                    fail(f'{rel} includes "{inc}" of {folder}/, which is no layer')
                    continue
                if folder != d and FOLDERS[folder] >= FOLDERS[d]:
                    fail(f'{rel} ({d}/) includes "{inc}" ({folder}/): arrows go down only')
                if folder not in (d, 'include') and '/' not in inc:
                    fail(f'{rel} includes "{inc}" of {folder}/ by its bare name')
                if folder == 'include' and '/' in inc:
                    fail(f'{rel} includes "{inc}": include/ headers are named bare')
                if d == 'daemon' and folder == 'daemon':
                    mine = daemon_rank.get(mod)
                    theirs = daemon_rank.get(target[:-2])
                    if mine is None and theirs is None:
                        pass     # two headers of inline code (ratelimit.h)
                    elif mine is None and rel.endswith('.c'):
                        fail(f'{rel} is compiled by no daemon library')
                    elif theirs is not None and mine is not None and theirs > mine:
                        fail(f'{rel} ({DAEMON_LIBRARIES[mine]}) includes "{inc}" '
                             f'({DAEMON_LIBRARIES[theirs] if theirs < len(DAEMON_LIBRARIES) else "main"}): '
                             f'arrows go down only')
                if target[:-2] != mod:
                    graph.setdefault(mod, set()).add(target[:-2])

    # 2. No include cycle anywhere.
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

    # 3. The core's packages and symbols.
    daemon_syms = set()
    for name in DAEMON_LIBRARIES:
        daemon_syms |= defined_symbols(by_name[name]['filename'][0])
    engine_glue_syms = set()
    for name in DAEMON_LIBRARIES[1:]:
        engine_glue_syms |= defined_symbols(by_name[name]['filename'][0])
    client_syms = defined_symbols(by_name['tpctl-replay']['filename'][0])
    core = by_name['tpd-core']
    for rel in sources_of(core, src):
        if not rel.startswith('core/'):
            fail(f'the core library compiles {rel}, which is not in core/')
    for s in core['target_sources']:
        for p in s['parameters']:
            if p.startswith('-I/usr') and any(pkg in p for pkg in FOREIGN_PACKAGES):
                fail(f'the core library is compiled with {p}')
    undef = undefined_symbols(core['filename'][0])
    bad = sorted(s for s in undef if s.startswith(('tracefs_', 'sd_')) or s in daemon_syms or s in client_syms)
    if bad:
        fail(f'the core library references {bad[:10]}')

    # 4. tpctl links no daemon/ object.
    for name in ('tpctl', 'tpctl-replay'):
        t = by_name[name]
        for rel in sources_of(t, src):
            if rel.startswith('daemon/'):
                fail(f'{name} compiles {rel}')
        leaked = sorted(defined_symbols(t['filename'][0]) & daemon_syms)
        if leaked:
            fail(f'{name} links daemon/ code: {leaked[:8]}')

    # 5. Unit tests and fuzz targets link no engine or glue code.
    n_checked = 0
    for t in targets:
        if t['type'] != 'executable' or not re.search(r'tests/(unit|fuzz)/', t['defined_in']):
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

    print(f'{n_files} files in {len(FOLDERS)} folders, {len(graph)} modules walked for cycles, '
          f'{n_checked} test executables checked, {len(failures)} failures')
    return 1 if failures else 0


if __name__ == '__main__':
    sys.exit(main(os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])))
