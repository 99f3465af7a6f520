#!/usr/bin/env bash
# ci/qemu-matrix.sh: run test binaries inside a throwaway qemu guest, once
# with a pure cgroup v2 hierarchy and once with pure cgroup v1.
#
# Usage:
#   ci/qemu-matrix.sh [options] [BINARY...] [-- TEST-ARGS...]
#
# Options:
#   --mode v2|v1|both   cgroup layout(s) to boot (default: both, v2 first)
#   --cargo-test NAME   build the integration test NAME (tests/NAME.rs) with
#                       `cargo test --test NAME --no-run` and run its binary;
#                       repeatable
#   --cargo-args ARGS   extra cargo arguments, word-split
#                       (default: "--workspace --features failpoints,privileged", the
#                       same build as ci/test.sh: cargo then builds nothing again)
#   --self-test         run only the guest's built-in layout checks (no binaries)
#   --default-alloc     first run the README's demo alloc in the guest, `taskgate run`
#                       (the built-in default job, the default data dir and
#                       cgroup parent), which must end Complete (exit 4 if not)
#   --include PATH      also copy PATH (file or directory) into the guest at the
#                       same absolute path; ELF files get their shared libs;
#                       repeatable
#   --module NAME       load kernel module NAME (and its dependencies) in the
#                       guest before the tests; repeatable
#   --env NAME=VALUE    set NAME in the tests' environment; repeatable
#   --timeout SECONDS   hard limit for one guest boot (default: 600)
#   --kernel PATH       guest kernel (default: $QEMU_MATRIX_KERNEL, else the
#                       newest /boot/vmlinuz-*)
#   --memory SIZE       guest memory (default: 2G)
#   --smp N             guest CPUs (default: 2)
#   --accel kvm|tcg|auto  hardware virtualization, software emulation, or KVM
#                       when the CPU has vmx/svm and /dev/kvm opens read-write
#                       (default: auto)
#   --log-dir DIR       keep each guest's console log as DIR/qemu-MODE.log
#   --no-strip          copy binaries with their debug info (bigger, slower boot)
#   --keep              keep the work directory (printed) for debugging
#   -h, --help          this text
#
# Each BINARY (and each cargo-built one) is copied into the guest at the SAME
# absolute path, together with every other executable cargo reports for the
# build (i.e. target/debug/taskgate, so env!("CARGO_BIN_EXE_taskgate") works),
# the repository's tests/ directory, busybox-static (also /bin/sh), the
# shared libraries they all need, and a minimal /etc.  The tests run as root,
# one binary after another, with the repository root as working directory.
#
# After the binaries, ci/leftovers.sh runs inside the guest too: a taskgate
# cgroup, mount or process left there fails the mode (exit 3).
#
# In the v2 guest everything runs from a login session's cgroup that holds
# another process (/user.slice/user-0.slice/session-1.scope), as a user's
# shell on a systemd host does; the v1 guest runs from the root cgroups.
#
# Exit status: 0 if every binary passed in every mode; otherwise the first
# failing binary's exit status (3 = leftovers in the guest, 4 = the default
# alloc did not end Complete, 124 = the guest
# timed out, 125 = the guest ended without printing a result or failed its
# layout checks, 2 = bad usage or missing host tools).
#
# Environment: RUST_BACKTRACE, RUST_LOG, RUST_TEST_* and TASKGATE_* are passed
# into the guest as they are.  QEMU_MATRIX_TIMEOUT overrides the default timeout.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
MARK=TGCI-RESULT

modes=(v2 v1)
cargo_tests=()
cargo_args=(--workspace --features failpoints,privileged)
binaries=()
includes=()
modules=()
envs=()
test_args=()
self_test=0
default_alloc=0
timeout_s=${QEMU_MATRIX_TIMEOUT:-600}
kernel=${QEMU_MATRIX_KERNEL:-}
memory=2G
smp=2
accel=auto
log_dir=
strip_bins=1
keep=0

die() { echo "qemu-matrix: error: $*" >&2; exit 2; }
say() { echo "qemu-matrix: $*"; }
usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}"; }

while [ $# -gt 0 ]; do
    case $1 in
        --mode)
            [ $# -ge 2 ] || die "--mode needs an argument"
            case $2 in
                v1) modes=(v1) ;;
                v2) modes=(v2) ;;
                both) modes=(v2 v1) ;;
                *) die "--mode must be v1, v2 or both (got '$2')" ;;
            esac
            shift 2 ;;
        --cargo-test) [ $# -ge 2 ] || die "$1 needs an argument"; cargo_tests+=("$2"); shift 2 ;;
        --cargo-args) [ $# -ge 2 ] || die "$1 needs an argument"; read -r -a cargo_args <<<"$2"; shift 2 ;;
        --self-test) self_test=1; shift ;;
        --default-alloc) default_alloc=1; shift ;;
        --include) [ $# -ge 2 ] || die "$1 needs an argument"; includes+=("$2"); shift 2 ;;
        --module) [ $# -ge 2 ] || die "$1 needs an argument"; modules+=("$2"); shift 2 ;;
        --env)
            [ $# -ge 2 ] || die "$1 needs an argument"
            [[ $2 == [A-Za-z_]*=* ]] || die "--env wants NAME=VALUE (got '$2')"
            envs+=("$2"); shift 2 ;;
        --timeout) [ $# -ge 2 ] || die "$1 needs an argument"; timeout_s=$2; shift 2 ;;
        --kernel) [ $# -ge 2 ] || die "$1 needs an argument"; kernel=$2; shift 2 ;;
        --memory) [ $# -ge 2 ] || die "$1 needs an argument"; memory=$2; shift 2 ;;
        --smp) [ $# -ge 2 ] || die "$1 needs an argument"; smp=$2; shift 2 ;;
        --accel)
            [ $# -ge 2 ] || die "$1 needs an argument"
            case $2 in kvm|tcg|auto) accel=$2 ;; *) die "--accel must be kvm, tcg or auto (got '$2')" ;; esac
            shift 2 ;;
        --log-dir) [ $# -ge 2 ] || die "$1 needs an argument"; log_dir=$2; shift 2 ;;
        --no-strip) strip_bins=0; shift ;;
        --keep) keep=1; shift ;;
        -h|--help) usage; exit 0 ;;
        --) shift; test_args=("$@"); break ;;
        -*) die "unknown option '$1' (see --help)" ;;
        *) binaries+=("$1"); shift ;;
    esac
done

[[ $timeout_s =~ ^[0-9]+$ ]] || die "--timeout wants whole seconds (got '$timeout_s')"
if [ "$self_test" = 0 ] && [ "$default_alloc" = 0 ] && [ ${#binaries[@]} -eq 0 ] &&
    [ ${#cargo_tests[@]} -eq 0 ]; then
    die "nothing to run: give test binaries, --cargo-test NAME, --default-alloc or --self-test (see --help)"
fi

for tool in qemu-system-x86_64 busybox cpio gzip ldd timeout; do
    command -v "$tool" >/dev/null 2>&1 ||
        die "'$tool' not found (apt-get install qemu-system-x86 busybox-static cpio gzip libc-bin coreutils)"
done
busybox_bin=$(command -v busybox)
busybox_bin=$(readlink -f "$busybox_bin")
if ldd "$busybox_bin" >/dev/null 2>&1; then
    die "$busybox_bin is dynamically linked: install busybox-static"
fi

if [ -z "$kernel" ]; then
    kernel=$(find /boot -maxdepth 1 -name 'vmlinuz-*' 2>/dev/null | sort -V | tail -n 1)
    [ -n "$kernel" ] || die "no /boot/vmlinuz-*, no QEMU_MATRIX_KERNEL and no --kernel (.ci/run unpacks Debian's)"
fi
[ -r "$kernel" ] || die "cannot read kernel $kernel (Debian's vmlinuz is root-only: run as root)"
kver=$(basename "$kernel"); kver=${kver#vmlinuz-}

# ---------------------------------------------------------------- binaries --
if [ ${#cargo_tests[@]} -gt 0 ]; then
    command -v cargo >/dev/null 2>&1 || die "cargo not found"
    command -v jq >/dev/null 2>&1 || die "jq not found (apt-get install jq)"
    cargo_cmd=(cargo test --no-run --message-format=json-render-diagnostics "${cargo_args[@]}")
    for t in "${cargo_tests[@]}"; do cargo_cmd+=(--test "$t"); done
    say "building: ${cargo_cmd[*]}"
    json=$(cd "$REPO" && "${cargo_cmd[@]}") || die "cargo build of the test binaries failed"
    # Integration-test executables to run; every other executable (the
    # taskgate bin) is shipped at its path for env!("CARGO_BIN_EXE_*").
    mapfile -t built < <(jq -r 'select(.reason == "compiler-artifact" and .executable != null
            and (.target.kind | index("test"))) | .executable' <<<"$json")
    mapfile -t aux < <(jq -r 'select(.reason == "compiler-artifact" and .executable != null
            and ((.target.kind | index("test")) | not)) | .executable' <<<"$json")
    [ ${#built[@]} -gt 0 ] || die "cargo reported no test executable for: ${cargo_tests[*]}"
    binaries+=("${built[@]}")
    includes+=("${aux[@]}")
fi

for i in "${!binaries[@]}"; do
    b=${binaries[$i]}
    if [ ! -f "$b" ] || [ ! -x "$b" ]; then die "not an executable file: $b"; fi
    binaries[i]=$(readlink -f "$b")
done
# The tests find the taskgate binaries through compile-time absolute paths.
target_dir=${CARGO_TARGET_DIR:-$REPO/target}
case $target_dir in /*) ;; *) target_dir=$REPO/$target_dir ;; esac
if [ ${#binaries[@]} -gt 0 ] || [ "$default_alloc" = 1 ]; then
    for bin in taskgate taskgate-executor; do
        [ -x "$target_dir/debug/$bin" ] && includes+=("$target_dir/debug/$bin")
    done
fi
if [ "$default_alloc" = 1 ] && [ ! -x "$target_dir/debug/taskgate-executor" ]; then
    die "--default-alloc: build $target_dir/debug/taskgate and taskgate-executor first (cargo build)"
fi
[ -d "$REPO/tests" ] && includes+=("$REPO/tests")
[ -d "$REPO/examples" ] && includes+=("$REPO/examples")  # jobspecs some tests parse

# ---------------------------------------------------------------- initramfs --
work=$(mktemp -d "${TMPDIR:-/tmp}/qemu-matrix.XXXXXX")
# shellcheck disable=SC2317  # invoked by the EXIT trap
cleanup() {
    local pid
    if [ -s "$work/qemu.pid" ] && [ ! -e "$work/qemu.rc" ]; then
        read -r pid <"$work/qemu.pid" && kill "$pid" 2>/dev/null && say "stopped qemu (pid $pid)"
        wait
    fi
    if [ "$keep" = 1 ]; then say "kept work directory $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
root=$work/root
t_build=$(date +%s.%N)

# Debian-style merged /usr, so binds of /bin /lib /lib64 /sbin /usr (Nomad's
# default chroot_env) see the same tree as on the host.
mkdir -p "$root"/{usr/bin,usr/sbin,usr/lib,usr/lib64,etc,root,tmp,proc,sys,dev,run,newroot,ci,var/tmp}
ln -s usr/bin "$root/bin"; ln -s usr/sbin "$root/sbin"
ln -s usr/lib "$root/lib"; ln -s usr/lib64 "$root/lib64"
chmod 1777 "$root/tmp" "$root/var/tmp"
mknod -m 600 "$root/dev/console" c 5 1 2>/dev/null || true
mknod -m 666 "$root/dev/null" c 1 3 2>/dev/null || true

cp "$busybox_bin" "$root/usr/bin/busybox"
for applet in $("$busybox_bin" --list); do
    [ -e "$root/usr/bin/$applet" ] || ln -s busybox "$root/usr/bin/$applet"
done

declare -A copied=()
# copy_file SRC [strip]: SRC into the guest at the same absolute path, plus its libs.
copy_file() {
    local src=$1 how=${2:-} dst
    [ -n "${copied[$src]:-}" ] && return 0
    copied[$src]=1
    dst=$root$src
    mkdir -p "$(dirname "$dst")"
    rm -f "$dst"
    if [ "$how" = strip ] && [ "$strip_bins" = 1 ] && command -v objcopy >/dev/null 2>&1 &&
        objcopy --strip-debug "$src" "$dst" 2>/dev/null; then
        chmod --reference="$src" "$dst"
    else
        cp -L --preserve=mode "$src" "$dst"
    fi
    copy_libs "$src"
}
copy_libs() {
    local lib
    # `ldd` prints "name => /path (addr)" and "/lib64/ld-linux... (addr)".
    while read -r lib; do
        [ -n "$lib" ] && copy_file "$lib"
    done < <(ldd "$1" 2>/dev/null | sed -n 's@^[^/]*\(/[^ ]*\) (0x[0-9a-f]*)$@\1@p')
}
is_elf() { [ "$(head -c 4 "$1" 2>/dev/null | od -An -c | tr -d ' ')" = '177ELF' ]; }

for b in "${binaries[@]}"; do copy_file "$b" strip; done
for inc in "${includes[@]}"; do
    [ -e "$inc" ] || die "--include: no such file or directory: $inc"
    inc=$(readlink -f "$inc")
    if [ -d "$inc" ]; then
        mkdir -p "$root$inc"
        cp -a "$inc/." "$root$inc/"
        while IFS= read -r -d '' f; do
            is_elf "$f" && copy_libs "$f"
        done < <(find "$inc" -type f -perm -u+x -print0)
    elif is_elf "$inc"; then
        copy_file "$inc" strip
    else
        copy_file "$inc"
    fi
done
# Host tools the executor or its tests may call; shipped only if installed.
for tool in ip runc; do
    p=$(command -v "$tool" 2>/dev/null) || continue
    copy_file "$(readlink -f "$p")"
    [ -e "$root$p" ] || { mkdir -p "$(dirname "$root$p")"; ln -s "$(readlink -f "$p")" "$root$p"; }
done

# Kernel modules (with dependencies, in load order) from modules.dep.
: >"$root/ci/modules"
if [ ${#modules[@]} -gt 0 ]; then
    # Beside an unpacked kernel package, or the host's own.
    moddir=$(dirname "$(dirname "$kernel")")/lib/modules/$kver
    [ -d "$moddir" ] || moddir=/lib/modules/$kver
    [ -f "$moddir/modules.dep" ] || die "no $moddir/modules.dep for kernel $kver (install its linux-image package)"
    declare -A mod_done=()
    add_module() { # add_module RELPATH: dependencies first
        local rel=$1 dep deps
        [ -n "${mod_done[$rel]:-}" ] && return 0
        mod_done[$rel]=1
        read -r -a deps < <(sed -n "s@^${rel//./\\.}: *@@p" "$moddir/modules.dep")
        for dep in "${deps[@]}"; do add_module "$dep"; done
        mkdir -p "$(dirname "$root/ci/mod/$rel")"
        case $rel in
            *.ko.xz) xz -dc "$moddir/$rel" >"$root/ci/mod/${rel%.xz}"; rel=${rel%.xz} ;;
            *.ko.zst) zstd -qdc "$moddir/$rel" >"$root/ci/mod/${rel%.zst}"; rel=${rel%.zst} ;;
            *.ko.gz) gzip -dc "$moddir/$rel" >"$root/ci/mod/${rel%.gz}"; rel=${rel%.gz} ;;
            *) cp "$moddir/$rel" "$root/ci/mod/$rel" ;;
        esac
        echo "/ci/mod/$rel" >>"$root/ci/modules"
    }
    for m in "${modules[@]}"; do
        rel=$(sed -n "s@^\(\([^:]*/\)\{0,1\}${m//[-_]/[-_]}\.ko[.a-z]*\):.*@\1@p" "$moddir/modules.dep" | head -n 1)
        if [ -z "$rel" ]; then
            # Built into the kernel: nothing to load.
            grep -qE "/${m//[-_]/[-_]}\.ko$" "$moddir/modules.builtin" 2>/dev/null ||
                die "kernel module '$m' not found for $kver"
            continue
        fi
        add_module "$rel"
    done
fi

# Minimal /etc: root and nobody, files-only name service, loopback host names.
cat >"$root/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/bin/sh
nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin
EOF
cat >"$root/etc/group" <<'EOF'
root:x:0:
tty:x:5:
nogroup:x:65534:
nobody:x:65534:
EOF
printf 'root:*:19000:0:99999:7:::\nnobody:*:19000:0:99999:7:::\n' >"$root/etc/shadow"
chmod 640 "$root/etc/shadow"
cat >"$root/etc/nsswitch.conf" <<'EOF'
passwd: files
group: files
shadow: files
hosts: files
EOF
printf '127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n' >"$root/etc/hosts"
echo taskgate-ci >"$root/etc/hostname"
: >"$root/etc/fstab"

# What to run, as shell data for the guest's /bin/sh.
shq() { local s=${1//\'/\'\\\'\'}; printf "'%s'" "$s"; }
{
    echo "REPO=$(shq "$REPO")"
    echo "cd \"\$REPO\" || finish 125 \"(no \$REPO)\""
    [ "$default_alloc" = 1 ] && echo "run_default_alloc $(shq "$target_dir/debug/taskgate")"
    for b in "${binaries[@]}"; do
        printf 'run_test %s' "$(shq "$b")"
        for a in "${test_args[@]}"; do printf ' %s' "$(shq "$a")"; done
        echo
    done
} >"$root/ci/plan"
{
    echo "export CARGO_MANIFEST_DIR=$(shq "$REPO")"
    [ -x "$target_dir/debug/taskgate" ] && echo "export CARGO_BIN_EXE_taskgate=$(shq "$target_dir/debug/taskgate")"
    while IFS= read -r name; do
        echo "export $name=$(shq "${!name}")"
    done < <(compgen -e | grep -E '^(RUST_BACKTRACE|RUST_LOG|RUST_TEST_[A-Z_]+|TASKGATE_[A-Za-z0-9_]+)$' || true)
    for kv in "${envs[@]}"; do echo "export ${kv%%=*}=$(shq "${kv#*=}")"; done
} >"$root/ci/env"
mkdir -p "$root$REPO"
[ -f "$REPO/ci/leftovers.sh" ] && cp "$REPO/ci/leftovers.sh" "$root/ci/leftovers.sh"

# Stage 1 (/init, on the initramfs): the initramfs cannot be pivot_root'ed
# (EINVAL), so copy it into a tmpfs and switch_root there, as a real host's
# root would be a real mount.
install -m 755 "$REPO/ci/guest/init" "$root/init"

# Stage 2: mounts, cgroup layout for the mode, layout checks, the tests.
install -m 755 "$REPO/ci/guest/stage2" "$root/ci/stage2"

initrd=$work/initrd.gz
(cd "$root" && find . -print0 | cpio --null -o -H newc --owner=0:0 --quiet) | gzip -1 >"$initrd"
t_built=$(date +%s.%N)
say "initramfs: $(du -h "$initrd" | cut -f1) compressed, $(du -sh "$root" | cut -f1) unpacked, built in $(awk -v a="$t_build" -v b="$t_built" 'BEGIN { printf "%.1f", b - a }') s"
say "kernel: $kernel"

# -------------------------------------------------------------------- boot --
if [ "$accel" = auto ]; then
    # Usable means: the CPU offers virtualization to this machine (a node
    # can exist without it, and a guest then hangs), and the node opens
    # read-write (it may be root's only).
    if grep -qwE 'vmx|svm' /proc/cpuinfo && (exec 9<>/dev/kvm) 2>/dev/null; then
        accel=kvm
    else
        accel=tcg
    fi
fi
case $accel in
    kvm) accel_args=(-accel kvm -cpu host) ;;
    *) accel_args=(-accel tcg,thread=multi -cpu max) ;;
esac
say "accelerator: $accel"
[ -n "$log_dir" ] && mkdir -p "$log_dir"
final=0
summary=()
for mode in "${modes[@]}"; do
    log=$work/qemu-$mode.log
    append="console=ttyS0 quiet loglevel=3 panic=-1 random.trust_cpu=on tgci.mode=$mode"
    [ "$mode" = v2 ] && append+=" cgroup_no_v1=all"
    [ "$self_test" = 1 ] && append+=" tgci.selftest=1"
    say "===== booting guest: cgroup $mode (timeout ${timeout_s}s)"
    t0=$(date +%s.%N)
    # In the background, so that an INT/TERM trap runs at once and stops qemu
    # (by its pid file) instead of waiting for the guest.
    rm -f "$work/qemu.pid" "$work/qemu.rc"
    {
        qemu_rc=0
        timeout --kill-after=10 "$timeout_s" \
            qemu-system-x86_64 -nodefaults -no-user-config -display none -no-reboot \
            -machine pc "${accel_args[@]}" -smp "$smp" -m "$memory" \
            -kernel "$kernel" -initrd "$initrd" -append "$append" \
            -chardev stdio,id=con,signal=off -serial chardev:con -monitor none -nic none \
            -pidfile "$work/qemu.pid" </dev/null 2>&1 || qemu_rc=$?
        echo "$qemu_rc" >"$work/qemu.rc"
    } | sed -u 's/\r$//' | tee "$log" &
    wait $! || true
    qrc=$(cat "$work/qemu.rc" 2>/dev/null || echo 125)
    t1=$(date +%s.%N)
    secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
    [ -n "$log_dir" ] && cp "$log" "$log_dir/qemu-$mode.log"
    line=$(grep -a "^$MARK mode=$mode rc=" "$log" | tail -n 1 || true)
    if [ -n "$line" ]; then
        rc=${line#"$MARK mode=$mode rc="}; rc=${rc%% *}
        [[ $rc =~ ^[0-9]+$ ]] || rc=125
    elif [ "$qrc" = 124 ] || [ "$qrc" = 137 ]; then
        rc=124; say "guest (cgroup $mode) timed out after ${timeout_s}s"
    else
        rc=125; say "guest (cgroup $mode) ended without a result line (qemu exit $qrc; kernel panic or /init crash?)"
    fi
    if [ "$rc" = 0 ]; then verdict=PASS; else verdict="FAIL (exit $rc)"; fi
    summary+=("cgroup $mode: $verdict in ${secs}s")
    say "===== cgroup $mode: $verdict, guest ran ${secs}s"
    [ "$rc" != 0 ] && [ "$final" = 0 ] && final=$rc
done

for s in "${summary[@]}"; do say "$s"; done
exit "$final"
