#!/bin/sh
# ci/root-cgroup.sh CMD...: runs CMD (as root) from the root cgroup of a pure
# cgroup v2 host, such as a GitHub ubuntu-24.04 runner.
#
# Executors nest each task's cgroup under their own cgroup. On v2 a cgroup
# that holds processes cannot give controllers to children, and a CI job's
# cgroup always holds the job's own processes; the root cgroup is exempt.
# This is where the qemu v2 guests run the tests too. On a v1 or hybrid host
# there is nothing to do.
set -eu
if [ -f /sys/fs/cgroup/cgroup.controllers ]; then
    echo $$ >/sys/fs/cgroup/cgroup.procs
fi
exec "$@"
