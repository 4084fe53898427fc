#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Writes a C file defining `const char NAME[]` with the text of a file."""
import sys

name, src, dst = sys.argv[1:4]
with open(src, encoding="utf-8") as f:
    text = f.read()
body = "".join("\\%03o" % b if b < 0x20 or b in (0x22, 0x5c) or b > 0x7e else chr(b)
               for b in text.encode("utf-8"))
with open(dst, "w", encoding="utf-8") as f:
    f.write("/* Generated from %s. */\nconst char %s[] = \"%s\";\n" % (src.split("/")[-1], name, body))
