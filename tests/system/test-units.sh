#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# System test: the installed units under a real systemd. Builds tpd with --prefix=/usr, installs it
# into a DESTDIR, boots a Debian bookworm container with systemd as PID 1 (systemd-nspawn, the root
# cached under /var/lib/machines), binds the installed files into it and drives systemctl, tpctl and
# journalctl inside with nsenter. Each check prints PASS or FAIL; the exit code is 0 only when all
# passed, 77 when the test cannot run here (not root, no systemd-nspawn/debootstrap, no tracefs).
#
# Environment: TPD_SOURCE_ROOT, TPD_BUILD_ROOT (set by meson), TPD_SYSTEST_ROOT (the cached
# container root), TPD_SYSTEST_MIRROR (Debian mirror for debootstrap; default: apt's own),
# TPD_SYSTEST_KEEP=1 (keep the run's logs).
#
# Why it is done this way: machinectl, systemctl -M and systemd-run -M do not work on the machines
# these tests run on, and /sys/kernel/tracing must not be bound in (the container's systemd mounts
# tracefs itself, given CAP_SYS_RAWIO).
set -uo pipefail

SUITE=bookworm
PACKAGES=systemd,dbus,systemd-sysv,libtracefs1,libtraceevent1,libjson-c5,libtracecmd1,jq,libnats3.4,nats-server
# Bump when the recipe changes: a root with another recipe is rebuilt.
RECIPE="tpd-systest v1: debootstrap --variant=minbase --include=$PACKAGES $SUITE"
ROOT=${TPD_SYSTEST_ROOT:-/var/lib/machines/tpd-test-root}
case $ROOT in
/*/?*) ;;
*) echo "FAIL setup: TPD_SYSTEST_ROOT must be an absolute path below a directory, not '$ROOT'"; exit 1 ;;
esac
MARKER=$ROOT/.tpd-systest-complete
# A name of the test's own, set through a configuration drop-in in the container: a host tpd
# (the quick start's, instance "tpd") may be running, and instances are machine-wide.
INSTANCE=tpd-systest-$$
TRACEFS=/sys/kernel/tracing
INNER_PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

here=$(cd "$(dirname "$0")" && pwd)
SOURCE_ROOT=${TPD_SOURCE_ROOT:-$(cd "$here/../.." && pwd)}
BUILD_ROOT=${TPD_BUILD_ROOT:-$SOURCE_ROOT/build}
PREFIX_BUILD=$BUILD_ROOT/system-prefix
DESTDIR=$PREFIX_BUILD/destdir

t_start=$(date +%s.%N)
say() { printf '%s\n' "$*"; }
elapsed() { awk -v a="$t_start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }
skip() { say "SKIP: $*"; exit 77; }
die() { say "FAIL setup: $*"; exit 1; }

# ---------------------------------------------------------------------------------------------
# Can it run here?

[ "$(id -u)" -eq 0 ] || skip "needs root (systemd-nspawn, debootstrap, tracefs)"

need_tools() {
        local t
        for t in systemd-nspawn debootstrap nsenter pgrep setpriv jq meson timeout flock; do
                command -v "$t" >/dev/null 2>&1 || return 1
        done
}
if ! need_tools; then
        # .ci/deps installs these; a developer machine may lack them.
        if command -v apt-get >/dev/null 2>&1; then
                say "Installing systemd-container and debootstrap ..."
                DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
                        systemd-container debootstrap util-linux procps jq >/dev/null 2>&1 ||
                        { apt-get update -qq >/dev/null 2>&1 &&
                          DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
                                systemd-container debootstrap util-linux procps jq >/dev/null 2>&1; }
        fi
        need_tools || skip "systemd-nspawn, debootstrap, nsenter, setpriv, jq or meson is missing and could not be installed"
fi

if ! mountpoint -q "$TRACEFS"; then
        # Not mounted at boot on these machines; the host-side checks below read it. tpd would
        # mount it the same way.
        mount -t tracefs nodev "$TRACEFS" 2>/dev/null || skip "the kernel has no tracefs at $TRACEFS"
fi
[ -d "$TRACEFS/instances" ] || skip "tracefs has no instances/ directory"

mkdir -p "$(dirname "$ROOT")"
# One run at a time: the root cache and the machine-wide instance name are shared.
exec 9>"$(dirname "$ROOT")/.$(basename "$ROOT").lock"
flock -w 900 9 || die "another system test run holds $(dirname "$ROOT")/.$(basename "$ROOT").lock"

tmp=$(mktemp -d /tmp/tpd-systest.XXXXXX)

# ---------------------------------------------------------------------------------------------
# Results

declare -a results=()
n_fail=0
pass() { results+=("PASS $1: $2"); say "PASS $1: $2"; }
fail() { results+=("FAIL $1: $2"); say "FAIL $1: $2"; n_fail=$((n_fail + 1)); }
# check LABEL MESSAGE CONDITION...: PASS or FAIL by the condition's exit code.
check() {
        local label=$1 msg=$2
        shift 2
        if "$@"; then pass "$label" "$msg"; else fail "$label" "$msg"; fi
}

summary() {
        local r n_pass=0
        say ""
        say "=== Summary ($(elapsed) s) ==="
        for r in "${results[@]}"; do
                say "  $r"
                [[ $r == PASS* ]] && n_pass=$((n_pass + 1))
        done
        say "$n_pass passed, $n_fail failed"
}

# ---------------------------------------------------------------------------------------------
# The container and its cleanup

timeout_pid=
nspawn_pid=
pid1=
declare -a bg_pids=()

# Runs a command inside the container, in all its namespaces, with a clean environment (the host's
# TPD_SOCKET and the like must not leak in) and a time limit.
cx() {
        timeout --kill-after=5 "${CX_TIMEOUT:-60}" nsenter -t "$pid1" -a \
                env -i PATH="$INNER_PATH" LANG=C.UTF-8 SYSTEMD_COLORS=0 SYSTEMD_PAGER= "$@"
}
prop() { cx systemctl show -p "$1" --value "$2" 2>/dev/null; }

alive() { [ -n "$1" ] && kill -0 "$1" 2>/dev/null; }

# Waits up to $1 seconds for the command to succeed.
wait_for() {
        local deadline
        deadline=$(awk -v n="$1" -v now="$(date +%s.%N)" 'BEGIN { printf "%.3f", now + n }')
        shift
        while :; do
                "$@" && return 0
                awk -v d="$deadline" -v now="$(date +%s.%N)" 'BEGIN { exit !(now < d) }' || return 1
                sleep 0.2
        done
}

remove_stale_instance() {
        [ -d "$TRACEFS/instances/$INSTANCE" ] || return 0
        echo 0 >"$TRACEFS/instances/$INSTANCE/events/enable" 2>/dev/null
        rmdir "$TRACEFS/instances/$INSTANCE"
}

stop_container() {
        local p
        for p in "${bg_pids[@]}"; do
                alive "$p" && kill "$p" 2>/dev/null
        done
        if alive "$timeout_pid"; then
                if alive "$pid1"; then
                        timeout 30 nsenter -t "$pid1" -a systemctl poweroff >/dev/null 2>&1
                fi
                wait_for 60 eval '! alive "$timeout_pid"' ||
                        { say "nspawn did not exit after poweroff; terminating it"; kill -TERM "$nspawn_pid" 2>/dev/null; }
                wait_for 20 eval '! alive "$timeout_pid"' ||
                        { say "nspawn still running; killing the container"; kill -KILL "$pid1" "$nspawn_pid" "$timeout_pid" 2>/dev/null; }
                wait_for 10 eval '! alive "$timeout_pid"'
        fi
        # Killing the container's PID 1 ends everything in its PID namespace.
        if alive "$pid1"; then
                kill -KILL "$pid1" 2>/dev/null
                wait_for 10 eval '! alive "$pid1"'
        fi
        for p in "${bg_pids[@]}"; do
                alive "$p" && kill -KILL "$p" 2>/dev/null
        done
        # Reap what has ended; never block on something that has not.
        for p in "${bg_pids[@]}" "$timeout_pid"; do
                [ -n "$p" ] && ! alive "$p" && wait "$p" 2>/dev/null
        done
        return 0
}

cleanup() {
        local rc=$?
        trap - EXIT INT TERM
        stop_container
        if alive "$pid1" || alive "$nspawn_pid" || alive "$timeout_pid"; then
                say "WARNING: container processes are still running (pid1 $pid1, nspawn $nspawn_pid)"
                rc=1
        fi
        # A container that had to be killed leaves its instance behind; nothing else uses this name
        # (checked at the start).
        if [ -n "$pid1" ] && [ -d "$TRACEFS/instances/$INSTANCE" ]; then
                say "WARNING: $TRACEFS/instances/$INSTANCE was left behind; removing it"
                remove_stale_instance || say "WARNING: could not remove $TRACEFS/instances/$INSTANCE"
        fi
        if [ "${TPD_SYSTEST_KEEP:-0}" = 1 ]; then
                say "Logs kept in $tmp"
        else
                rm -rf "$tmp"
        fi
        exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ---------------------------------------------------------------------------------------------
# The instance name is machine-wide: no host tpd may be using it.

holder_of_instance() {
        local fd target
        for fd in /proc/[0-9]*/fd/*; do
                target=$(readlink "$fd" 2>/dev/null) || continue
                case $target in
                "$TRACEFS/instances/$INSTANCE/"*)
                        fd=${fd#/proc/}
                        echo "${fd%%/*}"
                        return 0
                        ;;
                esac
        done
        return 1
}

if [ -d "$TRACEFS/instances/$INSTANCE" ]; then
        if holder=$(holder_of_instance); then
                die "tracefs instance '$INSTANCE' is in use on the host by pid $holder ($(tr '\0' ' ' </proc/"$holder"/cmdline)); stop it (a quick-start tpd?) and run again"
        fi
        say "Removing a stale tracefs instance '$INSTANCE' that nobody holds."
        remove_stale_instance || die "cannot remove the stale tracefs instance '$INSTANCE'"
fi

# ---------------------------------------------------------------------------------------------
# The container root, cached between runs

# debootstrap must use the Debian mirror apt uses here (the machine reaches only that).
find_mirror() {
        python3 - "$SUITE" <<'PY'
import glob, re, sys
suite = sys.argv[1]

def one_line(path):
    for line in open(path, encoding="utf-8", errors="replace"):
        line = re.sub(r"\[[^]]*\]", " ", line.split("#", 1)[0]).split()
        if len(line) >= 3 and line[0] == "deb" and line[2] == suite:
            return line[1]

def deb822(path):
    for stanza in re.split(r"\n\s*\n", open(path, encoding="utf-8", errors="replace").read()):
        fields, key = {}, None
        for line in stanza.splitlines():
            if line.startswith("#") or not line.strip():
                continue
            if line[0] in " \t" and key:
                fields[key] += " " + line.strip()
            elif ":" in line:
                key, value = line.split(":", 1)
                key = key.strip().lower()
                fields[key] = value.strip()
        if (fields.get("enabled", "yes").lower() != "no" and "deb" in fields.get("types", "").split()
                and suite in fields.get("suites", "").split() and fields.get("uris")):
            return fields["uris"].split()[0]

for path in ["/etc/apt/sources.list"] + sorted(glob.glob("/etc/apt/sources.list.d/*.list")):
    try:
        uri = one_line(path)
    except OSError:
        continue
    if uri:
        print(uri)
        sys.exit(0)
for path in sorted(glob.glob("/etc/apt/sources.list.d/*.sources")):
    try:
        uri = deb822(path)
    except OSError:
        continue
    if uri:
        print(uri)
        sys.exit(0)
sys.exit(1)
PY
}

root_complete() { [ -f "$MARKER" ] && [ "$(cat "$MARKER")" = "$RECIPE" ]; }

prepare_root() {
        local mirror new=$ROOT.new p missing
        if root_complete; then
                say "Container root: $ROOT (cached)"
                return 0
        fi
        if ! mirror=${TPD_SYSTEST_MIRROR:-$(find_mirror)}; then
                say "No apt source for suite '$SUITE' in /etc/apt: set TPD_SYSTEST_MIRROR to the mirror to use"
                return 1
        fi
        # debootstrap fetches with wget, which knows nothing of apt's proxy setting.
        if [ -z "${http_proxy:-}" ]; then
                eval "$(apt-config shell http_proxy Acquire::http::Proxy 2>/dev/null)"
                [ -n "${http_proxy:-}" ] && export http_proxy
        fi
        say "Container root: building $ROOT with debootstrap from $mirror (1-2 minutes) ..."
        rm -rf "$new" "$ROOT"
        if ! debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$new" "$mirror" \
                >"$tmp/debootstrap.log" 2>&1; then
                tail -n 30 "$tmp/debootstrap.log"
                [ -f "$new/debootstrap/debootstrap.log" ] && tail -n 30 "$new/debootstrap/debootstrap.log"
                rm -rf "$new"
                return 1
        fi
        missing=
        for p in ${PACKAGES//,/ }; do
                [ "$(chroot "$new" dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null)" = installed ] ||
                        missing="$missing $p"
        done
        if [ -n "$missing" ] || [ ! -x "$new/lib/systemd/systemd" ]; then
                say "The new root lacks:${missing:- systemd}"
                rm -rf "$new"
                return 1
        fi
        chroot "$new" apt-get clean >/dev/null 2>&1
        mv "$new" "$ROOT" && echo "$RECIPE" >"$MARKER"
        say "Container root ready ($(elapsed) s)."
}

t0=$(date +%s.%N)
prepare_root || die "could not prepare the container root $ROOT"
t_root=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')

# ---------------------------------------------------------------------------------------------
# Build with the prefix of a distribution package and install into DESTDIR. The main build dir
# keeps its own options (prefix /usr/local).

t0=$(date +%s.%N)
if [ ! -f "$PREFIX_BUILD/meson-private/coredata.dat" ]; then
        meson setup "$PREFIX_BUILD" "$SOURCE_ROOT" --prefix=/usr --sysconfdir=/etc --localstatedir=/var \
                >"$tmp/meson-setup.log" 2>&1 || { cat "$tmp/meson-setup.log"; die "meson setup $PREFIX_BUILD failed"; }
fi
rm -rf "$DESTDIR"
meson install -C "$PREFIX_BUILD" --destdir "$DESTDIR" >"$tmp/meson-install.log" 2>&1 ||
        { tail -n 40 "$tmp/meson-install.log"; die "meson install failed"; }
t_build=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')

declare -a binds=() installed=()
while IFS= read -r f; do
        installed+=("/$f")
        # The servers credential is the test's own (below), with a password.
        [ "$f" = etc/tpd/nats-servers ] && continue
        binds+=("--bind-ro=$DESTDIR/$f:/$f")
done < <(cd "$DESTDIR" && find . -type f -printf '%P\n' | sort)
printf '# Written by the system test.\n[Tracing]\nInstance=%s\n' "$INSTANCE" >"$tmp/50-systest.conf"
binds+=("--bind-ro=$tmp/50-systest.conf:/etc/tpd/tpd.conf.d/50-systest.conf")
# tpd-export.service: a NATS server of the test's own in the container on loopback (port 14222: the
# nats-server package's own service holds 4222, without JetStream) that wants a password, a stream
# created on first start, and the test consumer to read it back. The password is only in the
# server's configuration and in /etc/tpd/nats-servers (root's, mode 0600), which the unit reads
# with LoadCredential=.
NATS_PASSWORD=systest-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')
NATS_URL=nats://tpdexport:$NATS_PASSWORD@127.0.0.1:14222
printf '# Written by the system test.\nlisten: 127.0.0.1:14222\nhttp: 127.0.0.1:18222\njetstream { store_dir: /var/lib/nats-systest }\nauthorization { user: tpdexport, password: "%s" }\n' \
        "$NATS_PASSWORD" >"$tmp/nats-systest.conf"
(umask 077 && printf '# Written by the system test.\n%s\n' "$NATS_URL" >"$tmp/nats-servers")
printf '# Written by the system test.\nEXPORT_OPTIONS=--create-stream --replicas 1 -e sched:sched_switch\n' \
        >"$tmp/export-systest.env"
printf '# Written by the system test.\n[Service]\nEnvironmentFile=/etc/tpd/export-systest.env\n' >"$tmp/50-export-systest.conf"
binds+=("--bind-ro=$tmp/export-systest.env:/etc/tpd/export-systest.env"
        "--bind-ro=$tmp/nats-servers:/etc/tpd/nats-servers"
        "--bind-ro=$tmp/nats-systest.conf:/etc/nats-systest.conf"
        "--bind-ro=$tmp/50-export-systest.conf:/etc/systemd/system/tpd-export.service.d/50-systest.conf"
        "--bind-ro=$PREFIX_BUILD/tests/integration/nats-consume:/usr/local/bin/nats-consume")
say "Installed (bound read-only into the container):"
printf '  %s\n' "${installed[@]}"

unit_path() {
        local f
        for f in "${installed[@]}"; do
                [[ $f == */systemd/system/$1 ]] && { echo "$f"; return 0; }
        done
        return 1
}
service_path=$(unit_path tpd.service) || die "meson install did not install tpd.service"
socket_path=$(unit_path tpd.socket) || die "meson install did not install tpd.socket"
for f in /usr/bin/tpd /usr/bin/tpctl /etc/tpd/tpd.conf; do
        [[ " ${installed[*]} " == *" $f "* ]] || die "meson install did not install $f"
done
grep -qx 'ExecStart=/usr/bin/tpd' "$DESTDIR$service_path" || die "the installed tpd.service does not run /usr/bin/tpd"

# The top-level instance, to show that tpd leaves it alone.
toplevel_before=$(sort "$TRACEFS/set_event"; cat "$TRACEFS/tracing_on")

# ---------------------------------------------------------------------------------------------
# Boot

t0=$(date +%s.%N)
setsid bash -c 'echo $$ >"$0"; exec "$@"' "$tmp/timeout.pid" \
        timeout --kill-after=15 900 \
        systemd-nspawn -q -b -D "$ROOT" --register=no --keep-unit --console=passive \
        --private-network --volatile=overlay --capability=CAP_SYS_RAWIO "${binds[@]}" \
        >"$tmp/console.log" 2>&1 </dev/null &

find_pid1() {
        [ -s "$tmp/timeout.pid" ] || return 1
        timeout_pid=$(cat "$tmp/timeout.pid")
        nspawn_pid=$(pgrep -P "$timeout_pid" -x systemd-nspawn) || return 1
        pid1=$(pgrep -P "$nspawn_pid" -x systemd) || return 1
}
if ! wait_for 30 find_pid1; then
        cat "$tmp/console.log"
        die "the container's systemd did not start"
fi

boot_state=
booted() {
        boot_state=$(CX_TIMEOUT=30 cx systemctl is-system-running --wait 2>/dev/null)
        [ "$boot_state" = running ] || [ "$boot_state" = degraded ]
}
if ! wait_for 90 booted; then
        tail -n 40 "$tmp/console.log"
        die "the container did not finish booting (state: '${boot_state:-?}')"
fi
t_boot=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
say "Container booted in $t_boot s: $boot_state (nspawn pid $nspawn_pid, container PID 1 = host pid $pid1)"
if [ "$boot_state" = degraded ]; then
        say "Failed units (not tpd's; listed for the record):"
        cx systemctl --failed --no-legend --plain | sed 's/^/  /'
fi

# sysusers.d snippets are applied at boot only when /etc needs an update; this root's /etc is
# up to date, so apply tpd's now, as a package's postinst would.
cx systemd-sysusers >/dev/null 2>&1 || die "systemd-sysusers failed in the container"
cx getent group tracing >/dev/null || die "sysusers.d/tpd.conf did not create the group 'tracing'"

# ---------------------------------------------------------------------------------------------
# Checks

journal_count() { cx journalctl -u tpd.service -o cat --no-pager 2>/dev/null | grep -c -- "$1"; }
service_running() {
        [ "$(prop ActiveState tpd.service)" = active ] && [ "$(prop SubState tpd.service)" = running ]
}
pinned_in_status() {
        cx tpctl status --json 2>/dev/null |
                jq -e '[.events[] | select(.name == "sched:sched_switch" and .pinned == true)] | length == 1' \
                        >/dev/null
}
instance_enabled() {
        [ "$(cx cat "$TRACEFS/instances/$INSTANCE/events/sched/sched_switch/enable" 2>/dev/null)" = 1 ]
}

# a. Socket activation.
check_a() {
        local out state main u
        for u in tpd.socket tpd.service; do
                [ "$(prop LoadState $u)" = loaded ] || { fail a "$u is not loaded: $(prop LoadState $u)"; return; }
        done
        cx systemctl start tpd.socket || { fail a "systemctl start tpd.socket failed"; return; }
        check a "tpd.socket is active ($(prop ActiveState tpd.socket))" \
                test "$(prop ActiveState tpd.socket)" = active
        out=$(cx stat -c '%A %U %G' /run/tpd/io.tpd.tracing 2>&1)
        check a "the socket is srw-rw---- root tracing ($out)" test "$out" = "srw-rw---- root tracing"
        state=$(prop ActiveState tpd.service)
        check a "tpd.service is not running before the first connection ($state)" test "$state" = inactive
        out=$(cx tpctl status 2>&1)
        if grep -q "^Instance: *$INSTANCE\$" <<<"$out"; then
                pass a "the first 'tpctl status' succeeds (it activates tpd)"
        else
                fail a "the first 'tpctl status' fails: $out"
        fi
        if wait_for 10 service_running; then
                main=$(prop MainPID tpd.service)
                pass a "tpd.service was activated and reached READY=1 (ActiveState=active SubState=running, Type=notify, MainPID $main)"
        else
                fail a "tpd.service is not active/running: $(prop ActiveState tpd.service)/$(prop SubState tpd.service)"
        fi
}

# b. Enable and stream.
check_b() {
        local out rc n n_switch
        cx tpctl enable sched:sched_switch >/dev/null || { fail b "tpctl enable sched:sched_switch failed"; return; }
        pass b "tpctl enable sched:sched_switch"
        out=$(cx bash -c 'set -o pipefail; timeout 60 tpctl stream | head -n 100 | jq -e -c .' 2>"$tmp/b.err")
        rc=$?
        n=$(grep -c . <<<"$out")
        n_switch=$(jq -s '[.[] | select(.event == "sched:sched_switch")] | length' <<<"$out" 2>/dev/null)
        if [ "$rc" -eq 0 ] && [ "$n" -eq 100 ] && [ "${n_switch:-0}" -ge 1 ]; then
                pass b "'tpctl stream | head -n 100 | jq -e .' exits 0 with 100 records ($n_switch sched_switch)"
        else
                fail b "'tpctl stream | head -n 100 | jq -e .' exit $rc, $n records, ${n_switch:-?} sched_switch"
                cat "$tmp/b.err"
        fi
}

# c. A restart keeps the pin.
check_c() {
        local before after
        before=$(prop MainPID tpd.service)
        cx systemctl restart tpd.service || { fail c "systemctl restart tpd failed"; return; }
        wait_for 10 service_running
        after=$(prop MainPID tpd.service)
        check c "systemctl restart tpd: active/running again with a new MainPID ($before -> $after)" \
                eval 'service_running && [ "$after" != "$before" ] && [ "$after" != 0 ]'
        check c "tpctl status --json lists sched:sched_switch as pinned" pinned_in_status
        check c "instances/$INSTANCE/events/sched/sched_switch/enable is 1" instance_enabled
}

# d. SIGKILL: restart, reclaim, pin restored, a running stream ends with 69.
check_d() {
        local before after restarts_before restarts_after reclaimed_before reclaimed_after rc spid
        before=$(prop MainPID tpd.service)
        restarts_before=$(prop NRestarts tpd.service)
        reclaimed_before=$(journal_count "Reclaimed tracefs instance")

        cx timeout 60 tpctl stream >"$tmp/d.out" 2>"$tmp/d.err" &
        spid=$!
        bg_pids+=("$spid")
        if ! wait_for 10 test -s "$tmp/d.out"; then
                fail d "the stream started before the kill delivers no records"
        fi
        # Under the unit's sandbox the stream reads tpd's shared memory (memfds, seals, /proc/self/fd).
        local transport
        transport=$(cx tpctl status --json | jq -r '[.connections[] | select(.streaming) | .transport] | join(",")')
        check d "the stream reads shared memory under the unit (transports: $transport)" test "$transport" = shm
        cx systemctl kill -s KILL tpd.service || fail d "systemctl kill -s KILL tpd failed"

        if wait_for 15 eval '! alive "$spid"'; then
                wait "$spid"
                rc=$?
                check d "the running 'tpctl stream' exits with 69 (exit $rc, $(wc -l <"$tmp/d.out") records before)" \
                        test "$rc" -eq 69
                check d "it says 'tpd closed the stream' ($(tr '\n' ' ' <"$tmp/d.err"))" \
                        grep -q "tpd closed the stream" "$tmp/d.err"
        else
                fail d "the running 'tpctl stream' did not end within 15 s of the kill"
        fi

        restarted() {
                service_running && [ "$(prop NRestarts tpd.service)" -gt "$restarts_before" ] &&
                        [ "$(prop MainPID tpd.service)" != "$before" ]
        }
        if ! wait_for 20 restarted; then
                # Without the restart the rest means nothing: the killed tpd's instance still has
                # the event enabled, and tpctl would start tpd again through the socket.
                fail d "tpd was not restarted: $(prop ActiveState tpd.service)/$(prop SubState tpd.service), NRestarts $(prop NRestarts tpd.service); reclaim and pin not checked"
                return
        fi
        after=$(prop MainPID tpd.service)
        restarts_after=$(prop NRestarts tpd.service)
        pass d "Restart=on-failure restarted tpd (MainPID $before -> $after, NRestarts $restarts_before -> $restarts_after)"
        reclaimed_after=$(journal_count "Reclaimed tracefs instance")
        check d "the journal says the instance was reclaimed ($reclaimed_before -> $reclaimed_after 'Reclaimed' lines)" \
                test "$reclaimed_after" -gt "$reclaimed_before"
        check d "the pin is restored in the new instance (tpctl status --json)" pinned_in_status
        check d "instances/$INSTANCE/events/sched/sched_switch/enable is 1 again" instance_enabled
}

# g. STATUS= and the watchdog.
watchdog_t0=
check_g() {
        local text usec
        status_text_ok() {
                text=$(prop StatusText tpd.service)
                [[ $text =~ [0-9]+\ events/s,\ [0-9]+\ streams ]]
        }
        # STATUS= comes every 5 s; right after a start it still shows the READY=1 line.
        if wait_for 12 status_text_ok; then
                pass g "StatusText is tpd's STATUS= line: '$text'"
        else
                fail g "StatusText has no '... events/s, ... streams' line: '$text'"
        fi
        usec=$(prop WatchdogUSec tpd.service)
        check g "the watchdog is set (WatchdogUSec=$usec)" \
                eval '[ -n "$usec" ] && [ "$usec" != 0 ] && [ "$usec" != infinity ]'
}
# WATCHDOG=1 is due within 3/4 of WatchdogSec (30 s); systemd stamps each one it receives.
check_g_pings() {
        local t
        pinged() {
                t=$(prop WatchdogTimestampMonotonic tpd.service)
                [ -n "$t" ] && [ "$t" != 0 ] && [ "$t" != "$watchdog_t0" ]
        }
        if wait_for "$(awk -v s="$watchdog_since" -v now="$(date +%s.%N)" 'BEGIN { w = 26 - (now - s); print (w > 0 ? w : 0) }')" pinged; then
                pass g "WATCHDOG=1 received (WatchdogTimestampMonotonic $watchdog_t0 -> $t) without a watchdog restart (NRestarts $(prop NRestarts tpd.service))"
        else
                fail g "no WATCHDOG=1 within 26 s (WatchdogTimestampMonotonic stays $watchdog_t0)"
        fi
}

# h. systemd-analyze verify and security.
security_score=
check_h() {
        local out rc
        out=$(cx systemd-analyze verify "$socket_path" "$service_path" 2>&1)
        rc=$?
        [ -n "$out" ] && sed 's/^/  verify: /' <<<"$out"
        check h "systemd-analyze verify $socket_path $service_path (exit $rc, no message about tpd units)" \
                eval '[ "$rc" -eq 0 ] && ! grep -q "tpd\." <<<"$out"'
        out=$(cx systemd-analyze security tpd.service 2>&1)
        security_score=$(sed -n 's/.*Overall exposure level for tpd.service: \([0-9.]*\).*/\1/p' <<<"$out")
        if [ -n "$security_score" ] && awk -v s="$security_score" 'BEGIN { exit !(s <= 2.0) }'; then
                pass h "systemd-analyze security tpd.service: $(grep -o 'Overall exposure level.*' <<<"$out")"
        else
                fail h "systemd-analyze security tpd.service rates it ${security_score:-?} (want <= 2.0)"
                grep -E '^✗|Overall' <<<"$out"
        fi
}

# i. Access: the tracing group, and nobody else.
check_i() {
        local out rc
        cx useradd -M -G tracing tpdmember && cx useradd -M tpdother ||
                { fail i "could not create the test users"; return; }
        out=$(cx setpriv --reuid=tpdmember --regid=tpdmember --init-groups tpctl status 2>&1)
        rc=$?
        check i "a user in group tracing (supplementary) can 'tpctl status' (exit $rc)" \
                eval '[ "$rc" -eq 0 ] && grep -q "^Instance:" <<<"$out"'
        [ "$rc" -eq 0 ] || say "$out"
        out=$(cx setpriv --reuid=tpdother --regid=tpdother --init-groups tpctl status 2>&1)
        rc=$?
        check i "a user not in it is refused (exit $rc: $(head -n 1 <<<"$out"))" \
                eval '[ "$rc" -ne 0 ] && grep -Eq "Permission denied|PermissionDenied" <<<"$out"'
        # The second lock: with the socket opened to everyone, tpd's own SO_PEERCRED check still
        # refuses the non-member.
        if cx chmod 0666 /run/tpd/io.tpd.tracing; then
                out=$(cx setpriv --reuid=tpdother --regid=tpdother --init-groups \
                        tpctl call io.tpd.tracing.GetStatus 2>&1)
                rc=$?
                cx chmod 0660 /run/tpd/io.tpd.tracing
                check i "with the socket chmod 0666, tpd itself answers the non-member PermissionDenied (exit $rc, $(grep -o '"error": *"[^"]*"' <<<"$out"))" \
                        eval '[ "$rc" -eq 1 ] && grep -q "org.varlink.service.PermissionDenied" <<<"$out"'
        else
                fail i "could not chmod the socket to test tpd's own credential check"
        fi
}

# u. --unit: tpctl asks the container's systemd for a unit's cgroup, and tpd streams the records of
# the units it starts. In the container's PID namespace tpd cannot read which tasks a cgroup holds
# (cgroup.threads lists the container's pids, records carry the kernel's): it follows the moves
# the kernel records, by cgroup id, and what the moved tasks fork.
stream_following() {
        cx tpctl status --json=short 2>/dev/null | jq -e '[.connections[] | select(has("followed"))] | length == 1' \
                >/dev/null
}
check_u() {
        local out rc n outside
        out=$(cx tpctl stream --unit tpd -e syscalls:sys_enter_getppid --duration 1 2>&1)
        rc=$?
        check u "tpctl stream --unit tpd: systemd names the cgroup of tpd.service, tpd takes it (exit $rc)" \
                eval '[ "$rc" -eq 0 ]'
        [ "$rc" -eq 0 ] || say "$out"
        out=$(cx tpctl stream --unit tpd-nosuch.service --duration 1 2>&1)
        rc=$?
        check u "--unit of a unit that is not loaded: exit $rc, '$(head -n 1 <<<"$out")'" \
                eval '[ "$rc" -eq 1 ] && grep -q "is not loaded" <<<"$out"'

        # A slice started empty; a service run in it once the stream is live, and the same work
        # outside it at the same time. Each sh calls getppid once as it starts: 1 + 40.
        printf '[Unit]\nDescription=tpd system test slice\n' | cx tee /run/systemd/system/tpdprobe.slice >/dev/null
        cx systemctl daemon-reload && cx systemctl start tpdprobe.slice ||
                { fail u "could not start tpdprobe.slice"; return; }
        cx sh -c 'tpctl stream --unit tpdprobe.slice -e syscalls:sys_enter_getppid >/run/tpd-unit.ndjson \
                2>/run/tpd-unit.err & echo $! >/run/tpd-unit.pid'
        wait_for 10 stream_following || { fail u "the stream of tpdprobe.slice did not start: $(cx cat /run/tpd-unit.err)"; return; }
        cx sh -c 'for i in $(seq 40); do sh -c :; done' &
        outside=$!
        cx systemd-run -q --wait --slice=tpdprobe.slice --unit=tpdprobe-run sh -c 'for i in $(seq 40); do sh -c :; done'
        rc=$?
        wait "$outside"
        sleep 0.5
        cx sh -c 'kill -INT "$(cat /run/tpd-unit.pid)"'
        wait_for 5 eval '! cx tpctl status --json=short | jq -e "[.connections[] | select(has(\"followed\"))] | length > 0" >/dev/null'
        n=$(cx cat /run/tpd-unit.ndjson | jq -s '[.[] | select(.event == "syscalls:sys_enter_getppid")] | length')
        check u "--unit tpdprobe.slice: the service run in it after the stream began, exactly (41 calls, got ${n:-none}; systemd-run exit $rc), none of the same work outside it" \
                eval '[ "$rc" -eq 0 ] && [ "${n:-0}" -eq 41 ]'
        cx systemctl stop tpdprobe.slice
}

# x. tpd-export.service: starts as a dynamic user in group tracing, exports, restarts on failure.
export_security_score=
check_x() {
        local main restarts n1 n2 out subject uid
        export_running() {
                [ "$(prop ActiveState tpd-export.service)" = active ] &&
                        [ "$(prop SubState tpd-export.service)" = running ] &&
                        cx journalctl -u tpd-export.service -o cat --no-pager 2>/dev/null | grep -q "exporting to JetStream"
        }
        messages() { cx nats-consume "$NATS_URL" TPD count 2>/dev/null; }
        # Healthy = JetStream is up, not only the client port.
        nats_up() {
                cx bash -c 'exec 3<>/dev/tcp/127.0.0.1/18222 && printf "GET /healthz HTTP/1.0\r\n\r\n" >&3 && cat <&3' 2>/dev/null |
                        grep -q '"ok"'
        }
        # Whatever failed, export must not stay in its restart loop: it would activate tpd.socket
        # again behind check e.
        x_done() {
                cx systemctl stop tpd-export.service nats-systest.service >/dev/null 2>&1
                cx systemctl reset-failed tpd-export.service >/dev/null 2>&1
        }

        cx systemd-run -q --unit=nats-systest -p StateDirectory=nats-systest \
                /usr/sbin/nats-server -c /etc/nats-systest.conf ||
                { fail x "could not start nats-server in the container"; return; }
        if ! wait_for 20 nats_up; then
                fail x "nats-server in the container is not healthy (JetStream) on 127.0.0.1:14222 within 20 s"
                cx journalctl -u nats-systest.service -o cat --no-pager | tail -n 20
                x_done
                return
        fi
        cx systemctl start tpd-export.service || fail x "systemctl start tpd-export failed"
        if wait_for 15 export_running; then
                main=$(prop MainPID tpd-export.service)
                uid=$(cx stat -c %u "/proc/$main" 2>/dev/null)
                pass x "tpd-export.service is active/running and exporting (MainPID $main)"
                check x "it runs as a dynamic user, not root (uid $uid)" eval '[ -n "$uid" ] && [ "$uid" != 0 ]'
                check_x_secrets "$main" "$uid"
        else
                fail x "tpd-export.service is not exporting: $(prop ActiveState tpd-export.service)/$(prop SubState tpd-export.service)"
                cx journalctl -u tpd-export.service -u nats-systest.service -o cat --no-pager | tail -n 30
                x_done
                return
        fi
        if wait_for 15 eval 'n1=$(messages); [ "${n1:-0}" -gt 0 ]'; then
                subject=$(cx bash -c 'nats-consume "$1" TPD dump | head -n 1 | cut -f 1' - "$NATS_URL")
                check x "records arrive in JetStream stream TPD ($n1 messages, first on '$subject')" \
                        eval '[[ $subject == tpd.*.sched.sched_switch ]]'
        else
                fail x "no message in JetStream stream TPD within 15 s"
        fi

        restarts=$(prop NRestarts tpd-export.service)
        cx systemctl kill -s KILL tpd-export.service || fail x "systemctl kill -s KILL tpd-export failed"
        export_restarted() {
                export_running && [ "$(prop NRestarts tpd-export.service)" -gt "$restarts" ] &&
                        [ "$(prop MainPID tpd-export.service)" != "$main" ]
        }
        if wait_for 20 export_restarted; then
                pass x "Restart=on-failure restarted tpd-export after SIGKILL (NRestarts $restarts -> $(prop NRestarts tpd-export.service))"
                n1=$(messages)
                check x "the restarted export publishes again ($n1 messages, then more)" \
                        wait_for 15 eval 'n2=$(messages); [ "${n2:-0}" -gt "${n1:-0}" ]'
        else
                fail x "tpd-export was not restarted: $(prop ActiveState tpd-export.service)/$(prop SubState tpd-export.service)"
        fi

        out=$(cx systemd-analyze security tpd-export.service 2>&1)
        export_security_score=$(sed -n 's/.*Overall exposure level for tpd-export.service: \([0-9.]*\).*/\1/p' <<<"$out")
        check x "systemd-analyze security tpd-export.service: ${export_security_score:-?} (want <= 2.0)" \
                eval '[ -n "$export_security_score" ] && awk -v s="$export_security_score" "BEGIN { exit !(s <= 2.0) }"'
        cx systemctl stop tpd-export.service
        check x "systemctl stop tpd-export: exit by SIGTERM counts as success (Result=$(prop Result tpd-export.service))" \
                test "$(prop Result tpd-export.service)" = success
        x_done
}

# x. The servers' password: from the credential, and nowhere else to be read.
check_x_secrets() {
        local main=$1 uid=$2 cmdline environ journal cred mode
        cmdline=$(cx cat "/proc/$main/cmdline" | tr '\0' ' ')
        check x "the password is not on export's command line: '$cmdline'" \
                eval '[ -n "$cmdline" ] && ! grep -qF "$NATS_PASSWORD" <<<"$cmdline"'
        check x "export reads the servers from its credential (--servers-file=/run/credentials/tpd-export.service/nats-servers)" \
                grep -qF -- "--servers-file=/run/credentials/tpd-export.service/nats-servers" <<<"$cmdline"
        environ=$(cx cat "/proc/$main/environ" | tr '\0' '\n')
        check x "the password is not in export's environment ($(grep -c . <<<"$environ") variables)" \
                eval '[ -n "$environ" ] && ! grep -qF "$NATS_PASSWORD" <<<"$environ"'
        journal=$(cx journalctl -u tpd-export.service -o cat --no-pager 2>/dev/null)
        check x "the journal names the server without its password ($(grep -o "exporting to.*" <<<"$journal" | tail -n 1))" \
                grep -qF "at nats://…@127.0.0.1:14222 as" <<<"$journal"
        check x "the password is nowhere in the journal" eval '! cx journalctl -o cat --no-pager | grep -qF "$NATS_PASSWORD"'
        cred=$(cx stat -c '%a %u' /run/credentials/tpd-export.service/nats-servers 2>&1)
        mode=${cred%% *}
        # systemd gives the service's user read access by ownership, or by an ACL on a root-owned
        # file where the file system has them.
        check x "the credential is no one else's: no group or other access (mode and owner: $cred)" \
                eval '[[ $mode =~ ^[0-7]+$ ]] && [ $((8#$mode & 8#077)) -eq 0 ] && { [ "${cred#* }" = "$uid" ] || [ "${cred#* }" = 0 ]; }'
        check x "the installed /etc/tpd/nats-servers is root's with mode 0600 ($(stat -c '%a %U' "$DESTDIR/etc/tpd/nats-servers"))" \
                test "$(stat -c '%a %u' "$DESTDIR/etc/tpd/nats-servers")" = "600 0"
        check x "the server refuses a client without the password (so export used it)" \
                eval '! cx nats-consume nats://127.0.0.1:14222 TPD count >/dev/null 2>&1'
}

# e. Stop: no instance, nothing enabled, the top level untouched.
check_e() {
        local state toplevel_after
        cx systemctl stop tpd.service tpd.socket || fail e "systemctl stop tpd tpd.socket failed"
        state="$(prop ActiveState tpd.service)/$(prop ActiveState tpd.socket)"
        check e "tpd.service and tpd.socket are inactive ($state, Result=$(prop Result tpd.service))" \
                eval '[ "$state" = inactive/inactive ] && [ "$(prop Result tpd.service)" = success ]'
        check e "no instance $TRACEFS/instances/$INSTANCE (inside the container)" \
                eval '! cx test -e "$TRACEFS/instances/$INSTANCE"'
        check e "no instance $TRACEFS/instances/$INSTANCE (on the host)" test ! -e "$TRACEFS/instances/$INSTANCE"
        check e "the socket file is gone" eval '! cx test -e /run/tpd/io.tpd.tracing'
        toplevel_after=$(sort "$TRACEFS/set_event"; cat "$TRACEFS/tracing_on")
        check e "the top-level instance's enabled events and tracing_on are as before ($(grep -c . "$TRACEFS/set_event") events enabled there)" \
                test "$toplevel_after" = "$toplevel_before"
}

# f. Priorities in the journal.
check_f() {
        local json
        json=$(cx journalctl -u tpd.service -p info -o json --no-pager 2>/dev/null)
        priorities() {
                jq -r --arg m "$1" 'select((.MESSAGE | type) == "string" and (.MESSAGE | startswith($m))) | .PRIORITY' \
                        <<<"$json" | sort -u | tr '\n' ' '
        }
        local ready reclaim stopping denying raw
        ready=$(priorities "Tracing in instance")
        reclaim=$(priorities "Reclaimed tracefs instance")
        stopping=$(priorities "Received SIGTERM")
        denying=$(priorities "Denying access to uid")
        raw=$(jq -r 'select((.MESSAGE | type) == "string" and (.MESSAGE | test("^<[0-7]>"))) | .MESSAGE' <<<"$json" | head -n 3)
        check f "'Tracing in instance ...' has PRIORITY 6 (found: ${ready:-none})" test "$ready" = "6 "
        check f "'Reclaimed tracefs instance ...' has PRIORITY 5 (found: ${reclaim:-none})" test "$reclaim" = "5 "
        check f "'Received SIGTERM, stopping.' has PRIORITY 6 (found: ${stopping:-none})" test "$stopping" = "6 "
        check f "'Denying access to uid ...' has PRIORITY 5 (found: ${denying:-none})" test "$denying" = "5 "
        check f "no message kept a raw <N> prefix${raw:+: $raw}" test -z "$raw"
}

t0=$(date +%s.%N)
check_a
check_b
check_c
check_d
watchdog_t0=$(prop WatchdogTimestampMonotonic tpd.service)
watchdog_since=$(date +%s.%N)
check_g
check_i
check_u
check_h
check_g_pings
check_x
check_e
check_f
t_checks=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')

say ""
say "=== The container's journal: tpd's units, and every warning that names tpd ==="
cx journalctl -u tpd.socket -u tpd.service -u tpd-export.service -o short-monotonic --no-pager 2>&1 | tail -n 80
cx journalctl -p warning -o short-monotonic --no-pager 2>&1 | grep -i 'tpd' | grep -v ' tpd\[' | tail -n 20

t0=$(date +%s.%N)
stop_container
t_poweroff=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
check "-" "the container powered off and nspawn exited ($t_poweroff s)" \
        eval '! alive "$timeout_pid" && ! alive "$pid1"'

say ""
say "Timings: root ${t_root} s, build+install ${t_build} s, boot ${t_boot} s, checks ${t_checks} s, poweroff ${t_poweroff} s"
[ -n "$security_score" ] && say "Security exposure of tpd.service: $security_score"
[ -n "$export_security_score" ] && say "Security exposure of tpd-export.service: $export_security_score"
summary
[ "$n_fail" -eq 0 ]
