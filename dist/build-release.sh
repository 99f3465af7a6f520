#!/usr/bin/env bash
# dist/build-release.sh [--locked] [--features F]: the release build to
# install, target/release/taskgate and target/release/taskgate-executor.
# Its options are cargo's that choose what is built alike for both steps
# (--locked, --features, -q); not targets or packages.
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
# (`taskgate bench` prints which it timed). The static link needs glibc's
# static libraries (Debian's libc6-dev has them; Fedora's glibc-static):
# without them the executor stays dynamic, with a warning.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
for arg in "$@"; do
    case $arg in
        --bin* | --bins | --all-targets | --workspace | -p* | --package* | --target* | --)
            echo "dist/build-release.sh: $arg is not for this script: it builds both binaries of package taskgate" >&2
            exit 2
            ;;
    esac
done
cargo build --release "$@"
if ! cargo rustc --release "$@" --bin taskgate-executor -- -C target-feature=+crt-static; then
    cargo build --release "$@" --bin taskgate-executor
    echo "dist/build-release.sh: warning: the static link failed (glibc's static libraries missing?): target/release/taskgate-executor is linked dynamically" >&2
fi
