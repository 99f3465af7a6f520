#!/usr/bin/env bash
# ci/zoo.sh: the bug zoo. Each seeded bug (harness/faults/src/seeded.rs, one
# cargo feature `bug-<name>` each) re-creates one lifecycle bug from an
# orchestrator's history; the report's own bug is the legacy build.
#
#   ci/zoo.sh list                  the seeded bugs' features, one per line
#   ci/zoo.sh build                 builds each into target/zoo/<feature>/
#   ci/zoo.sh run LEGACY_DIR        runs the gate on each (and on the legacy
#                                   build in LEGACY_DIR): it must fail, on an
#                                   invariant, within 60 s of its start
#
# `run` prints one line per bug with the run that caught it and the time to
# that first failure, and exits non-zero if any bug was not caught in time.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

ZOO_DIR=target/zoo
LIMIT_S=60

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

# catch NAME DIR: the gate on DIR's build must fail on a violation in time.
catch() {
    local name=$1 dir=$2 out rc line secs
    out=$(mktemp "${TMPDIR:-/tmp}/ci-zoo.XXXXXX")
    set +e
    RUST_BACKTRACE=0 "$dir/taskgate" gate --fail-fast --junit "$dir/gate.xml" >"$out" 2>&1
    rc=$?
    set -e
    line=$(grep '^first failure: ' "$out" || true)
    secs=$(sed -n 's/.*, after \([0-9.]*\)s$/\1/p' <<<"$line")
    if [ "$rc" = 0 ] || [ -z "$line" ] || ! grep -q '^  violation: ' "$out"; then
        echo "NOT CAUGHT  $name (gate exit $rc); its output:"
        cat "$out"
        rm -f "$out"
        return 1
    fi
    local violation
    violation=$(grep -m1 '^  violation: ' "$out" | sed 's/^  violation: //' | cut -c1-100)
    rm -f "$out"
    if awk -v s="$secs" -v l="$LIMIT_S" 'BEGIN { exit !(s < l) }'; then
        printf 'caught  %-34s %6.1fs  %s\n        %s\n' "$name" "$secs" "${line#first failure: }" "$violation"
    else
        printf 'SLOW    %-34s %6.1fs (limit %ss)  %s\n' "$name" "$secs" "$LIMIT_S" "${line#first failure: }"
        return 1
    fi
}

run() {
    local legacy=$1 bug missed=0 n=0
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
    echo "zoo: $((n - missed)) of $n seeded bugs caught, each within ${LIMIT_S}s"
    [ "$missed" = 0 ]
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
