#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Checks every tests/data/*/expected.ndjson without tpd's decoder.

    verify-golden.py DATADIR [NAME...]

For each dataset it
  1. decodes cpuN.pages with its own reading of the ring-buffer layout and of the format files
     (nothing shared with core/decode.c or libtraceevent) and builds each record as docs/design.md §3
     describes it; every line of expected.ndjson must be valid JSON, in the §3 key order, and equal
     to that record;
  2. matches each record with the kernel's own text rendering of it (trace.txt, read before the
     pages were consumed): same CPU, order, pid and timestamp (the text has microseconds), and
     every field value the text shows (ints, strings, addresses, the marker text byte for byte);
  3. checks the overrun count against the kernel's "entries-in-buffer/entries-written" line.

Exit 0 when all agree, 1 with the first difference otherwise.
"""

import codecs
import glob
import json
import os
import re
import struct
import sys

COMMIT_MASK = (1 << 27) - 1
MISSED = 1 << 31
STORED = 1 << 30


def fffd_per_byte(err):
    # One U+FFFD for each byte that does not start a valid sequence, as the contract says.
    return ('\ufffd', err.start + 1)


codecs.register_error('tpd-fffd', fffd_per_byte)


def text(raw):
    """A C string field as JSON shows it: up to the first NUL, bad bytes replaced one by one."""
    return raw.split(b'\0', 1)[0].decode('utf-8', errors='tpd-fffd')


class Fail(Exception):
    pass


def parse_format(path):
    name = event_id = None
    fields = []
    for line in open(path, encoding='utf-8'):
        line = line.strip()
        if line.startswith('name: '):
            name = line[6:]
        elif line.startswith('ID: '):
            event_id = int(line[4:])
        elif line.startswith('field:'):
            parts = dict(p.strip().split(':', 1) for p in line.split(';') if ':' in p)
            decl = parts['field']
            m = re.match(r'^(.*?)\s*(\w+)\s*(\[(\d*)\])?$', decl)
            ftype, fname, bracket, count = m.group(1), m.group(2), m.group(3), m.group(4)
            if ftype.startswith('__data_loc') or ftype.startswith('__rel_loc'):
                # "__data_loc char[] name": the brackets belong to the type.
                m = re.match(r'^(__data_loc|__rel_loc)\s+(.*?)\[\]\s+(\w+)$', decl)
                ftype, fname, bracket, count = m.group(1) + ' ' + m.group(2), m.group(3), '[]', ''
            fields.append({
                'name': fname, 'type': ftype, 'array': bracket is not None,
                'count': int(count) if count else None,
                'offset': int(parts['offset']), 'size': int(parts['size']),
                'signed': parts['signed'] == '1',
            })
    system = os.path.basename(path).split('.')[0]
    return event_id, {'name': '%s:%s' % (system, name), 'fields': fields}


def elem_type_size(ftype):
    base = re.sub(r'^(__data_loc|__rel_loc)\s+', '', ftype).replace('const ', '').strip()
    sizes = {'u8': 1, '__u8': 1, 's8': 1, 'char': 1, 'unsigned char': 1, 'signed char': 1,
             'u16': 2, '__u16': 2, 's16': 2, 'short': 2, 'unsigned short': 2,
             'u32': 4, '__u32': 4, 's32': 4, 'int': 4, 'unsigned int': 4,
             'u64': 8, '__u64': 8, 's64': 8, 'long': 8, 'unsigned long': 8}
    return sizes[base]


def ints(raw, size, signed):
    fmt = {1: 'b', 2: 'h', 4: 'i', 8: 'q'}[size]
    if not signed:
        fmt = fmt.upper()
    n = len(raw) // size
    return list(struct.unpack('<%d%s' % (n, fmt), raw[:n * size]))


def decode_fields(fmt, data):
    out = []
    for f in fmt['fields']:
        if f['name'].startswith('common_'):
            continue
        t, off, size = f['type'], f['offset'], f['size']
        # "char" arrays are text; "unsigned char" and u8 arrays are bytes, shown as integers.
        is_char = re.sub(r'^(__data_loc|__rel_loc)\s+|\bconst\s+|\bsigned\s+', '', t).strip() == 'char'
        if t.startswith('__data_loc') or t.startswith('__rel_loc'):
            loc = struct.unpack_from('<I', data, off)[0]
            start, length = loc & 0xffff, loc >> 16
            if t.startswith('__rel_loc'):
                start += off + size
            raw = data[start:start + length]
            value = text(raw) if is_char else ints(raw, elem_type_size(t), False)
        elif f['array'] and size == 0:
            raw = data[off:]
            value = text(raw) if is_char else ints(raw, elem_type_size(t), f['signed'])
        elif f['array']:
            raw = data[off:off + size]
            value = text(raw) if is_char else ints(raw, size // f['count'], f['signed'])
        elif t.endswith('*'):
            value = '0x%x' % struct.unpack_from('<Q', data, off)[0]
        else:
            value = ints(data[off:off + size], size, f['signed'])[0]
        out.append((f['name'], value))
    return out


def read_pages(path, cpu, formats, comms, overrun):
    """Yields (record as ordered pairs, raw payload) of every page of one CPU's file."""
    blob = open(path, 'rb').read()
    assert len(blob) % 4096 == 0, path
    for p in range(len(blob) // 4096):
        page = blob[p * 4096:(p + 1) * 4096]
        ts, commit = struct.unpack_from('<QQ', page, 0)
        length = commit & COMMIT_MASK
        data = page[16:16 + length]
        if commit & MISSED:
            count = struct.unpack_from('<Q', page, 16 + length)[0] if commit & STORED else overrun[cpu]
            if count:
                yield [('ts', ts), ('cpu', cpu), ('lost', count), ('cause', 'overrun')], None
        i = 0
        while i < length:
            word = struct.unpack_from('<I', data, i)[0]
            type_len, delta = word & 31, word >> 5
            if type_len == 30:  # time extend
                ts += delta | struct.unpack_from('<I', data, i + 4)[0] << 27
                i += 8
                continue
            if type_len == 31:  # absolute time stamp
                ts = (delta | struct.unpack_from('<I', data, i + 4)[0] << 27) | (ts & (0xf8 << 56))
                i += 8
                continue
            if type_len == 29:  # padding
                i += 4 + struct.unpack_from('<I', data, i + 4)[0]
                continue
            ts += delta
            if type_len == 0:
                n = struct.unpack_from('<I', data, i + 4)[0] - 4
                payload = data[i + 8:i + 8 + n]
                i += 8 + ((n + 3) & ~3)
            else:
                payload = data[i + 4:i + 4 + 4 * type_len]
                i += 4 + 4 * type_len
            event_id, pid = struct.unpack_from('<H', payload, 0)[0], struct.unpack_from('<i', payload, 4)[0]
            fmt = formats[event_id]
            rec = [('ts', ts), ('cpu', cpu), ('event', fmt['name']), ('pid', pid)]
            if pid in comms:
                rec.append(('comm', comms[pid][:16]))
            rec.append(('fields', decode_fields(fmt, payload)))
            yield rec, payload


# "  comm-pid  [cpu] flags  sec.usec: name: info", or "name(args)" for syscall entries.
HDR = re.compile(rb' *(\S+)-(\d+) +\[(\d{3})\] (\S{5}) +(\d+)\.(\d{6}): (\w+)(?:: |\()')


def kernel_text(path):
    """(cpu, pid, usecs, name, info bytes) per record of the text trace, and the header's counts."""
    raw = open(path, 'rb').read()
    m = re.search(rb'entries-in-buffer/entries-written: (\d+)/(\d+)', raw)
    counts = (int(m.group(1)), int(m.group(2)))
    body = b'\n'.join(l for l in raw.split(b'\n') if not l.startswith(b'#'))
    matches = list(HDR.finditer(body))
    out = []
    for k, m in enumerate(matches):
        end = matches[k + 1].start() if k + 1 < len(matches) else len(body)
        info = body[m.end():end]
        out.append((int(m.group(3)), int(m.group(2)), int(m.group(5)) * 1000000 + int(m.group(6)),
                    m.group(7).decode(), info))
    return out, counts


def check_against_text(rec, payload, k):
    cpu, pid, usecs, name, info = k
    d = dict(rec)
    fields = dict(d['fields'])
    where = '%s at ts %d' % (d['event'], d['ts'])
    if cpu != d['cpu'] or pid != d['pid'] or usecs != (d['ts'] + 500) // 1000:  # ns2usecs() rounds
        raise Fail('%s: kernel text says cpu %d pid %d usecs %d' % (where, cpu, pid, usecs))
    event = d['event'].split(':')[1]
    if event == 'print':
        if info != payload[16:].split(b'\0', 1)[0]:
            raise Fail('%s: marker text %r != kernel %r' % (where, payload[16:40], info[:40]))
        return 1
    s = info.decode('latin-1').rstrip('\n')
    checked = 0
    if event == 'sys_exit':
        m = re.fullmatch(r'NR (\d+) = (-?\d+)', s)
        pairs = [('id', m.group(1)), ('ret', m.group(2))]
    elif event == 'sys_enter':
        m = re.fullmatch(r'NR (\d+) \(([0-9a-f, ]+)\)', s)
        if [int(x, 16) for x in m.group(2).split(', ')] != fields['args']:
            raise Fail('%s: args %r != kernel %r' % (where, fields['args'], m.group(2)))
        pairs = [('id', m.group(1))]
        checked += 1
    elif event.startswith('sys_enter_'):
        pairs = re.findall(r'(\w+): (0x[0-9a-f]+|\d+)', s)
    else:
        alias = {'grp': 'group', 'res': 'result'}
        pairs = [(alias.get(key, key), v) for key, v in re.findall(r'(\w+)=(\S+)', s)]
    for key, v in pairs:
        if key not in fields:
            continue
        want = fields[key]
        if isinstance(want, int):
            if re.fullmatch(r'-?\d+', v):
                got = int(v)
            elif re.fullmatch(r'0x[0-9a-f]+', v):
                got = int(v, 16)
                # Syscall arguments print as "%08lx" of an int: compare the low 32 bits if shorter.
                want = want if got > 0xffffffff else want & 0xffffffff
            else:
                continue  # symbolic (prev_state=S, oldstate=TCP_CLOSE)
            if got != want:
                raise Fail('%s: %s=%r, kernel says %s' % (where, key, fields[key], v))
        elif isinstance(want, list):
            if v != '.'.join(str(x) for x in want) and not re.fullmatch(r'[0-9a-f:.]+', v):
                raise Fail('%s: %s=%r, kernel says %s' % (where, key, want, v))
            if re.fullmatch(r'\d+\.\d+\.\d+\.\d+', v) and v != '.'.join(str(x) for x in want):
                raise Fail('%s: %s=%r, kernel says %s' % (where, key, want, v))
        elif isinstance(want, str):
            kv = text(v.encode('latin-1'))
            if want.startswith('0x'):
                if int(v, 16) != int(want, 16):
                    raise Fail('%s: %s=%s, kernel says %s' % (where, key, want, v))
            elif kv != want:
                raise Fail('%s: %s=%r, kernel says %r' % (where, key, want, kv))
        checked += 1
    return checked


def verify(datadir, name):
    d = os.path.join(datadir, name)
    formats = dict(parse_format(p) for p in glob.glob(os.path.join(d, '*.format')))
    comms = {}
    for line in open(os.path.join(d, 'comms'), encoding='utf-8'):
        pid, comm = line.split()
        comms[int(pid)] = comm
    overrun, cpu = {}, None
    for line in open(os.path.join(d, 'stats.txt')):
        if line.startswith('cpu'):
            cpu = int(line[3:])
        elif line.strip().startswith('overrun:'):
            overrun[cpu] = int(line.split(':')[1])

    records = []
    for path in sorted(glob.glob(os.path.join(d, 'cpu*.pages')), key=lambda p: int(re.search(r'cpu(\d+)', p).group(1))):
        cpu = int(re.search(r'cpu(\d+)\.pages$', path).group(1))
        records.extend(read_pages(path, cpu, formats, comms, overrun))

    expected = open(os.path.join(d, 'expected.ndjson'), 'rb').read()
    if not expected.endswith(b'\n'):
        raise Fail('%s: expected.ndjson does not end with a newline' % name)
    lines = expected.split(b'\n')[:-1]
    if len(lines) != len(records):
        raise Fail('%s: %d lines, %d records in the pages' % (name, len(lines), len(records)))
    for n, (line, (rec, _)) in enumerate(zip(lines, records), 1):
        got = json.loads(line.decode('utf-8'), object_pairs_hook=list)
        want = [(k, v) for k, v in rec]
        if got != want:
            raise Fail('%s line %d:\n  file:  %r\n  pages: %r' % (name, n, got, want))

    ktext, (entries, written) = kernel_text(os.path.join(d, 'trace.txt'))
    events = [(r, p) for r, p in records if p is not None]
    lost = sum(dict(r)['lost'] for r, p in records if p is None)
    if lost != written - entries:
        raise Fail('%s: %d lost in the pages, kernel says %d written, %d kept' % (name, lost, written, entries))
    by_cpu = {}
    for k in ktext:
        by_cpu.setdefault(k[0], []).append(k)
    ours = {}
    for r, p in events:
        ours.setdefault(dict(r)['cpu'], []).append((r, p))
    if sorted(by_cpu) != sorted(ours) or any(len(by_cpu[c]) != len(ours[c]) for c in ours):
        raise Fail('%s: record counts per CPU differ from the kernel text: %r vs %r' % (
            name, {c: len(v) for c, v in ours.items()}, {c: len(v) for c, v in by_cpu.items()}))
    checked = 0
    for c in ours:
        for (r, p), k in zip(ours[c], by_cpu[c]):
            if k[3] not in (dict(r)['event'].split(':')[1], 'tracing_mark_write') and \
                    not k[3].startswith('sys_'):
                raise Fail('%s: kernel text names %s for %s' % (name, k[3], dict(r)['event']))
            checked += check_against_text(r, p, k)
    print('%s: %d records (%d lost), %d field values checked against the kernel text' % (
        name, len(events), lost, checked))


def main():
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    datadir = sys.argv[1]
    names = sys.argv[2:] or sorted(os.path.basename(os.path.dirname(p))
                                   for p in glob.glob(os.path.join(datadir, '*', 'expected.ndjson')))
    if not names:
        print('no datasets under %s' % datadir, file=sys.stderr)
        return 1
    try:
        for name in names:
            verify(datadir, name)
    except Fail as e:
        print('FAIL: %s' % e, file=sys.stderr)
        return 1
    return 0


if __name__ == '__main__':
    sys.exit(main())
