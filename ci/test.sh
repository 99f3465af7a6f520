#!/usr/bin/env bash
# ci/test.sh: THE test command for taskgate (run as root: `sudo ci/test.sh`).
#
# Usage: ci/test.sh [STAGE...]   (default: every stage, in this order)
#
# Stages, each with a header, its duration and its verdict; a failing stage
# does not stop the later ones, except those that need what it built:
#   build      cargo build of every target with the failpoints feature, and
#              the zoo binaries (every seeded bug, one chosen per run by
#              TASKGATE_SEEDED_BUG; same target dir, so the dependencies
#              are built once) copied to target/zoo/
#   test       the workspace tests on this host (tests/report.rs renders the
#              legacy build's report in headless Chromium: the zoo is built),
#              then the fault layer's unit tests in a default build (its
#              points must cost nothing)
#   gate       the release gate (`taskgate gate`): the whole catalogue, full
#              enumeration + random schedules, JUnit XML at
#              target/taskgate-gate.xml and the HTML report in
#              target/taskgate-report/; zero violations required
#   legacy     proof that the gate can fail: the zoo build with the report's
#              own bug (legacy-prestart-skip, the original logic) must make
#              `explore sidecar-stop` fail
#   zoo        ci/zoo.sh: the gate must fail, on an invariant, within 60 s
#              at the reference VM's pace, on every seeded bug (each
#              re-creating one orchestrator bug, the report's own first);
#              a core's worth of gates at once, paced by bug-free gates run
#              the same way; prints each one's time to its first failure
#   fake       ci/fake.sh: the wide search as nobody, against the engine's
#              fake driver; with the report's bug it fails on exactly the
#              schedules the real executor fails on
#   stress     ci/stress.sh: the same verdicts when the harness is starved of
#              CPU (20% of one core, beside a busy load): replay tokens 100 of
#              100 times, the explore's set of failing schedules
#   lint       ci/lint.sh: cargo fmt --check, clippy -D warnings (default and
#              all features), the GitHub workflow (actionlint), the Vagrantfile,
#              the systemd unit (systemd-analyze verify)
#   static     ci/static-executor.sh: the escape catalogue and the executor's
#              tests against the executor linked statically, as
#              dist/build-release.sh links the installed one (then the
#              dynamic one put back), once the guests have copied theirs
#   qemu-v2    the README's demo alloc (the default job to Complete), then the
#   qemu-v1    executor, escape, cgroup, engine, harness and agent tests, in a qemu
#              guest with pure cgroup v2 (from a login session's cgroup
#              holding another process) / pure cgroup v1 (there only the
#              executor and cgroup tests when the test stage runs on a v1
#              or hybrid host: it ran the rest in that layout); both start once
#              the build is done and run, niced, beside the stages above
#              (each guest is mostly one busy core)
#   leftovers  this run left no taskgate cgroup, mount or process on this
#              host (ci/leftovers.sh; what was there before is only listed)
# Ends with the line "N passed, N failed" (stages) and exits non-zero if any
# stage failed or was skipped.
#
# Environment:
#   QEMU_MATRIX_TIMEOUT    per-guest hard limit in seconds (default 1500)
#   STRESS_REPEAT          runs per replay token under stress (default 100)
set -uo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2

ALL_STAGES=(build test gate legacy zoo fake stress lint static qemu-v2 qemu-v1 leftovers)
if [ $# -eq 0 ]; then
    stages=("${ALL_STAGES[@]}")
else
    stages=("$@")
    for s in "${stages[@]}"; do
        [[ " ${ALL_STAGES[*]} " == *" $s "* ]] || {
            echo "ci/test.sh: error: unknown stage '$s' (stages: ${ALL_STAGES[*]})" >&2
            exit 2
        }
    done
fi
wants() { [[ " ${stages[*]} " == *" $1 "* ]]; }

if [ "$(id -u)" != 0 ]; then
    echo "ci/test.sh: error: the taskgate tests need root: run as root, e.g. sudo ci/test.sh" >&2
    exit 1
fi

# sudo resets PATH (secure_path) and HOME: find a rustup/cargo install of
# root or of the invoking user, whose rustup also needs its RUSTUP_HOME
# (beside its .cargo).
if ! command -v cargo >/dev/null 2>&1; then
    user_home=
    if [ -n "${SUDO_USER:-}" ]; then
        user_home=$(getent passwd "$SUDO_USER" | cut -d: -f6)
    fi
    for bin in ${CARGO_HOME:+"$CARGO_HOME/bin"} ${user_home:+"$user_home/.cargo/bin"} \
        "$HOME/.cargo/bin" /root/.cargo/bin /usr/local/cargo/bin; do
        [ -x "$bin/cargo" ] || continue
        PATH=$bin:$PATH
        rustup_home=$(dirname "$(dirname "$bin")")/.rustup
        if [ -z "${RUSTUP_HOME:-}" ] && [ -d "$rustup_home" ]; then
            export RUSTUP_HOME=$rustup_home
        fi
        break
    done
fi
command -v cargo >/dev/null 2>&1 || {
    echo "ci/test.sh: error: cargo not found (install Rust with rustup, or run .ci/run on a fresh machine)" >&2
    exit 1
}
export PATH RUST_BACKTRACE=${RUST_BACKTRACE:-1}
# The stages run the binaries the build stage leaves in ./target.
if [ -n "${CARGO_TARGET_DIR:-}" ]; then
    echo "ci/test.sh: building into ./target, not CARGO_TARGET_DIR=$CARGO_TARGET_DIR (the stages read ./target)"
    unset CARGO_TARGET_DIR
fi
export QEMU_MATRIX_TIMEOUT=${QEMU_MATRIX_TIMEOUT:-1500}

# ==========================================================================
# THE TEST INVOCATION: change the build/test commands here, and only here.
BUILD_CMD=(cargo build --workspace --all-targets --features failpoints,privileged)
ZOO_BIN=target/zoo/taskgate
# The report's own bug, chosen in the zoo build. The fixed binaries run
# beside it with the same environment, and must ignore it.
LEGACY_ENV=(env TASKGATE_SEEDED_BUG=legacy-prestart-skip)
# PROPTEST_CASES: the jobspec fuzz target runs 10000 cases per property (~20 s).
# --no-fail-fast: every binary runs, one that fails too (beside a v1 host
# the v1 guest leaves most of them to this stage).
TEST_CMD=(env PROPTEST_CASES=10000 cargo test --workspace --features failpoints,privileged --no-fail-fast -- --test-threads=1)
# Without fault points the macros must evaluate nothing: taskgate-faults'
# own test of that only builds without the feature.
TEST_DEFAULT_CMD=(cargo test -p taskgate-faults --lib)
GATE_CMD=(target/debug/taskgate gate --random 10 --junit target/taskgate-gate.xml --report target/taskgate-report)
LEGACY_EXPLORE_CMD=("${LEGACY_ENV[@]}" "$ZOO_BIN" explore sidecar-stop --random 0 --expect-violation)
ZOO_CMD=(ci/zoo.sh run)
FAKE_CMD=("${LEGACY_ENV[@]}" ci/fake.sh target/debug/taskgate "$ZOO_BIN")
STRESS_CMD=("${LEGACY_ENV[@]}" ci/stress.sh target/debug/taskgate "$ZOO_BIN" "${STRESS_REPEAT:-100}")
LINT_CMD=(ci/lint.sh)
STATIC_CMD=(ci/static-executor.sh)
# Integration tests (tests/NAME.rs) that also run in the qemu cgroup v2 / v1
# guests (beside a v1 host, the v1 guest's own list is below), with the same
# features, and the arguments given to their binaries.
# The guests are there for what depends on the cgroup version and layout
# (the executor's cgroups, the agent's subtree, the engine on them, the
# oracle's identity by cgroup): the schedule search itself does not, and
# runs on the host (gate, stress), as does the check of --jobs against a
# serial gate (it runs the zoo's build, which the guests do not carry), and
# that of shards merging (JUnit bookkeeping over the runs the guests' own
# gate test runs once).
# --workspace: the features resolve as in BUILD_CMD, so the guests' cargo
# query finds every test binary built (without it, it builds them again).
QEMU_CARGO_ARGS="--workspace --features failpoints,privileged"
QEMU_TESTS=(executor escapes cgroups engine harness agent)
# On a cgroup v1 host (a hybrid one too: taskgate uses its v1 hierarchies,
# as in a pure v1 guest) the test stage runs every one of those binaries in
# the v1 layout already. The v1 guest then runs what tells pure v1 from
# that: the layout's detection and the cgroup code. (Emulated, the rest
# took it some 10 minutes of a core, which the run's other stages share.)
QEMU_V1_BESIDE_A_V1_HOST=(executor cgroups)
QEMU_TEST_ARGS=(--test-threads=1 --skip explore_sidecar_stop_finds_no_failing_schedule
    --skip jobs_give_a_serial_gates_verdicts --skip gate_shards_merge_into_the_whole_gate)
# ==========================================================================

passed=0
failed=0
skipped=0
results=()

record() { # record NAME RC SECONDS
    if [ "$2" = 0 ]; then
        passed=$((passed + 1))
        results+=("PASS  $1 (${3}s)")
        echo "==== stage $1: PASS in ${3}s"
    else
        failed=$((failed + 1))
        results+=("FAIL  $1 (exit $2, ${3}s)")
        echo "==== stage $1: FAIL (exit $2) in ${3}s"
    fi
}
header() { # header NAME COMMAND...
    echo
    echo "================================================================"
    echo "==== stage: $1"
    shift
    echo "==== \$ $(printf '%q ' "$@")"
    echo "================================================================"
}
since() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }

# stage NAME COMMAND...: run one stage with a header, its duration and verdict.
stage() {
    local name=$1 t0 rc
    shift
    header "$name" "$@"
    t0=$(date +%s.%N)
    "$@"
    rc=$?
    record "$name" "$rc" "$(since "$t0")"
    return "$rc"
}
skip() { # skip NAME REASON
    skipped=$((skipped + 1))
    results+=("SKIP  $1 ($2)")
    echo
    echo "==== stage $1: SKIPPED ($2)"
}

test_all() {
    "${TEST_CMD[@]}" && "${TEST_DEFAULT_CMD[@]}"
}

build_all() {
    "${BUILD_CMD[@]}" &&
        # The zoo, with the fixed binaries put back where they were.
        ci/zoo.sh build
}

# host_tests_v1: this run's test stage runs on cgroup v1 hierarchies.
host_tests_v1() { wants test && [ "$(stat -fc %T /sys/fs/cgroup)" != cgroup2fs ]; }
qemu_cmd() { # qemu_cmd MODE: the ci/qemu-matrix.sh invocation for one guest
    local t tests=("${QEMU_TESTS[@]}")
    [ "$1" = v1 ] && host_tests_v1 && tests=("${QEMU_V1_BESIDE_A_V1_HOST[@]}")
    qemu=(ci/qemu-matrix.sh --mode "$1" --default-alloc --cargo-args "$QEMU_CARGO_ARGS")
    for t in "${tests[@]}"; do qemu+=(--cargo-test "$t"); done
    qemu+=(-- "${QEMU_TEST_ARGS[@]}")
}

t_all=$(date +%s)
# What earlier runs left on this host is reported, but only what this run
# leaves fails the leftovers stage.
baseline=$(mktemp "${TMPDIR:-/tmp}/ci-leftovers.XXXXXX")
qemu_pids=()
qemu_logs=
# A run cut short (Ctrl-C) stops the guests too: as background jobs they
# ignore the terminal's SIGINT, and would run on to their time limit.
# (ci/qemu-matrix.sh stops its qemu on SIGTERM.)
at_exit() {
    [ ${#qemu_pids[@]} -gt 0 ] && kill -TERM "${qemu_pids[@]}" 2>/dev/null && wait "${qemu_pids[@]}" 2>/dev/null
    rm -rf "$baseline" ${qemu_logs:+"$qemu_logs"}
}
trap at_exit EXIT
ci/leftovers.sh --save "$baseline"

built=1
if wants build; then
    stage build build_all || built=0
elif [ ! -x target/debug/taskgate ] || [ ! -x "$ZOO_BIN" ]; then
    built=0
fi
needs_build() { # needs_build NAME COMMAND...: a stage that runs what `build` built
    if [ "$built" = 1 ]; then stage "$@"; else skip "$1" "nothing built (run the build stage)"; fi
}
# The guests start as soon as the build is done and run beside the host's
# stages: a guest is mostly one emulated core, and the host's stages leave
# cores idle while they wait on their runs' events. Nice, so the host's
# stages keep the CPU they need; their verdicts hold under load (stress).
# A guest copies its binaries in its first seconds (its cargo query waits
# on the build lock like any other), and no later stage rebuilds them.
modes=()
wants qemu-v2 && modes+=(v2)
wants qemu-v1 && modes+=(v1)
if [ ${#modes[@]} -gt 0 ] && [ "$built" = 0 ]; then
    for m in "${modes[@]}"; do skip "qemu cgroup $m" "nothing built (run the build stage)"; done
    modes=()
elif [ ${#modes[@]} -gt 0 ]; then
    qemu_logs=$(mktemp -d "${TMPDIR:-/tmp}/ci-qemu.XXXXXX")
    qemu_t0=$(date +%s.%N)
    for m in "${modes[@]}"; do
        qemu_cmd "$m"
        header "qemu cgroup $m (beside the next stages; log: $qemu_logs/$m.log, printed when it ends)" "${qemu[@]}"
        nice -n 10 "${qemu[@]}" >"$qemu_logs/$m.log" 2>&1 &
        qemu_pids+=($!)
    done
fi

wants test && needs_build test test_all
wants gate && needs_build gate "${GATE_CMD[@]}"
wants legacy && needs_build "legacy (must find the violation)" "${LEGACY_EXPLORE_CMD[@]}"
wants zoo && needs_build "zoo (every seeded bug caught)" "${ZOO_CMD[@]}"
wants fake && needs_build "fake (the wide search, unprivileged)" "${FAKE_CMD[@]}"
wants stress && needs_build stress "${STRESS_CMD[@]}"
wants lint && stage lint "${LINT_CMD[@]}"
# static swaps the executor binary the guests copy: each guest has built its
# initramfs first (or ended). In a whole run they did minutes before.
wait_for_guest_copies() {
    local i
    for i in "${!modes[@]}"; do
        grep -q -m1 '^qemu-matrix: initramfs:' \
            < <(tail -n +1 -f --pid="${qemu_pids[$i]}" "$qemu_logs/${modes[$i]}.log") || true
    done
}
wants static && wait_for_guest_copies &&
    needs_build "static (the installed executor's linkage)" "${STATIC_CMD[@]}"

for i in "${!modes[@]}"; do
    wait "${qemu_pids[$i]}"
    rc=$?
    echo
    echo "==== qemu cgroup ${modes[$i]}: guest output"
    cat "$qemu_logs/${modes[$i]}.log"
    record "qemu cgroup ${modes[$i]}" "$rc" "$(since "$qemu_t0")"
done
qemu_pids=()

wants leftovers && stage leftovers ci/leftovers.sh --baseline "$baseline"

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
