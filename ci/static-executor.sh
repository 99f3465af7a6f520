#!/usr/bin/env bash
# ci/static-executor.sh: the executor linked as dist/build-release.sh links
# the installed one (static-pie) passes the escape catalogue and the
# executor's own tests. The other stages run the debug build's dynamic
# executor: this relinks it statically (the final link only, through
# `cargo rustc`), checks it names no dynamic loader, runs the two test
# binaries the test stage built against it, and relinks it as it was.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
features=(--features failpoints,privileged)
executor=target/debug/taskgate-executor

# Asked before the relink (cargo would relink the executor for its tests),
# of the test stage's build, so nothing is built again.
mapfile -t tests < <(cargo test --quiet --no-run --message-format=json --workspace "${features[@]}" |
    jq -r 'select(.profile.test and (.target.name == "escapes" or .target.name == "executor")
        and (.target.kind | index("test"))) | .executable')
if [ ${#tests[@]} -ne 2 ]; then
    echo "static-executor: error: expected the escapes and executor test binaries, found: ${tests[*]}" >&2
    exit 1
fi
trap 'cargo build --quiet "${features[@]}" --bin taskgate-executor' EXIT
cargo rustc --quiet "${features[@]}" --bin taskgate-executor -- -C target-feature=+crt-static
if readelf --program-headers "$executor" | grep -q INTERP; then
    echo "static-executor: error: $executor still names a dynamic loader" >&2
    exit 1
fi
echo "static-executor: $executor is linked statically"
for t in "${tests[@]}"; do
    echo "static-executor: $t"
    "$t" --test-threads=1
done
