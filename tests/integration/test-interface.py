#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""The interface tpd describes is the interface it serves.

A client built from GetInterfaceDescription (the reference Go implementation parses it) must find
every method tpd serves, and every method it finds must be served:
- the methods of tpd's dispatch table (daemon/api.c) equal the `method` lines of the description
  that the running tpd returns;
- each declared method, called with an unknown parameter, answers InvalidParameter (or
  PermissionDenied/ExpectedMore where the call needs more), never MethodNotFound;
- each error the description declares is an error id tpd's sources can send.
"""

import os
import re

import tpdtest as T
from tpdtest import check, log

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..')


def served_methods():
    text = open(os.path.join(SOURCE, 'daemon', 'api.c')).read()
    table = re.search(r'\bmethods\[\]\s*=\s*\{(.*?)\n\};', text, re.S)
    check(table, 'no methods[] table in daemon/api.c')
    names = set(re.findall(r'TPD_METHOD\("(\w+)"\)', table.group(1)))
    check(names, 'the methods[] table of daemon/api.c names no io.tpd.tracing method')
    return names


def main(ctx):
    tpd = ctx.tpd()
    reply = tpd.call('org.varlink.service.GetInterfaceDescription', {'interface': 'io.tpd.tracing'})
    check('error' not in reply, f'GetInterfaceDescription failed: {reply}')
    desc = reply['parameters']['description']
    declared = set(re.findall(r'^method (\w+)\(', desc, re.M))
    served = served_methods()
    check(declared == served, f'declared but not served: {sorted(declared - served)}; '
                              f'served but not declared: {sorted(served - declared)}')
    log(f'{len(served)} methods served and declared: {", ".join(sorted(served))}')

    allowed = {'org.varlink.service.InvalidParameter', 'org.varlink.service.ExpectedMore'}
    for name in sorted(declared):
        r = tpd.call(f'io.tpd.tracing.{name}', {'no_such_parameter': 1})
        check(r.get('error') in allowed, f'{name} with an unknown parameter answered {r}')

    errors = set(re.findall(r'^error (\w+)\(', desc, re.M))
    sources = ''.join(open(os.path.join(SOURCE, 'daemon', f)).read()
                      for f in os.listdir(os.path.join(SOURCE, 'daemon')) if f.endswith('.c'))
    protocol = open(os.path.join(SOURCE, 'include', 'tpd-protocol.h')).read()
    for e in sorted(errors):
        m = re.search(r'#define (\w+) TPD_INTERFACE "\.' + e + '"', protocol)
        check(m, f'error {e} is declared but has no id in include/tpd-protocol.h')
        check(m.group(1) in sources, f'error {e} ({m.group(1)}) is declared but tpd never sends it')
    log(f'{len(errors)} declared errors, each sent by tpd')
    tpd.stop()


if __name__ == '__main__':
    T.run(main)
