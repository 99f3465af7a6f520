#!/usr/bin/env bash
# ci/mutants.sh: the mutation check of the restart and lifecycle code
# (restart.rs, alloc_runner.rs, task_runner/*.rs). Not a CI stage: it
# takes about an hour on the project's 2-core VM. Run as root.
#
#   ci/mutants.sh [OUT]            OUT defaults to target/mutants
#   ci/mutants.sh --gate-only [OUT]  step 2 alone, on OUT's step 1 so far,
#                                   skipping the mutants it already judged
#
# 1. `cargo mutants` with the engine's and the scenarios crate's tests
#    (fault points built in: fake driver, virtual clock).
# 2. Each mutant those tests miss is applied to a scratch copy of the
#    tree, built, and judged by the whole gate (`taskgate gate`): caught
#    if the gate fails. A mutant the gate also passes is missed.
#
# `task_runner/seeded.rs` is left out: it is the zoo's seeded-bug code,
# which a build without the zoo never runs, so each mutant of it is
# equivalent there (the zoo proves that code live).
#
# Prints the tally and writes OUT/gate-caught.txt and OUT/missed.txt.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export LC_ALL=C

GATE_ONLY=false
if [ "${1:-}" = --gate-only ]; then
    GATE_ONLY=true
    shift
fi
OUT=${1:-target/mutants}
mkdir -p "$OUT"
[ "$(id -u)" = 0 ] || { echo "ci/mutants.sh: the gate needs root" >&2; exit 2; }

# Step 1: cargo mutants, with the tests.
mutate() {
    echo "== 1. cargo mutants, against the engine's and the scenarios' tests"
    set +e
    cargo mutants -p taskgate-engine \
        --file harness/engine/src/restart.rs \
        --file harness/engine/src/alloc_runner.rs \
        --file 'harness/engine/src/task_runner/*.rs' \
        --exclude harness/engine/src/task_runner/seeded.rs \
        --test-package=taskgate-engine,taskgate-scenarios \
        --features taskgate-engine/failpoints \
        --output "$OUT"
    local rc=$?
    set -e
    # cargo mutants exits 2 when it found missed mutants; anything else but 0
    # is a failure of its own.
    if [ "$rc" != 0 ] && [ "$rc" != 2 ]; then
        echo "ci/mutants.sh: cargo mutants failed (exit $rc)" >&2
        exit "$rc"
    fi
}

$GATE_ONLY || mutate
RESULTS=$OUT/mutants.out

echo "== 2. the gate, on each mutant the tests missed"
# The copy keeps its target dir from one run to the next: only what a
# mutant changes is rebuilt.
mkdir -p "$OUT/tree"
scratch=$(realpath "$OUT/tree")
git ls-files -z | xargs -0 cp --parents -t "$scratch"
$GATE_ONLY || rm -f "$OUT/gate-caught.txt" "$OUT/missed.txt"
touch "$OUT/gate-caught.txt" "$OUT/missed.txt"
python3 - "$RESULTS/outcomes.json" >"$scratch/missed.tsv" <<'EOF'
import json, sys
for o in json.load(open(sys.argv[1]))["outcomes"]:
    m = o.get("scenario", {})
    if not isinstance(m, dict) or "Mutant" not in m or o.get("summary") != "MissedMutant":
        continue
    print(f'{o["diff_path"]}\t{m["Mutant"]["name"]}')
EOF
while IFS=$'\t' read -r diff name; do
    if grep -qxF "$name" "$OUT/gate-caught.txt" "$OUT/missed.txt"; then
        continue
    fi
    # cargo mutants' diffs name the file on their first line only.
    patch -s -p0 -d "$scratch" <"$RESULTS/$diff" ||
        { echo "ci/mutants.sh: cannot apply $diff" >&2; exit 1; }
    (cd "$scratch" && cargo build -q --bins --features failpoints) ||
        { echo "ci/mutants.sh: $name does not build, though cargo mutants built it" >&2; exit 1; }
    if (cd "$scratch" && target/debug/taskgate gate --junit "$scratch/gate.xml" >"$scratch/gate.log" 2>&1); then
        echo "missed       $name"
        echo "$name" >>"$OUT/missed.txt"
    elif first=$(grep -m1 '^first failure: ' "$scratch/gate.log"); then
        echo "gate caught  $name (${first#first failure: })"
        echo "$name" >>"$OUT/gate-caught.txt"
    else
        # A gate that failed with no verdict failed itself: no evidence.
        echo "ci/mutants.sh: the gate gave no verdict on $name:" >&2
        tail -20 "$scratch/gate.log" >&2
        exit 1
    fi
    patch -s -R -p0 -d "$scratch" <"$RESULTS/$diff"
done <"$scratch/missed.tsv"

count() { if [ -f "$1" ]; then awk 'NF { n++ } END { print n + 0 }' "$1"; else echo 0; fi; }
caught=$(count "$RESULTS/caught.txt")
timeout=$(count "$RESULTS/timeout.txt")
unviable=$(count "$RESULTS/unviable.txt")
by_gate=$(count "$OUT/gate-caught.txt")
missed=$(count "$OUT/missed.txt")
viable=$((caught + timeout + by_gate + missed))
echo "mutants: $viable viable ($unviable unviable): tests caught $caught, tests hung on $timeout," \
    "the gate caught $by_gate, missed $missed"
awk -v c=$((caught + timeout + by_gate)) -v v="$viable" \
    'BEGIN { if (v) printf "caught: %.1f%%\n", 100 * c / v }'
