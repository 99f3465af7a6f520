#!/usr/bin/env bash
# dist/build-release.sh [cargo options]: the release build to install,
# target/release/taskgate and target/release/taskgate-executor.
#
# The executor is linked statically (glibc's static-pie): one starts for
# every task, and without the dynamic loader, libc's mappings and their
# copies at its fork and the task's clone, it starts faster and holds less
# (docs/benchmarks.md, "A static executor"). It makes no name-service call
# (its launcher resolves the task's user), so static glibc is safe for it.
# taskgate itself stays dynamic: its user lookups go through the host's
# NSS modules.
#
# Cargo applies a codegen flag to a single crate only through `cargo rustc`,
# which here relinks the executor alone. A later plain `cargo build
# --release` relinks it dynamically again: it still works, a little slower
# (`taskgate bench` prints which it timed).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
cargo build --release "$@"
cargo rustc --release "$@" --bin taskgate-executor -- -C target-feature=+crt-static
