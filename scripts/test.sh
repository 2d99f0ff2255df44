#!/usr/bin/env bash
# The whole test suite, on a fresh machine: installs what the tests need from Debian's
# packages (PostgreSQL 15, redis-server, MariaDB, Prometheus, Chromium and its driver, Node,
# Python's venv, iproute2 and nftables; the tests start their own servers on free loopback
# ports, and the partition test its hosts in network namespaces, as root), then runs
# formatting, lints and every test (an optimised build, the `ci` profile: the property tests
# and the planner are much faster optimised), then the Koishi plugin's tests (npm ci) and the
# NoneBot plugin's (a venv).
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
# The MySQL store's tests: a throwaway MariaDB server (mariadbd lives in /usr/sbin).
if ! [ -x /usr/sbin/mariadbd ] && ! command -v mariadbd >/dev/null; then
  missing+=(mariadb-server)
fi
# The operators' tests: promtool and a real Prometheus; the dashboard in headless Chromium.
if ! command -v promtool >/dev/null || ! command -v prometheus >/dev/null; then
  missing+=(prometheus)
fi
if ! command -v chromium >/dev/null; then
  missing+=(chromium)
fi
if ! command -v chromedriver >/dev/null; then
  missing+=(chromium-driver)
fi
# The integrations: the Koishi plugin (Node, npm ci) and the NoneBot plugin (a Python venv).
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  missing+=(nodejs npm)
fi
if ! python3 -c 'import venv, ensurepip' 2>/dev/null; then
  missing+=(python3-venv)
fi
# The packages' test: systemd-analyze verify on the unit, systemd-sysusers on the sysusers file.
if ! command -v systemd-analyze >/dev/null || ! command -v systemd-sysusers >/dev/null; then
  missing+=(systemd)
fi
# The partition test: hosts in network namespaces (ip, from iproute2), cut with nftables.
if ! command -v ip >/dev/null; then
  missing+=(iproute2)
fi
if ! command -v nft >/dev/null; then
  missing+=(nftables)
fi
if [ ${#missing[@]} -gt 0 ]; then
  apt_install "${missing[@]}"
fi

# Each part is timed; the times are printed at the end, also when a part fails.
timings=()
part() {
  local name=$1 start=$SECONDS
  shift
  "$@"
  timings+=("$(printf '%-12s %4d s' "$name" $((SECONDS - start)))")
}
report() {
  local status=$?
  # A part that failed leaves nothing running behind it.
  kill $(jobs -p) 2>/dev/null || true
  if [ -n "${fetched:-}" ]; then rm -rf "$fetched"; fi
  if [ ${#timings[@]} -gt 0 ]; then
    echo "time of each part:"
    printf '  %s\n' "${timings[@]}"
  fi
  return $status
}
trap report EXIT

# The integrations' dependencies come over the network while the Rust code compiles on every
# core: npm ci and the NoneBot venv are fetched beside the build, and waited for before their
# tests (about 35 s off a cold run). Their output is shown when they fail.
fetched=$(mktemp -d)
(cd integrations/koishi && npm ci --no-audit --no-fund) >"$fetched/koishi.log" 2>&1 &
koishi_deps=$!
integrations/nonebot/run-tests.sh --setup-only >"$fetched/nonebot.log" 2>&1 &
nonebot_deps=$!
await_fetch() {
  local pid=$1 log=$2
  if ! wait "$pid"; then
    echo "fetching dependencies failed:" >&2
    cat "$log" >&2
    return 1
  fi
}

rust_tests() {
  # nextest runs the test binaries side by side (each test in its own process), so tests
  # that wait on their servers overlap instead of queueing binary by binary. The crate has no
  # doc tests. Without nextest, cargo's own runner does the same work one binary at a time.
  # The `ci` profile is release without its thin local LTO and line tables (Cargo.toml says why).
  if cargo nextest --version >/dev/null 2>&1; then
    cargo nextest run --cargo-profile ci --no-fail-fast
  else
    cargo test --profile ci --no-fail-fast
  fi
}

part fmt cargo fmt --all -- --check
part clippy cargo clippy --all-targets --features bench -- -D warnings
part "Rust tests" rust_tests

# The integrations run against the binary the Rust tests just built.
export AUTO_ASSIGN_BIN="${CARGO_TARGET_DIR:-$PWD/target}/ci/auto-assign"
koishi_tests() {
  await_fetch "$koishi_deps" "$fetched/koishi.log"
  (cd integrations/koishi && npm test)
}
nonebot_tests() {
  await_fetch "$nonebot_deps" "$fetched/nonebot.log"
  integrations/nonebot/run-tests.sh
}
part Koishi koishi_tests
part NoneBot nonebot_tests
part Packages scripts/test-packages.sh
