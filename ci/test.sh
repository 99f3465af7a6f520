#!/usr/bin/env bash
# ci/test.sh: THE test command for taskgate (run as root: `sudo ci/test.sh`).
#
# Stages, each with a header and its duration; a failing stage does not stop
# the later ones (except that the test stages need the build):
#   1. build      cargo build of every target, with the failpoints feature
#   2. test       the workspace tests on this host
#   3. gate       the release gate (`taskgate gate`): the whole scenario
#                 catalogue, full enumeration + random schedules, JUnit XML
#                 at target/taskgate-gate.xml; zero violations required
#   4. legacy     proof that the gate can fail: a `legacy-prestart-skip`
#                 build (the report's original logic) must make
#                 `taskgate explore sidecar-stop` find a violation
#   5. qemu v2    the executor, engine and harness tests in a qemu guest
#                 with pure cgroup v2
#   6. qemu v1    the same with pure cgroup v1
#   7. leftovers  this run left no taskgate cgroup, mount or process on this
#                 host (ci/leftovers.sh; what was there before is only listed)
# Ends with the line "N passed, N failed" (stages) and exits non-zero if any
# stage failed or was skipped.
#
# Environment:
#   TASKGATE_SKIP_QEMU=1   skip stages 3 and 4 (counted as skipped => exit 1)
#   QEMU_MATRIX_TIMEOUT    per-guest hard limit in seconds (default 600)
set -uo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2

if [ "$(id -u)" != 0 ]; then
    echo "ci/test.sh: error: the taskgate tests need root: run as root, e.g. sudo ci/test.sh" >&2
    exit 1
fi

# sudo resets PATH (secure_path): find a rustup/cargo install of root or of the invoking user.
if ! command -v cargo >/dev/null 2>&1; then
    for d in "${CARGO_HOME:-$HOME/.cargo}/bin" /root/.cargo/bin /usr/local/cargo/bin; do
        if [ -x "$d/cargo" ]; then PATH=$d:$PATH; break; fi
    done
fi
command -v cargo >/dev/null 2>&1 || {
    echo "ci/test.sh: error: cargo not found (install Rust with rustup, or run .ci/run on a fresh machine)" >&2
    exit 1
}
export PATH RUST_BACKTRACE=${RUST_BACKTRACE:-1}

# ==========================================================================
# THE TEST INVOCATION: change the build/test commands here, and only here.
BUILD_CMD=(cargo build --workspace --all-targets --features failpoints)
TEST_CMD=(cargo test --workspace --features failpoints -- --test-threads=1)
GATE_CMD=(target/debug/taskgate gate --random 10 --junit target/taskgate-gate.xml)
LEGACY_BUILD_CMD=(cargo build --bins --features failpoints,legacy-prestart-skip --target-dir target/legacy)
LEGACY_EXPLORE_CMD=(target/legacy/debug/taskgate explore sidecar-stop --random 0 --expect-violation)
# Integration tests (tests/NAME.rs) that also run in the qemu cgroup v2 / v1
# guests, with the same features, and the arguments given to their binaries.
QEMU_CARGO_ARGS="--features failpoints"
QEMU_TESTS=(executor engine harness)
QEMU_TEST_ARGS=(--test-threads=1)
# ==========================================================================

passed=0
failed=0
skipped=0
results=()

# stage NAME COMMAND...: run one stage with a header, its duration and verdict.
stage() {
    local name=$1 t0 t1 rc secs
    shift
    echo
    echo "================================================================"
    echo "==== stage: $name"
    echo "==== \$ $(printf '%q ' "$@")"
    echo "================================================================"
    t0=$(date +%s.%N)
    "$@"
    rc=$?
    t1=$(date +%s.%N)
    secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
    if [ "$rc" = 0 ]; then
        passed=$((passed + 1))
        results+=("PASS  $name (${secs}s)")
        echo "==== stage $name: PASS in ${secs}s"
    else
        failed=$((failed + 1))
        results+=("FAIL  $name (exit $rc, ${secs}s)")
        echo "==== stage $name: FAIL (exit $rc) in ${secs}s"
    fi
    return "$rc"
}
skip() { # skip NAME REASON
    skipped=$((skipped + 1))
    results+=("SKIP  $1 ($2)")
    echo
    echo "==== stage $1: SKIPPED ($2)"
}

t_all=$(date +%s)
# What earlier runs left on this host is reported, but only what this run
# leaves fails the leftovers stage.
baseline=$(mktemp "${TMPDIR:-/tmp}/ci-leftovers.XXXXXX")
trap 'rm -f "$baseline"' EXIT
ci/leftovers.sh --save "$baseline"

build_ok=1
stage build "${BUILD_CMD[@]}" || build_ok=0

if [ "$build_ok" = 1 ]; then
    stage test "${TEST_CMD[@]}"
    stage gate "${GATE_CMD[@]}"
else
    skip test "the build failed"
    skip gate "the build failed"
fi
if stage "legacy build" "${LEGACY_BUILD_CMD[@]}"; then
    stage "legacy explore (must find the violation)" "${LEGACY_EXPLORE_CMD[@]}"
else
    skip "legacy explore (must find the violation)" "the legacy build failed"
fi

qemu_targets=()
for t in "${QEMU_TESTS[@]}"; do
    if [ -f "tests/$t.rs" ] || [ -f "tests/$t/main.rs" ]; then
        qemu_targets+=(--cargo-test "$t")
    else
        echo "ci/test.sh: note: tests/$t.rs does not exist: the qemu stages run the guest self-test only"
    fi
done
for mode in v2 v1; do
    if [ "${TASKGATE_SKIP_QEMU:-0}" = 1 ]; then
        skip "qemu cgroup $mode" "TASKGATE_SKIP_QEMU=1"
    elif [ ${#qemu_targets[@]} -eq 0 ]; then
        stage "qemu cgroup $mode (self-test)" ci/qemu-matrix.sh --mode "$mode" --self-test
    elif [ "$build_ok" = 0 ]; then
        skip "qemu cgroup $mode" "the build failed"
    else
        stage "qemu cgroup $mode" ci/qemu-matrix.sh --mode "$mode" \
            --cargo-args "$QEMU_CARGO_ARGS" "${qemu_targets[@]}" -- "${QEMU_TEST_ARGS[@]}"
    fi
done

stage leftovers ci/leftovers.sh --baseline "$baseline"

echo
echo "================================================================"
echo "==== summary ($(($(date +%s) - t_all))s in all)"
for r in "${results[@]}"; do echo "  $r"; done
echo "================================================================"
if [ "$skipped" -gt 0 ]; then
    echo "$passed passed, $failed failed, $skipped skipped"
else
    echo "$passed passed, $failed failed"
fi
[ "$failed" = 0 ] && [ "$skipped" = 0 ]
