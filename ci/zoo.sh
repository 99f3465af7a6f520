#!/usr/bin/env bash
# ci/zoo.sh: the bug zoo. Each seeded bug (harness/faults/src/seeded.rs, one
# cargo feature `bug-<name>` each) re-creates one lifecycle bug from an
# orchestrator's history; the report's own bug is the legacy build.
#
#   ci/zoo.sh list                  the seeded bugs' features, one per line
#   ci/zoo.sh build                 builds each into target/zoo/<feature>/
#   ci/zoo.sh run LEGACY_DIR        runs the gate on each (and on the legacy
#                                   build in LEGACY_DIR): it must fail, on an
#                                   invariant, within 60 s of its start at
#                                   the reference VM's pace
#
# `run` prints one line per bug with the run that caught it and the time to
# that first failure, and exits non-zero if any bug was not caught in time.
#
# No verdict may depend on how loaded the machine is, so the 60 s are the
# reference VM's: the fixed build's whole gate is timed beside the bugs
# (before and after them; the slower run counts), and a machine that takes
# longer than REFERENCE_GATE_S for it is that many times slower. Each line
# shows the raw time and the time at the reference pace.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# awk and printf read and write decimal points, whatever the locale.
export LC_ALL=C

ZOO_DIR=target/zoo
LIMIT_S=60
# The fixed build's whole gate on the reference VM (the project's 2-core VM,
# debug build, nothing else running), in seconds. Raise it when the
# catalogue grows, from an unloaded run's "gate: N runs in Ts" line.
REFERENCE_GATE_S=40
# How many times slower than the reference this machine runs the gate now.
SLOWDOWN=1

bugs() {
    sed -n 's/^\(bug-[a-z0-9-]*\) = \[\]$/\1/p' harness/faults/Cargo.toml
}

build() {
    local bug
    for bug in $(bugs); do
        echo "== building $bug"
        cargo build --bins --features "failpoints,taskgate-faults/$bug"
        mkdir -p "$ZOO_DIR/$bug"
        cp target/debug/taskgate target/debug/taskgate-executor "$ZOO_DIR/$bug/"
    done
    # Back to the fixed binaries (cached: only copied into place again).
    cargo build --bins --features failpoints
}

# catch NAME DIR: the gate on DIR's build must fail on a violation; its
# time to that failure is appended to $RESULTS (judged once paced).
catch() {
    local name=$1 dir=$2 out rc line secs violation
    out=$(mktemp "${TMPDIR:-/tmp}/ci-zoo.XXXXXX")
    set +e
    RUST_BACKTRACE=0 "$dir/taskgate" gate --fail-fast --junit "$dir/gate.xml" >"$out" 2>&1
    rc=$?
    set -e
    line=$(grep '^first failure: ' "$out" || true)
    secs=$(sed -n 's/.*, after \([0-9.]*\)s$/\1/p' <<<"$line")
    if [ "$rc" = 0 ] || [ -z "$secs" ] || ! grep -q '^  violation: ' "$out"; then
        echo "NOT CAUGHT  $name (gate exit $rc); its output:"
        cat "$out"
        rm -f "$out"
        return 1
    fi
    violation=$(grep -m1 '^  violation: ' "$out" | sed 's/^  violation: //' | cut -c1-100)
    rm -f "$out"
    printf '%s\t%s\t%s\t%s\n' "$name" "$secs" "${line#first failure: }" "$violation" >>"$RESULTS"
}

# judge: each caught bug's time at the reference pace must be under the
# limit; counts the ones that are not in SLOW.
judge() {
    local name secs where violation paced
    SLOW=0
    while IFS=$'\t' read -r name secs where violation; do
        paced=$(awk -v s="$secs" -v f="$SLOWDOWN" 'BEGIN { printf "%.1f", s / f }')
        if awk -v s="$secs" -v f="$SLOWDOWN" -v l="$LIMIT_S" 'BEGIN { exit !(s / f < l) }'; then
            printf 'caught  %-34s %6.1fs (%5.1fs at reference pace)  %s\n        %s\n' \
                "$name" "$secs" "$paced" "$where" "$violation"
        else
            printf 'SLOW    %-34s %6.1fs (%5.1fs at reference pace; limit %ss)  %s\n' \
                "$name" "$secs" "$paced" "$LIMIT_S" "$where"
            SLOW=$((SLOW + 1))
        fi
    done <"$RESULTS"
}

# pace: times the fixed build's whole gate (it must pass) and raises
# SLOWDOWN to this machine's slowdown against the reference, if larger.
pace() {
    local started took
    started=$(date +%s.%N)
    RUST_BACKTRACE=0 target/debug/taskgate gate >/dev/null 2>&1 || {
        echo "ci/zoo.sh: the fixed build's gate failed: the zoo cannot be paced" >&2
        exit 1
    }
    took=$(awk -v a="$started" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
    SLOWDOWN=$(awk -v t="$took" -v r="$REFERENCE_GATE_S" -v f="$SLOWDOWN" \
        'BEGIN { x = t / r; if (x < f) x = f; printf "%.2f", x }')
    echo "zoo: the fixed build's gate took ${took}s here (reference ${REFERENCE_GATE_S}s): slowdown ${SLOWDOWN}"
}

run() {
    local legacy=$1 bug missed=0 n=0
    RESULTS=$(mktemp "${TMPDIR:-/tmp}/ci-zoo-results.XXXXXX")
    trap 'rm -f "$RESULTS"' EXIT
    pace
    catch legacy-prestart-skip "$legacy" || missed=$((missed + 1))
    n=$((n + 1))
    for bug in $(bugs); do
        [ -x "$ZOO_DIR/$bug/taskgate" ] || {
            echo "ci/zoo.sh: $ZOO_DIR/$bug/taskgate is missing: run ci/zoo.sh build" >&2
            exit 2
        }
        catch "$bug" "$ZOO_DIR/$bug" || missed=$((missed + 1))
        n=$((n + 1))
    done
    pace
    judge
    echo "zoo: $((n - missed - SLOW)) of $n seeded bugs caught, each within ${LIMIT_S}s at the reference pace"
    [ "$missed" = 0 ] && [ "$SLOW" = 0 ]
}

case "${1:-}" in
list) bugs ;;
build) build ;;
run)
    [ $# = 2 ] || { echo "usage: ci/zoo.sh run LEGACY_DIR" >&2; exit 2; }
    run "$2"
    ;;
*)
    echo "usage: ci/zoo.sh list | build | run LEGACY_DIR" >&2
    exit 2
    ;;
esac
