#!/usr/bin/env bash
# ci/static-executor.sh: the executor linked as dist/build-release.sh links
# the installed one (static-pie) passes the escape catalogue and the
# executor's own tests. The other stages run the debug build's dynamic
# executor: this builds the executor's binary crate again with
# `crt-static` (through `cargo rustc`, which hands the flag to that crate
# alone), checks it names no dynamic loader, runs the workspace build's two
# test binaries against it, and puts the dynamic one back (the same file,
# kept by a hard link, as ci/zoo.sh does).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
features=(--features failpoints,privileged)
executor=target/debug/taskgate-executor
work=$(mktemp -d "${TMPDIR:-/tmp}/tg-static.XXXXXX")
ln "$executor" "$work/dynamic"
trap 'mv -f "$work/dynamic" "$executor"; rm -rf "$work"' EXIT

# The workspace build's test binaries (its features, so nothing is built
# again), asked before the relink: cargo would relink the executor for them.
cargo test --quiet --no-run --message-format=json --workspace "${features[@]}" >"$work/built.json"
jq -r 'select(.profile.test and (.target.name == "escapes" or .target.name == "executor")
    and (.target.kind | index("test"))) | .executable' "$work/built.json" >"$work/tests"
mapfile -t tests <"$work/tests"
if [ ${#tests[@]} -ne 2 ]; then
    echo "static-executor: error: expected the escapes and executor test binaries, found: ${tests[*]}" >&2
    exit 1
fi

cargo rustc --quiet "${features[@]}" --bin taskgate-executor -- -C target-feature=+crt-static
readelf --program-headers "$executor" >"$work/headers"
if grep -q INTERP "$work/headers"; then
    echo "static-executor: error: $executor still names a dynamic loader" >&2
    exit 1
fi
echo "static-executor: $executor is linked statically"
for t in "${tests[@]}"; do
    echo "static-executor: $t"
    "$t" --test-threads=1
done
