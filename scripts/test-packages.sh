#!/usr/bin/env bash
# Tests the packages by installing them (scripts/test.sh's "Packages" part): builds them with
# scripts/package.sh into a temporary directory (the service binary from AUTO_ASSIGN_BIN, by
# default target/release/auto-assign, is packaged, not rebuilt), then
#   (a) unpacks the service's tarball, runs `auto-assign --version`, and serves the packaged
#       config.yaml (its /var/lib/auto-assign moved to a temporary directory, its port to a
#       free one) until /healthz answers and the SQLite store exists;
#   (b) creates a fresh Koishi project (npm init -y; `npm i` of the plugin's tarball and of
#       koishi, @koishijs/plugin-mock and @minatojs/driver-sqlite at the versions of the
#       plugin's package-lock.json, which is copied in first so every dependency below them is
#       the locked one too) and runs scripts/package-tests/koishi-roundtrip.js there against the
#       packaged service: two mock bots in two groups, each group answered by its assignee only;
#   (c) creates a fresh venv, installs the wheel with nonebug and pytest (every version pinned
#       by integrations/nonebot/requirements-test.txt, as constraints) and runs
#       scripts/package-tests/nonebot/ (nonebug) against the packaged service: the same round trip;
#   (d) checks the packaged systemd unit with `systemd-analyze verify` (on a copy whose
#       ExecStart names the unpacked binary: verify refuses a unit whose binary is missing) and
#       its exposure with `systemd-analyze security --offline=true`, and the sysusers file with
#       `systemd-sysusers --root` in a scratch root.
# Everything listens on 127.0.0.1 only. Any failure stops the script with a non-zero status and
# what failed; the work directory is kept then (KEEP=1 keeps it always).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD

fail() {
  echo "test-packages.sh: FAILED: $*" >&2
  exit 1
}
need() {
  command -v "$1" >/dev/null || fail "$1 is not installed ($2)"
}
need node "apt-get install nodejs npm"
need npm "apt-get install nodejs npm"
need python3 "apt-get install python3 python3-venv"
python3 -c 'import venv, ensurepip' 2>/dev/null || fail "python3 has no venv (apt-get install python3-venv)"
need systemd-analyze "apt-get install systemd"
need systemd-sysusers "apt-get install systemd"
need timeout "coreutils"

bin=${AUTO_ASSIGN_BIN:-${CARGO_TARGET_DIR:-$repo/target}/release/auto-assign}
[[ -x "$bin" ]] || fail "no service binary at $bin: cargo build --release, or set AUTO_ASSIGN_BIN"
bin=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")

work=$(mktemp -d "${TMPDIR:-/tmp}/auto-assign-packages.XXXXXX")
svc_pid=""
svc_log=""
cleanup() {
  local status=$?
  if [[ -n "$svc_pid" ]] && kill -0 "$svc_pid" 2>/dev/null; then
    kill -TERM "$svc_pid" 2>/dev/null || true
    wait "$svc_pid" 2>/dev/null || true
  fi
  if [[ $status != 0 ]]; then
    if [[ -n "$svc_log" && -f "$svc_log" ]]; then
      echo "--- the service's log, last lines ($svc_log)" >&2
      tail -n 20 "$svc_log" >&2
    fi
    echo "test-packages.sh: the work directory is kept: $work" >&2
  elif [[ -z "${KEEP:-}" ]]; then
    rm -rf "$work"
  else
    echo "work directory kept: $work"
  fi
}
trap cleanup EXIT

timings=()
started=$SECONDS
step() { # <name> <function>: runs it, times it
  local start=$SECONDS
  echo "== $1"
  "$2"
  timings+=("$(printf '%-44s %4d s' "$1" $((SECONDS - start)))")
}

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
# http_get <url> [token]: prints the body of a 2xx answer; fails (status 1) otherwise.
http_get() {
  python3 - "$@" <<'EOF'
import sys, urllib.request
req = urllib.request.Request(sys.argv[1])
if len(sys.argv) > 2:
    req.add_header("Authorization", "Bearer " + sys.argv[2])
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # 127.0.0.1: no proxy
try:
    with opener.open(req, timeout=2) as r:
        sys.stdout.write(r.read().decode())
except Exception as e:
    sys.exit(f"GET {sys.argv[1]}: {e}")
EOF
}
# start_service <binary> <config> <port> <log>: serve in the background until /healthz answers.
start_service() {
  local binary=$1 config=$2 port=$3 deadline=$((SECONDS + 15))
  svc_log=$4
  "$binary" serve --config "$config" >"$svc_log" 2>&1 &
  svc_pid=$!
  until http_get "http://127.0.0.1:$port/healthz" >/dev/null 2>&1; do
    kill -0 "$svc_pid" 2>/dev/null || fail "auto-assign serve --config $config exited at start"
    ((SECONDS < deadline)) || fail "auto-assign serve --config $config: no /healthz on port $port within 15 s"
    sleep 0.1
  done
}
# stop_service: SIGTERM; it must exit 0 (a clean stop).
stop_service() {
  local rc=0
  kill -TERM "$svc_pid"
  wait "$svc_pid" || rc=$?
  svc_pid=""
  [[ $rc == 0 ]] || fail "auto-assign serve exited with status $rc on SIGTERM"
  svc_log=""
}

# --- the packages ---------------------------------------------------------------------------
build() {
  AUTO_ASSIGN_BIN=$bin DIST_DIR=$work/dist scripts/package.sh >"$work/built" 2>"$work/package.log" || {
    cat "$work/package.log" >&2
    fail "scripts/package.sh"
  }
  mapfile -t built <"$work/built"
  [[ ${#built[@]} == 3 ]] || fail "scripts/package.sh printed ${#built[@]} path(s), not 3: ${built[*]}"
  tarball=${built[0]} tgz=${built[1]} whl=${built[2]}
  [[ $tarball == */auto-assign-*-linux.tar.gz && -f $tarball ]] || fail "no service tarball: $tarball"
  [[ $tgz == */koishi-plugin-auto-assign-*.tgz && -f $tgz ]] || fail "no Koishi package: $tgz"
  [[ $whl == */nonebot_plugin_auto_assign-*-py3-none-any.whl && -f $whl ]] || fail "no NoneBot wheel: $whl"
  for f in "${built[@]}"; do
    printf '  %-56s %8d KiB\n' "$(basename "$f")" $(($(stat -c %s "$f") / 1024))
  done
}

# --- (a) the service's tarball --------------------------------------------------------------
service_tarball() {
  tar -xzf "$tarball" -C "$work"
  local name
  name=$(basename "$tarball" .tar.gz)
  pkg=$work/$name
  [[ -d $pkg ]] || fail "$tarball does not unpack into $name/"
  local files
  files=$(cd "$pkg" && find . -mindepth 1 -printf '%P\n' | grep -vxE 'LICENSE.*|COPYING' | sort | tr '\n' ' ')
  [[ $files == "README.md auto-assign auto-assign.service auto-assign.sysusers config.yaml " ]] ||
    fail "$name/ holds: $files"
  local version
  version=$("$pkg/auto-assign" --version) || fail "$name/auto-assign --version"
  [[ $name == "${version/ /-}-"* ]] || fail "$name/auto-assign --version says \"$version\""
  echo "  $name/auto-assign --version: $version"

  # The packaged config.yaml as installed, but in a scratch state directory and on a free port.
  local port state=$work/state config=$work/etc/config.yaml
  port=$(free_port)
  mkdir -p "$state" "$work/etc"
  sed -e "s|/var/lib/auto-assign|$state|g" -e "s|^  bind: 127\.0\.0\.1:8787 |  bind: 127.0.0.1:$port |" \
    "$pkg/config.yaml" >"$config"
  grep -q "^  bind: 127.0.0.1:$port " "$config" || fail "the packaged config.yaml has no api.bind 127.0.0.1:8787"
  grep -q "sqlite://$state/auto-assign.db" "$config" || fail "the packaged config.yaml keeps no store in /var/lib/auto-assign"
  start_service "$pkg/auto-assign" "$config" "$port" "$work/serve-packaged-config.log"
  echo "  serve on the packaged config.yaml: /healthz $(http_get "http://127.0.0.1:$port/healthz" | grep -o '"status":"[a-z]*"')"
  stop_service
  [[ -f $state/auto-assign.db ]] || fail "serve on the packaged config.yaml made no $state/auto-assign.db"
  echo "  stopped cleanly; the store is in the state directory: $(cd "$state" && ls | tr '\n' ' ')"
}

# The service for the plugins' round trips: the packaged binary, on a free port, no delays.
token=package-test-secret
plugin_service() {
  local port
  port=$(free_port)
  url=http://127.0.0.1:$port
  mkdir -p "$work/service"
  cat >"$work/service/config.yaml" <<EOF
api: {bind: "127.0.0.1:$port", token: $token}
sources: {http: {startupWait: 0, offlineGrace: 30}}
triggerDelays: {startup: 0, botOnline: 0, botOffline: 0, botStatus: 0, channelJoined: 0, channelLeft: 0}
database: {url: "sqlite://state.db"}
EOF
  start_service "$pkg/auto-assign" "$work/service/config.yaml" "$port" "$work/service/service.log"
  echo "  the packaged auto-assign serves $url"
}

# --- (b) the Koishi plugin in a fresh Koishi project ----------------------------------------
koishi() {
  local app=$work/koishi-app lock=$repo/integrations/koishi/package-lock.json deps
  mkdir -p "$app"
  # the versions the plugin's tests run with
  deps=$(node -e '
    const p = require(process.argv[1]).packages
    console.log(["koishi", "@koishijs/plugin-mock", "@minatojs/driver-sqlite"]
      .map(n => { const v = p["node_modules/" + n]?.version; if (!v) throw new Error(n + " is not in " + process.argv[1]); return n + "@" + v }).join(" "))
  ' "$lock")
  (
    cd "$app"
    npm init -y >/dev/null
    cp "$lock" package-lock.json
    # shellcheck disable=SC2086
    npm install --save-exact --no-audit --no-fund --prefer-offline $deps "$tgz" >"$work/koishi-npm.log" 2>&1
  ) || {
    tail -n 30 "$work/koishi-npm.log" >&2
    fail "npm install in a fresh Koishi project"
  }
  echo "  npm i $deps $(basename "$tgz")"
  cp scripts/package-tests/koishi-roundtrip.js "$app/"
  (cd "$app" && AUTO_ASSIGN_URL=$url AUTO_ASSIGN_TOKEN=$token timeout 60 node koishi-roundtrip.js) \
    >"$work/koishi.log" 2>&1 || {
    cat "$work/koishi.log" >&2
    fail "the Koishi round trip"
  }
  grep '^koishi round trip' "$work/koishi.log" | sed 's/^/  /'
}

# --- (c) the NoneBot plugin in a fresh venv -------------------------------------------------
nonebot() {
  python3 -m venv "$work/venv"
  "$work/venv/bin/python" -m pip install --quiet --disable-pip-version-check \
    -c integrations/nonebot/requirements-test.txt "$whl" nonebug pytest pytest-asyncio \
    >"$work/nonebot-pip.log" 2>&1 || {
    tail -n 30 "$work/nonebot-pip.log" >&2
    fail "pip install of the wheel in a fresh venv"
  }
  echo "  pip install $(basename "$whl") nonebug pytest pytest-asyncio (pinned by requirements-test.txt)"
  cp -r scripts/package-tests/nonebot "$work/nonebot-test"
  (cd "$work/nonebot-test" && AUTO_ASSIGN_URL=$url AUTO_ASSIGN_TOKEN=$token \
    timeout 120 "$work/venv/bin/python" -m pytest -q -s) >"$work/nonebot.log" 2>&1 || {
    cat "$work/nonebot.log" >&2
    fail "the NoneBot round trip (nonebug)"
  }
  grep '^nonebot round trip' "$work/nonebot.log" | sed 's/^/  /'
  tail -n 1 "$work/nonebot.log" | sed 's/^/  pytest: /'
}

# --- (d) the systemd unit and sysusers file -------------------------------------------------
systemd_files() {
  local unit=$pkg/auto-assign.service out rc=0
  grep -qxF 'ExecStart=/usr/bin/auto-assign serve --config /etc/auto-assign/config.yaml' "$unit" ||
    fail "auto-assign.service: ExecStart is not /usr/bin/auto-assign serve --config /etc/auto-assign/config.yaml"
  # verify checks that ExecStart's binary exists: a copy names the unpacked one.
  mkdir -p "$work/systemd"
  sed "s|^ExecStart=/usr/bin/auto-assign |ExecStart=$pkg/auto-assign |" "$unit" >"$work/systemd/auto-assign.service"
  out=$(systemd-analyze verify "$work/systemd/auto-assign.service" 2>&1) || rc=$?
  # verify exits 0 on an unknown key or a bad value (it only warns): any output fails too.
  [[ $rc == 0 && -z $out ]] || fail "systemd-analyze verify auto-assign.service (status $rc):"$'\n'"$out"
  echo "  systemd-analyze verify auto-assign.service: ok (no output)"
  # --threshold is in tenths: 20 fails an exposure level above 2.0 (the unit has 1.2).
  out=$(systemd-analyze security --offline=true --threshold=20 "$work/systemd/auto-assign.service" 2>&1) || {
    echo "$out" >&2
    fail "systemd-analyze security: the unit's exposure level is above 2.0"
  }
  echo "  systemd-analyze security:$(grep -o 'Overall exposure level.*' <<<"$out" | sed 's/^Overall exposure level for [^:]*://')"
  mkdir -p "$work/sysroot/etc"
  out=$(systemd-sysusers --root="$work/sysroot" "$pkg/auto-assign.sysusers" 2>&1) ||
    fail "systemd-sysusers auto-assign.sysusers:"$'\n'"$out"
  grep -q '^auto-assign:x:[0-9]*:[0-9]*:.*:/var/lib/auto-assign:' "$work/sysroot/etc/passwd" ||
    fail "systemd-sysusers made no auto-assign user with home /var/lib/auto-assign"
  grep -q '^auto-assign:x:' "$work/sysroot/etc/group" || fail "systemd-sysusers made no auto-assign group"
  echo "  systemd-sysusers auto-assign.sysusers: user and group auto-assign (home /var/lib/auto-assign)"
}

step "package.sh" build
step "(a) the service's tarball" service_tarball
step "the packaged service for the plugins" plugin_service
step "(b) Koishi: npm i the tgz, round trip" koishi
step "(c) NoneBot: pip install the wheel, nonebug" nonebot
stop_service
step "(d) systemd unit and sysusers" systemd_files
echo "packages tested in $((SECONDS - started)) s:"
printf '  %s\n' "${timings[@]}"
