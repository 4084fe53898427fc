#!/bin/sh
# SPDX-License-Identifier: LGPL-2.1-or-later
# The C sources are as clang-format (.clang-format) writes them. Fix with:
#   clang-format -i $(git ls-files '*.c' '*.h')
# Usage: check-format.sh CLANG_FORMAT SOURCE_ROOT
set -eu
clang_format=$1
cd "$2"
files=$(find daemon client include tests -name '*.[ch]' | sort)
[ -n "$files" ] || { echo "no C sources found under $2"; exit 1; }
# shellcheck disable=SC2086
"$clang_format" --style=file --dry-run --Werror $files
echo "$(echo "$files" | wc -l) files formatted as .clang-format says"
