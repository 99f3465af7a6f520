#!/usr/bin/env bash
# ci/report-example.sh: renders docs/report-example.png, the README's
# example of the gate's HTML report, from the project's own command: the
# zoo build (ci/zoo.sh build) with the report's bug seeded back runs
# `gate --report` on sidecar-stop, and headless Chromium renders the top of
# the page of the run whose sidecar skipped its prestart.
#
#   sudo ci/report-example.sh        (needs root and chromium)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

TOKEN='sidecar-stop@tr=1.4/up=2/stop=0/first=tr/swaps='
work=$(mktemp -d "${TMPDIR:-/tmp}/report-example.XXXXXX")
trap 'rm -rf "$work"' EXIT

# The gate fails (that is the point): its verdict is not this script's.
env TASKGATE_SEEDED_BUG=legacy-prestart-skip target/zoo/taskgate gate --only sidecar-stop \
    --random 0 --junit "$work/gate.xml" --report "$work/report" 2>&1 | grep '^report: ' || true
# The run's page is the one whose copy field holds its token.
page=$(grep -l -F "value=\"$TOKEN\"" "$work"/report/runs/*.html) ||
    { echo "ci/report-example.sh: no page for $TOKEN in $work/report" >&2; exit 1; }
chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --disable-crash-reporter \
    --user-data-dir="$work/chromium" --window-size=1500,860 --force-device-scale-factor=0.75 \
    --screenshot=docs/report-example.png "file://$page" 2>/dev/null
ls -l docs/report-example.png
