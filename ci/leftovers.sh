#!/bin/sh
# ci/leftovers.sh: fail (exit 1) if taskgate left anything behind on this host:
#   - a taskgate* cgroup directory under /sys/fs/cgroup (depth <= 6, v1 or v2),
#   - a mount (in /proc/self/mountinfo) that mentions taskgate or a test temp
#     directory: /tmp/.tmp* (tempfile's default) or /tmp/tg* (tests/common's
#     Sandbox), also under $TMPDIR,
#   - a lab's work dir (taskgate-lab.*) in a scratch root the lab uses:
#     /dev/shm, $TMPDIR or /tmp (a failing run's data is kept there for a
#     person to read; a CI stage that fails runs on purpose removes them),
#   - a running (not zombie) process named taskgate.
# Prints every leftover it finds.  POSIX sh, so it also runs on busybox inside
# the ci/qemu-matrix.sh guests.
#
# Usage:
#   ci/leftovers.sh                   check; exit 0 = clean, 1 = leftovers
#   ci/leftovers.sh --save FILE       record what is there now (exit 0)
#   ci/leftovers.sh --baseline FILE   check, but only fail on leftovers that
#                                     are not in FILE (those are listed as
#                                     pre-existing: an earlier run's)
set -u

mode=check
file=
case ${1:-} in
    --save | --baseline)
        [ $# -eq 2 ] || { echo "usage: $0 [--save FILE | --baseline FILE]" >&2; exit 2; }
        mode=${1#--}; file=$2 ;;
    "") ;;
    *) echo "usage: $0 [--save FILE | --baseline FILE]" >&2; exit 2 ;;
esac

# scan: one "kind: detail" line per leftover.
scan() {
    if [ -d /sys/fs/cgroup ]; then
        # Not -xdev: each v1 controller is its own mount under /sys/fs/cgroup.
        find /sys/fs/cgroup -mindepth 1 -maxdepth 6 -type d -name 'taskgate*' 2>/dev/null |
            sed 's/^/cgroup: /'
    fi
    tmp=${TMPDIR:-/tmp}
    tmp=${tmp%/}
    if [ -r /proc/self/mountinfo ]; then
        while IFS= read -r line; do
            case $line in
                *taskgate* | *"$tmp/.tmp"* | *"$tmp/tg"* | */tmp/.tmp* | */tmp/tg*) echo "mount: $line" ;;
            esac
        done </proc/self/mountinfo
    fi
    for root in /dev/shm "$tmp" /tmp; do
        [ -d "$root" ] || continue
        find "$root" -mindepth 1 -maxdepth 1 -type d -name 'taskgate-lab.*' 2>/dev/null
    done | sort -u | sed 's/^/lab: /'
    for comm in /proc/[0-9]*/comm; do
        [ -r "$comm" ] || continue
        name=$(cat "$comm" 2>/dev/null) || continue
        [ "$name" = taskgate ] || continue
        pid=${comm#/proc/}; pid=${pid%/comm}
        # A zombie is not running: its parent just has not reaped it yet.
        state=$(sed -n 's/^.*) \(.\).*$/\1/p' "/proc/$pid/stat" 2>/dev/null)
        [ "$state" = Z ] && continue
        cmd=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null)
        echo "process: pid $pid: ${cmd:-taskgate}"
    done
}

now=$(scan)

if [ "$mode" = save ]; then
    printf '%s\n' "$now" >"$file"
    if [ -n "$now" ]; then
        echo "leftovers: WARNING: this host already has taskgate leftovers (from an earlier run):"
        printf '%s\n' "$now" | sed 's/^/leftovers:   /'
    fi
    exit 0
fi

new=
old=
if [ -n "$now" ]; then
    while IFS= read -r entry; do
        if [ "$mode" = baseline ] && [ -f "$file" ] && grep -Fxq -- "$entry" "$file"; then
            old="$old$entry
"
        else
            new="$new$entry
"
        fi
    done <<EOF
$now
EOF
fi

if [ -n "$old" ]; then
    echo "leftovers: pre-existing, not from this run (ignored):"
    printf '%s' "$old" | sed 's/^/leftovers:   /'
fi
if [ -n "$new" ]; then
    echo "leftovers: taskgate left these behind:"
    printf '%s' "$new" | sed 's/^/leftovers:   /'
    exit 1
fi
echo "leftovers: none (no new taskgate cgroups, mounts, labs or processes)"
exit 0
