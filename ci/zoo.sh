#!/usr/bin/env bash
# ci/zoo.sh: the bug zoo. Each seeded bug (harness/faults/src/seeded.rs)
# re-creates one lifecycle bug from an orchestrator's history, the report's
# own first. One zoo build (the `zoo` feature) carries them all; each run
# chooses one by TASKGATE_SEEDED_BUG.
#
#   ci/zoo.sh list                  the seeded bugs' names, one per line
#   ci/zoo.sh build                 builds the zoo into target/zoo/, and puts
#                                   the binaries target/debug had back
#   ci/zoo.sh run                   runs the gate on each bug: it must fail,
#                                   on an invariant, within 60 s of its
#                                   start at the reference VM's pace
#
# `run` prints one line per bug with the run that caught it and the time to
# that first failure, and exits non-zero if any bug was not caught in time.
# Each gate has a lab of its own, and a gate mostly waits on its runs'
# events, so ZOO_JOBS gates (default: the core count) run at once, each
# one run at a time (--jobs 1): the zoo's parallelism is its gates.
#
# No verdict may depend on how loaded the machine is, so the 60 s are the
# reference VM's: bug-free gates are timed the way the bugs' gates run,
# ZOO_JOBS at once, and a machine that takes longer than REFERENCE_GATE_S
# for one is that many times slower (the slowest counts). Each line shows
# the raw time and the time at the reference pace.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# awk and printf read and write decimal points, whatever the locale.
export LC_ALL=C

ZOO_DIR=target/zoo
BUG_ENV=TASKGATE_SEEDED_BUG
LIMIT_S=60
# The fixed build's whole gate on the reference VM (the project's 2-core VM,
# debug build, nothing else running), in seconds. Raise it when the
# catalogue grows, from an unloaded run's "gate: N runs in Ts" line.
REFERENCE_GATE_S=40
# How many times slower than the reference this machine runs the gate now.
SLOWDOWN=1
# Gates run at once.
ZOO_JOBS=${ZOO_JOBS:-$(nproc)}
[[ $ZOO_JOBS =~ ^[1-9][0-9]*$ ]] || {
    echo "ci/zoo.sh: ZOO_JOBS wants a whole number >= 1 (got '$ZOO_JOBS')" >&2
    exit 2
}

bugs() { # the names in seeded.rs's seeded_bugs! table, in its order
    sed -n 's/^    [A-Za-z]* = "\([a-z0-9-]*\)",$/\1/p' harness/faults/src/seeded.rs
}

build() {
    local bin kept=0 rc=0
    echo "== building the zoo: every seeded bug, one chosen per run"
    mkdir -p "$ZOO_DIR"
    # The zoo's build puts its binaries in target/debug. The ones there
    # before are kept (linked, not copied) and put back after: building
    # them again with other features than they were built with would
    # compile every crate of the workspace once more.
    for bin in taskgate taskgate-executor; do
        [ -x "target/debug/$bin" ] && ln -f "target/debug/$bin" "$ZOO_DIR/.fixed-$bin" && kept=$((kept + 1))
    done
    cargo build --bins --features zoo || rc=$?
    if [ "$rc" = 0 ]; then
        cp target/debug/taskgate target/debug/taskgate-executor "$ZOO_DIR/" || rc=$?
    fi
    if [ "$kept" = 2 ]; then
        for bin in taskgate taskgate-executor; do mv -f "$ZOO_DIR/.fixed-$bin" "target/debug/$bin"; done
    else
        rm -f "$ZOO_DIR"/.fixed-*
        if [ "$rc" = 0 ]; then cargo build --bins --features failpoints || rc=$?; fi
    fi
    return "$rc"
}

# kept_labs OUT: the labs a gate whose output is OUT kept for its failing runs.
kept_labs() {
    sed -n "s/^failing runs' data kept in //p" "$1" | grep '/taskgate-lab\.' || true
}

# catch NAME: the zoo's gate with bug NAME chosen must fail on a violation;
# its time to that failure is written to $RESULTS/NAME (judged once paced).
catch() {
    local name=$1 out rc line secs violation kept
    out=$(mktemp "${TMPDIR:-/tmp}/ci-zoo.XXXXXX")
    set +e
    # Here the failure is the point (its history is in the JUnit file): the
    # gate removes its lab, failing runs and all, and one it leaves behind
    # is the leftover check's to find.
    env RUST_BACKTRACE=0 "$BUG_ENV=$name" "$ZOO_DIR/taskgate" gate --jobs 1 --fail-fast \
        --discard-failing-runs --junit "$ZOO_DIR/$name.xml" >"$out" 2>&1
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
    printf '%s\t%s\t%s\t%s\n' "$name" "$secs" "${line#first failure: }" "$violation" >"$RESULTS/$name"
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
    done < <(for name in $(bugs); do cat "$RESULTS/$name" 2>/dev/null || true; done)
}

# pace BUILD...: times a whole gate that must pass, of the fixed build
# (with a bug named, which it must ignore) or of the zoo with none chosen,
# and writes its time to $RESULTS/pace.N.
pace() {
    local started took out
    out=$(mktemp "${TMPDIR:-/tmp}/ci-zoo-pace.XXXXXX")
    started=$(date +%s.%N)
    env RUST_BACKTRACE=0 "$@" gate --jobs 1 --junit "$out.xml" >"$out" 2>&1 || {
        echo "ci/zoo.sh: a bug-free gate failed ($*): the zoo cannot be paced; its failures:" >&2
        grep -v '^\[[0-9]*/[0-9]*] pass ' "$out" >&2
        # Kept for a person, out of the shared memory the host's leftover
        # check watches.
        kept_labs "$out" | while IFS= read -r kept; do
            mkdir -p "$ZOO_DIR/kept" && mv -- "$kept" "$ZOO_DIR/kept/" &&
                echo "ci/zoo.sh: its data moved to $ZOO_DIR/kept/${kept##*/}" >&2
        done
        rm -f "$out" "$out.xml"
        return 1
    }
    rm -f "$out" "$out.xml"
    took=$(awk -v a="$started" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
    echo "zoo: a bug-free gate ($*) took ${took}s here (reference ${REFERENCE_GATE_S}s)"
    echo "$took" >"$(mktemp "$RESULTS/pace.XXXXXX")"
}

# at_most_jobs: waits until fewer than ZOO_JOBS gates run.
at_most_jobs() {
    while [ "$(jobs -rp | wc -l)" -ge "$ZOO_JOBS" ]; do wait -n || true; done
}

# paced: SLOWDOWN from the slowest bug-free gate.
paced() {
    local took
    for took in $(cat "$RESULTS"/pace.*); do
        SLOWDOWN=$(awk -v t="$took" -v r="$REFERENCE_GATE_S" -v f="$SLOWDOWN" \
            'BEGIN { x = t / r; if (x < f) x = f; printf "%.2f", x }')
    done
    echo "zoo: $ZOO_JOBS gates at once; slowdown against the reference ${SLOWDOWN}"
}

run() {
    local bug i n paces missed
    RESULTS=$(mktemp -d "${TMPDIR:-/tmp}/ci-zoo-results.XXXXXX")
    trap 'rm -rf "$RESULTS"' EXIT
    [ -x "$ZOO_DIR/taskgate" ] || {
        echo "ci/zoo.sh: $ZOO_DIR/taskgate is missing: run ci/zoo.sh build" >&2
        exit 2
    }
    # Bug-free gates, run as the bugs' gates will be: the fixed build
    # carries no bug even when one is named, and the zoo with no bug chosen
    # is the fixed engine.
    paces=$((ZOO_JOBS > 2 ? ZOO_JOBS : 2))
    for ((i = 0; i < paces; i++)); do
        at_most_jobs
        if ((i % 2 == 0)); then
            pace "$BUG_ENV=$(bugs | head -n 1)" target/debug/taskgate &
        else
            pace "$ZOO_DIR/taskgate" &
        fi
    done
    wait
    if [ "$(find "$RESULTS" -name 'pace.*' | wc -l)" != "$paces" ]; then
        echo "ci/zoo.sh: the zoo cannot be paced" >&2
        exit 1
    fi
    paced
    for bug in $(bugs); do
        at_most_jobs
        catch "$bug" &
    done
    wait
    n=$(bugs | wc -l)
    missed=$((n - $(find "$RESULTS" -type f ! -name 'pace.*' | wc -l)))
    judge
    echo "zoo: $((n - missed - SLOW)) of $n seeded bugs caught, each within ${LIMIT_S}s at the reference pace"
    [ "$missed" = 0 ] && [ "$SLOW" = 0 ]
}

case "${1:-}" in
list) bugs ;;
build) build ;;
run) run ;;
*)
    echo "usage: ci/zoo.sh list | build | run" >&2
    exit 2
    ;;
esac
