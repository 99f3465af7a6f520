#!/bin/sh
# ci/leftovers.sh: fail (exit 1) if taskgate left anything behind on this host:
#   - a taskgate* cgroup directory under /sys/fs/cgroup (depth <= 6, v1 or v2),
#   - a mount (in /proc/self/mountinfo) that mentions taskgate or a test temp
#     directory: /tmp/.tmp* (tempfile's default) or /tmp/tg* (tests/common's
#     Sandbox), also under $TMPDIR,
#   - a running process named taskgate.
# Prints every leftover it finds.  POSIX sh, so it also runs on busybox inside
# the ci/qemu-matrix.sh guests.
# Usage: ci/leftovers.sh        (no options; exit 0 = clean)
set -u

found=0
report() { # report KIND DETAIL
    if [ "$found" = 0 ]; then echo "leftovers: taskgate left these behind:"; fi
    found=1
    echo "leftovers:   $1: $2"
}

if [ -d /sys/fs/cgroup ]; then
    # -xdev is not used: each v1 controller is its own mount under /sys/fs/cgroup.
    dirs=$(find /sys/fs/cgroup -mindepth 1 -maxdepth 6 -type d -name 'taskgate*' 2>/dev/null)
    if [ -n "$dirs" ]; then
        while IFS= read -r d; do report cgroup "$d"; done <<EOF
$dirs
EOF
    fi
fi

tmp=${TMPDIR:-/tmp}
tmp=${tmp%/}
if [ -r /proc/self/mountinfo ]; then
    while IFS= read -r line; do
        case $line in
            *taskgate* | *"$tmp/.tmp"* | *"$tmp/tg"* | */tmp/.tmp* | */tmp/tg*) report mount "$line" ;;
        esac
    done </proc/self/mountinfo
fi

for comm in /proc/[0-9]*/comm; do
    [ -r "$comm" ] || continue
    name=$(cat "$comm" 2>/dev/null) || continue
    [ "$name" = taskgate ] || continue
    pid=${comm#/proc/}; pid=${pid%/comm}
    cmd=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null)
    report process "pid $pid: ${cmd:-taskgate}"
done

if [ "$found" = 0 ]; then
    echo "leftovers: none (no taskgate cgroups, mounts or processes)"
    exit 0
fi
exit 1
