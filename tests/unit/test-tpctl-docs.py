#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Every command and long option `tpctl --help` lists is documented in tpctl(1) and offered by both
completions, so that a new option cannot be added to one of them only.
Arguments: TPCTL tpctl.1.scd tpctl.bash _tpctl"""

import re
import subprocess
import sys


def main(tpctl, man, bash, zsh):
    text = subprocess.run([tpctl, '--help'], capture_output=True, text=True, check=True).stdout
    commands_part = text.split('\nCommands:\n', 1)[1].split('\nOptions:\n', 1)[0]
    commands = re.findall(r'^  ([a-z]+)\b', commands_part, re.M)
    options = sorted(set(re.findall(r'(?<![\w-])(--[a-z][a-z-]*)', text.split('\nOptions:\n', 1)[1])))
    if len(commands) < 5 or len(options) < 5:
        print(f'FAIL: could not read tpctl --help: commands {commands}, options {options}')
        return 1
    docs = {path: open(path).read() for path in (man, bash, zsh)}
    missing = []
    for path, doc in docs.items():
        for c in commands:
            want = f'*{c}*' if path == man else c
            if not re.search(r'(?<![\w-])' + re.escape(want) + r'(?![\w-])', doc):
                missing.append(f'{path}: command {c}')
        for o in options:
            if not re.search(re.escape(o) + r'(?![\w-])', doc):
                missing.append(f'{path}: option {o}')
    if missing:
        print('FAIL: not documented or not completed:\n  ' + '\n  '.join(missing))
        return 1
    print(f'ok: {len(commands)} commands and {len(options)} options in all three')
    return 0


if __name__ == '__main__':
    sys.exit(main(*sys.argv[1:]))
