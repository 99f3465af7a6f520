#!/usr/bin/env bash
# ci/fake.sh FIXED_TASKGATE LEGACY_TASKGATE: the wide search, without root.
# LEGACY_TASKGATE carries the report's bug: the zoo build, run with
# TASKGATE_SEEDED_BUG=legacy-prestart-skip in the environment (which the
# fixed build ignores).
#
# The explorer runs the report's scenario against the engine's fake driver
# as an unprivileged user (nobody): every schedule plus random PCT ones must
# pass on the fixed build, and on the legacy build the fake must fail on
# exactly the schedules the real executor fails on under the kernel's exec
# oracle (that part runs as root). Run as root, the fake's explore replays
# each schedule it fails on the real executor before it counts.
set -euo pipefail
[ $# = 2 ] || { echo "usage: ci/fake.sh FIXED_TASKGATE LEGACY_TASKGATE" >&2; exit 2; }
work=$(mktemp -d "${TMPDIR:-/tmp}/ci-fake.XXXXXX")
trap 'rm -rf "$work"' EXIT
# The binaries are copied where nobody can reach them: a clone under a
# private home directory is not.
mkdir "$work/fixed" "$work/legacy"
cp "$1" "$work/fixed/taskgate"
cp "$2" "$work/legacy/taskgate"
chmod -R a+rX "$work"
chmod 1777 "$work"
as_nobody() {
    setpriv --reuid=65534 --regid=65534 --clear-groups \
        env HOME="$work" TMPDIR="$work" RUST_BACKTRACE=0 "$@"
}

echo "== fixed build, fake driver, as nobody"
as_nobody "$work/fixed/taskgate" explore sidecar-stop --driver fake --random 500
echo "== legacy build, fake driver, as nobody: must fail"
as_nobody "$work/legacy/taskgate" explore sidecar-stop --driver fake --random 0 \
    --expect-violation --failing-tokens "$work/fake-failing.txt"
echo "== legacy build, fake driver, as root: each failing schedule replayed on the real executor"
confirmed=$(RUST_BACKTRACE=0 "$2" explore sidecar-stop --driver fake --random 0 --expect-violation)
if ! grep -q "each confirmed on the real executor" <<<"$confirmed"; then
    echo "ci/fake.sh: the fake's failing schedules were not confirmed on the real executor:" >&2
    echo "$confirmed" >&2
    exit 1
fi
echo "== legacy build, real executors under the exec oracle"
RUST_BACKTRACE=0 "$2" explore sidecar-stop --random 0 --expect-violation \
    --failing-tokens "$work/real-failing.txt"
if ! diff -u "$work/real-failing.txt" "$work/fake-failing.txt"; then
    echo "ci/fake.sh: the fake and the real executor fail on different schedules" >&2
    exit 1
fi
echo "ci/fake.sh: the fake fails on the same $(wc -l <"$work/fake-failing.txt") schedules as the real executor"
