#!/usr/bin/env bash
# The whole test suite, on a fresh machine: installs what the tests need (PostgreSQL 15 and
# redis-server from Debian's packages; the tests start their own servers on free loopback
# ports), then runs
# formatting, lints and every test (release build: the property tests and the planner are much
# faster optimised).
set -euo pipefail
cd "$(dirname "$0")/.."

apt_install() {
  local sudo=""
  if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
  echo "installing $*" >&2
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

missing=()
if ! [ -x /usr/lib/postgresql/15/bin/initdb ] && ! command -v initdb >/dev/null; then
  missing+=(postgresql)
fi
if ! command -v redis-server >/dev/null || ! command -v redis-cli >/dev/null; then
  missing+=(redis-server)
fi
if [ ${#missing[@]} -gt 0 ]; then
  apt_install "${missing[@]}"
fi

cargo fmt --all -- --check
cargo clippy --all-targets -- -D warnings
cargo test --release
