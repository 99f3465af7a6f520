#!/usr/bin/env bash
# ci/stress.sh: proof that the gate's verdicts do not depend on machine
# speed. The harness runs starved of CPU, in a cgroup of its own with a quota
# of 20% of one core, beside a busy load on every core, and must reach
# exactly the verdicts of an unloaded run:
#   - every replay token gives the same verdict REPEAT times out of REPEAT;
#   - the explore of the report's race finds the same set of failing
#     schedules as unloaded (against the legacy build, which has some).
#
# Usage: ci/stress.sh TASKGATE LEGACY_TASKGATE [REPEAT]
#   TASKGATE         a failpoints build of taskgate (the fixed engine)
#   LEGACY_TASKGATE  a build carrying the report's bug: the zoo build, with
#                    TASKGATE_SEEDED_BUG=legacy-prestart-skip in the
#                    environment (which TASKGATE ignores)
#   REPEAT           runs per replay token (default 100)
# Run as root. Prints a summary table; exits 1 on any differing verdict.
set -euo pipefail

[ $# -ge 2 ] || { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; exit 2; }
tg=$(readlink -f "$1")
legacy=$(readlink -f "$2")
repeat=${3:-100}
[ "$(id -u)" = 0 ] || { echo "stress: error: needs root (cgroups, the harness)" >&2; exit 2; }
for b in "$tg" "$legacy"; do [ -x "$b" ] || { echo "stress: error: not executable: $b" >&2; exit 2; }; done

work=$(mktemp -d "${TMPDIR:-/tmp}/tg-stress.XXXXXX")
cg=
load_pids=()
cleanup() {
    local pid
    for pid in "${load_pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    if [ -n "$cg" ] && [ -d "$cg" ]; then
        # Nothing of ours is left in it once its commands returned.
        rmdir "$cg" 2>/dev/null || echo "stress: warning: could not remove $cg" >&2
    fi
    rm -rf "$work"
}
trap cleanup EXIT

# The starved cgroup, created under the cgroup this script lives in.
quota_us=20000 period_us=100000
if [ -f /sys/fs/cgroup/cgroup.controllers ]; then
    own=$(sed -n 's/^0:://p' /proc/self/cgroup)
    parent=/sys/fs/cgroup${own%/}
    grep -qw cpu "$parent/cgroup.subtree_control" 2>/dev/null ||
        echo +cpu >"$parent/cgroup.subtree_control" 2>/dev/null || {
        echo "stress: error: cgroup v2: the cpu controller is not delegated to $parent" \
             "(run under a delegated cgroup, e.g. systemd-run --scope -p Delegate=yes)" >&2
        exit 2
    }
    cg=$parent/taskgate-stress.$$
    mkdir "$cg"
    echo "$quota_us $period_us" >"$cg/cpu.max"
else
    own=$(awk -F: '$2 ~ /(^|,)cpu(,|$)/ { print $3 }' /proc/self/cgroup)
    mount=$(awk '$3 == "cgroup" && $4 ~ /(^|,)cpu(,|$)/ { print $2; exit }' /proc/mounts)
    [ -n "$mount" ] || { echo "stress: error: no cgroup v1 cpu hierarchy mounted" >&2; exit 2; }
    cg=$mount${own%/}/taskgate-stress.$$
    mkdir "$cg"
    echo "$period_us" >"$cg/cpu.cfs_period_us"
    echo "$quota_us" >"$cg/cpu.cfs_quota_us"
fi
echo "stress: starved cgroup $cg: ${quota_us}us of CPU per ${period_us}us"

failures=0
summary=()
# check NAME MUST_PRINT COMMAND...: runs COMMAND in the starved cgroup; it
# passes if it exits 0 and printed a line matching MUST_PRINT (grep -E).
check() {
    local name=$1 must=$2 t0 verdict=PASS
    shift 2
    t0=$(date +%s)
    sh -c 'echo $$ >"$0/cgroup.procs" && exec "$@"' "$cg" "$@" >"$work/out" 2>&1 || verdict=FAIL
    [ "$verdict" = PASS ] && ! grep -qE "$must" "$work/out" && verdict=FAIL
    summary+=("$verdict  $name ($(($(date +%s) - t0))s)")
    if [ "$verdict" = FAIL ]; then
        failures=$((failures + 1))
        tail -n 40 "$work/out" | sed 's/^/    /'
    fi
    grep -E 'distinct verdicts|^ +[0-9]+/[0-9]+ |schedules? run in' "$work/out" | sed 's/^/    /' || true
}

echo "stress: the unloaded reference"
"$legacy" explore sidecar-stop --random 0 --expect-violation \
    --failing-tokens "$work/unloaded.txt" >"$work/unloaded.out" 2>&1 || {
    cat "$work/unloaded.out"
    echo "stress: error: the unloaded legacy explore found no violation" >&2
    exit 1
}
failing_token=$(head -n 1 "$work/unloaded.txt")
echo "stress: unloaded legacy explore: $(wc -l <"$work/unloaded.txt") failing schedules"

echo "stress: a busy load on each of $(nproc) cores"
for _ in $(seq "$(nproc)"); do
    sh -c 'while :; do :; done' &
    load_pids+=($!)
done

report='sidecar-stop@tr=1.4/up=2/stop=0/first=tr/swaps='
check "fixed build: replay the report's interleaving x$repeat: one verdict, pass" \
    "^ *$repeat/$repeat  pass$" "$tg" replay "$report" --repeat "$repeat"
check "legacy build: replay its first failing schedule x$repeat: one verdict, the failure" \
    "^ *$repeat/$repeat  FAIL " "$legacy" replay "$failing_token" --repeat "$repeat"
check "legacy build: explore sidecar-stop under load" \
    "failing" "$legacy" explore sidecar-stop --random 0 --expect-violation \
    --failing-tokens "$work/loaded.txt"
if diff -u "$work/unloaded.txt" "$work/loaded.txt" >"$work/diff"; then
    summary+=("PASS  legacy build: the same $(wc -l <"$work/loaded.txt") failing schedules as unloaded")
else
    summary+=("FAIL  legacy build: the failing schedules differ from the unloaded run")
    failures=$((failures + 1))
    sed 's/^/    /' "$work/diff"
fi
check "fixed build: explore sidecar-stop under load: no failing schedule, as unloaded" \
    ", 0 failing$" "$tg" explore sidecar-stop --random 5

echo
echo "stress: summary (CPU quota 20% of one core, busy load on every core)"
for s in "${summary[@]}"; do echo "  $s"; done
[ "$failures" = 0 ]
