#!/bin/bash
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# Instructions tpd executes per record, counted by callgrind: a measure that, unlike CPU time, does
# not drift with the machine, for comparing two builds of the per-record path.
#
#   tests/bench/instructions.sh BUILD [N]
#
# Runs tpd under valgrind twice, with N and 3·N getppid records (default N = 100,000) streamed to
# one `tpctl stream`, and prints (Ir(3N) − Ir(N)) / 2N: the start-up and the idle loop cancel
# out. The ring buffer is made big enough (64 MiB per CPU) that the slowed tpd loses nothing; a run
# that loses a record is reported as failed. Needs root, tracefs and valgrind.
set -euo pipefail

build=$(realpath "${1:?usage: instructions.sh BUILD [N]}")
n=${2:-100000}
work=$(mktemp -d /tmp/tpd-instructions.XXXXXX)
trap 'rm -rf "$work"' EXIT

# Ir of one tpd that streams count records; sets $ir.
run() {
        local count=$1 sock="$work/tpd.sock" out="$work/cg.$1" lines="$work/lines.$1"
        local tpd stream got=0

        valgrind --tool=callgrind --callgrind-out-file="$out" "$build/daemon/tpd" --socket "$sock" \
                --instance "tpd-ir-$$-$count" --state-dir '' --buffer-size-kb=65536 >"$work/log" 2>&1 &
        tpd=$!
        for _ in $(seq 300); do
                "$build/client/tpctl" --socket "$sock" status >/dev/null 2>&1 && break
                sleep 0.1
        done
        "$build/client/tpctl" --socket "$sock" enable syscalls:sys_enter_getppid
        "$build/client/tpctl" --socket "$sock" stream syscalls:sys_enter_getppid >"$lines" &
        stream=$!
        sleep 2
        "$build/tests/integration/gen-getppid" --count "$count" --cpu 1 --no-wait >/dev/null
        for _ in $(seq 1200); do
                got=$(grep -c '"event":"syscalls:sys_enter_getppid"' "$lines" || true)
                [ "$got" -ge "$count" ] && break
                sleep 0.5
        done
        kill "$stream"
        wait "$stream" || true
        kill "$tpd"
        wait "$tpd" || true
        if [ "$got" -ne "$count" ] || grep -q '"lost"' "$lines"; then
                echo "instructions.sh: $got of $count records streamed, or some lost; see $work/log" >&2
                exit 1
        fi
        ir=$(sed -n 's/^summary: //p' "$out")
}

run "$n"
ir1=$ir
run $((3 * n))
ir3=$ir
echo "$build: $(((ir3 - ir1) / (2 * n))) instructions per getppid record in tpd (Ir $ir1 for $n, $ir3 for $((3 * n)))"
