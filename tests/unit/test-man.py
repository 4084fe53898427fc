#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""The built man pages render with man-db without a warning (man --warnings passes groff's -w all
through), at 80 columns, and each shows its NAME and SYNOPSIS. Arguments: the pages."""

import os
import shutil
import subprocess
import sys


def main(pages):
    if not shutil.which('man'):
        print('SKIP: man (man-db) is not installed')
        return 77
    env = dict(os.environ, MANWIDTH='80', MAN_KEEP_FORMATTING='', LC_ALL='C.UTF-8')
    failed = 0
    for page in pages:
        name, section = os.path.basename(page).rsplit('.', 1)
        r = subprocess.run(['man', '--warnings', '-l', page], capture_output=True, text=True, env=env)
        text = r.stdout
        problems = []
        if r.returncode != 0:
            problems.append(f'exit {r.returncode}')
        if r.stderr.strip():
            problems.append(f'warnings:\n{r.stderr.strip()}')
        if not text.startswith(f'{name}({section})'):
            problems.append(f'does not start with {name}({section}): {text[:80]!r}')
        for heading in ('NAME', 'SYNOPSIS', 'SEE ALSO'):
            if f'\n{heading}\n' not in text:
                problems.append(f'no {heading}')
        if any(len(line) > 80 for line in text.splitlines()):
            problems.append('lines longer than 80 columns')
        if problems:
            failed += 1
            print(f'FAIL: {page}: ' + '; '.join(problems))
        else:
            print(f'ok: {page}: {len(text.splitlines())} lines, no warnings')
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
