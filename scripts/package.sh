#!/usr/bin/env bash
# Builds what a user installs, into dist/ (or $DIST_DIR):
#   auto-assign-<version>-<arch>-linux.tar.gz   the service: the release binary, a config.yaml
#       for /etc/auto-assign (the repo's, with the store and file claims in /var/lib/auto-assign
#       and the fleet reporters on), the systemd unit and sysusers file (packaging/), README.md
#       (and LICENSE when there is one);
#   koishi-plugin-auto-assign-<version>.tgz     the Koishi plugin (npm pack; `npm i ./<tgz>`);
#   nonebot_plugin_auto_assign-<version>-py3-none-any.whl   the NoneBot plugin (pip wheel).
# The binary: `cargo build --release --locked`, unless AUTO_ASSIGN_BIN names a built one (the
# test suite passes the one it built). Prints the absolute path of each package on stdout, one a
# line (everything else goes to stderr). Needs: cargo (unless AUTO_ASSIGN_BIN), tar, gzip, npm,
# node, python3 with pip or venv (the wheel's build backend, hatchling, comes from PyPI, as pip
# fetches it for any pyproject package).
#   scripts/package.sh
#   AUTO_ASSIGN_BIN=target/release/auto-assign DIST_DIR=/tmp/out scripts/package.sh
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD

die() {
  echo "package.sh: error: $*" >&2
  exit 1
}
need() {
  command -v "$1" >/dev/null || die "$1 is not installed ($2)"
}
step() {
  echo "package.sh: $*" >&2
}

need tar "to make the service's tarball"
need gzip "to make the service's tarball"
need npm "to pack the Koishi plugin: apt-get install nodejs npm"
need node "to check the Koishi package: apt-get install nodejs npm"
python=${PYTHON:-python3}
need "$python" "to build the NoneBot plugin's wheel"

dist=${DIST_DIR:-$repo/dist}
mkdir -p "$dist"
dist=$(cd "$dist" && pwd)
stage=$(mktemp -d "${TMPDIR:-/tmp}/auto-assign-package.XXXXXX")
trap 'rm -rf "$stage"' EXIT
# Only this script's own packages are replaced; anything else in the directory stays.
rm -f "$dist"/auto-assign-*-linux.tar.gz "$dist"/koishi-plugin-auto-assign-*.tgz \
  "$dist"/nonebot_plugin_auto_assign-*.whl

# Every file of the packages gets the last commit's time (reproducible tarballs).
epoch=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}

# --- 1. The service ------------------------------------------------------------------------
if [[ -n "${AUTO_ASSIGN_BIN:-}" ]]; then
  [[ -f "$AUTO_ASSIGN_BIN" && -x "$AUTO_ASSIGN_BIN" ]] ||
    die "AUTO_ASSIGN_BIN=$AUTO_ASSIGN_BIN is not an executable file (unset it to build one)"
  bin=$AUTO_ASSIGN_BIN
  step "the service binary: $bin (AUTO_ASSIGN_BIN)"
else
  need cargo "to build the service; or set AUTO_ASSIGN_BIN to a built binary"
  step "cargo build --release --locked"
  cargo build --release --locked >&2
  bin=${CARGO_TARGET_DIR:-$repo/target}/release/auto-assign
  [[ -x "$bin" ]] || die "cargo build succeeded but $bin is missing"
fi
version_line=$("$bin" --version) || die "$bin --version failed"
version=${version_line#auto-assign }
[[ "$version" =~ ^[0-9]+\.[0-9]+\.[0-9]+ ]] ||
  die "$bin --version printed \"$version_line\", not \"auto-assign <version>\""
crate_version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -1)
if [[ "$version" != "$crate_version" ]]; then
  step "warning: the binary is version $version, Cargo.toml says $crate_version; packaging $version"
fi
arch=$(uname -m)
name=auto-assign-$version-$arch-linux
mkdir "$stage/$name"
install -m 0755 "$bin" "$stage/$name/auto-assign"
install -m 0644 packaging/auto-assign.service packaging/auto-assign.sysusers README.md \
  "$stage/$name/"
for f in LICENSE LICENSE-MIT LICENSE-APACHE COPYING; do
  if [[ -f $f ]]; then install -m 0644 "$f" "$stage/$name/"; fi
done

# config.yaml for /etc/auto-assign: the repo's (every key and comment as documented), with the
# paths it gives relative to itself moved to the service's state directory, and the example
# fleet file replaced by the fleet reporters (the Koishi and NoneBot plugins). Each line
# replaced must be there exactly once: a config.yaml reworded here stops the build.
replace_line() { # <file> <exact line> <replacement lines...>
  local file=$1 line=$2 n
  shift 2
  n=$(grep -cxF -- "$line" "$file" || true)
  [[ $n == 1 ]] || die "config.yaml has $n line(s) \"$line\", expected 1: update scripts/package.sh to the new config.yaml"
  LINE=$line REPLACEMENT=$(printf '%s\n' "$@") awk '
    $0 == ENVIRON["LINE"] { print ENVIRON["REPLACEMENT"]; next } { print }
  ' "$file" >"$file.new"
  mv "$file.new" "$file"
}
config=$stage/$name/config.yaml
{
  echo "# Installed as /etc/auto-assign/config.yaml (root:auto-assign, 0640: it holds api.token)."
  echo "# The store and the file claims are in /var/lib/auto-assign, the only directory the"
  echo "# systemd unit lets the service write; the fleet comes from the Koishi and NoneBot plugins"
  echo "# (sources.http) or OneBot connections (sources.onebot)."
  cat config.yaml
} >"$config"
replace_line "$config" \
  '  url: sqlite://data/auto-assign.db   # relative to this file; or postgres://user:pass@host/db' \
  '  url: sqlite:///var/lib/auto-assign/auto-assign.db   # or postgres://user:pass@host/db'
replace_line "$config" \
  '  file: examples/fleet.yaml   # a watched fleet file (relative to this file)' \
  '  http: {}                    # fleet reporters: the Koishi and NoneBot plugins (set api.token)' \
  '  # file: fleet.yaml          # a watched fleet file (relative to this file)'
replace_line "$config" \
  '  dataDir: data               # file claims (no Redis) under {dataDir}/{plugin}/message_claims/' \
  '  dataDir: /var/lib/auto-assign   # file claims (no Redis) under {dataDir}/{plugin}/message_claims/'
chmod 0644 "$config"

tarball=$dist/$name.tar.gz
step "tar $name/ -> $tarball"
tar -C "$stage" --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$epoch" -cf - "$name" |
  gzip -n >"$tarball"

# --- 2. The Koishi plugin ------------------------------------------------------------------
# package.json `files` (src, locales, types, both READMEs), `main` (src/index.js) and `types`
# (types/index.d.ts): plain CommonJS, no build step (the sources are // @ts-check JavaScript; the
# declarations are generated from them and committed, checked by the plugin's tests). The tests
# stay out.
step "npm pack integrations/koishi"
pack_json=$(cd integrations/koishi && npm pack --json --pack-destination "$dist" 2>"$stage/npm-pack.log") || {
  cat "$stage/npm-pack.log" >&2
  die "npm pack failed in integrations/koishi"
}
tgz=$(PACK="$pack_json" node -e '
  const [p] = JSON.parse(process.env.PACK)
  const files = p.files.map(f => f.path)
  const pkg = require("./integrations/koishi/package.json")
  const main = pkg.main || "index.js"
  const wanted = ["package.json", main, "README.md", "README.en.md", "locales/zh-CN.json", "locales/en-US.json", pkg.types]
  const missing = wanted.filter(f => f && !files.includes(f))
  const extra = files.filter(f => /^(test|node_modules)\//.test(f))
  if (missing.length || extra.length) {
    console.error(`the npm package lacks ${missing.join(", ") || "nothing"} and has ${extra.join(", ") || "nothing"} it should not: check package.json "files" and "main"`)
    process.exit(1)
  }
  console.log(p.filename)
') || die "the Koishi package is incomplete"
tgz=$dist/$tgz
[[ -f "$tgz" ]] || die "npm pack did not write $tgz"

# --- 3. The NoneBot plugin -----------------------------------------------------------------
# pip: python3's own, or (Debian's python3 has none without python3-pip) a scratch venv's.
pip=("$python" -m pip)
if ! "$python" -m pip --version >/dev/null 2>&1; then
  "$python" -m venv "$stage/venv" >&2 ||
    die "$python has neither pip nor venv (apt-get install python3-venv), needed to build the wheel"
  pip=("$stage/venv/bin/python" -m pip)
fi
step "pip wheel integrations/nonebot"
SOURCE_DATE_EPOCH=$epoch "${pip[@]}" wheel --no-deps --disable-pip-version-check --quiet \
  --wheel-dir "$stage/wheel" integrations/nonebot >&2 || die "pip wheel failed in integrations/nonebot"
wheels=("$stage"/wheel/nonebot_plugin_auto_assign-*.whl)
[[ ${#wheels[@]} == 1 && -f ${wheels[0]} ]] || die "pip wheel made no nonebot_plugin_auto_assign wheel"
"$python" - "${wheels[0]}" <<'EOF' || die "the NoneBot wheel is incomplete"
import sys, zipfile
names = zipfile.ZipFile(sys.argv[1]).namelist()
need = ["nonebot_plugin_auto_assign/__init__.py", "nonebot_plugin_auto_assign/py.typed"]
missing = [n for n in need if n not in names]
extra = [n for n in names if n.startswith("tests/")]
if missing or extra:
    sys.exit(f"the wheel lacks {missing} and has {extra} it should not: check pyproject.toml")
EOF
whl=$dist/$(basename "${wheels[0]}")
mv "${wheels[0]}" "$whl"

step "built into $dist:"
printf '%s\n' "$tarball" "$tgz" "$whl"
