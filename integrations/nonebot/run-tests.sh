#!/usr/bin/env bash
# Runs the plugin's tests (nonebug + pytest) against the real auto-assign service binary.
#   integrations/nonebot/run-tests.sh [pytest args...]
#   integrations/nonebot/run-tests.sh --setup-only     (the venv only: scripts/test.sh fetches it
#                                                      while the Rust code compiles)
# Creates .venv (pinned versions from requirements-test.txt, the plugin installed editable) when
# missing; builds the service (cargo build --release) when its binary is missing, unless
# AUTO_ASSIGN_BIN names one.
set -euo pipefail
cd "$(dirname "$0")"

# .venv/.installed holds the checksum of what was installed: a changed pin reinstalls, a
# half-finished install is finished.
want="$(cat requirements-test.txt pyproject.toml | cksum)"
if [[ ! -f .venv/.installed || "$(cat .venv/.installed)" != "$want" ]]; then
    [[ -x .venv/bin/python ]] || python3 -m venv .venv
    .venv/bin/python -m pip install --quiet --disable-pip-version-check -r requirements-test.txt
    .venv/bin/python -m pip install --quiet --disable-pip-version-check --no-deps -e .
    echo "$want" > .venv/.installed
fi

if [[ "${1:-}" == --setup-only ]]; then
    exit 0
fi

bin="${AUTO_ASSIGN_BIN:-../../target/release/auto-assign}"
if [[ ! -x "$bin" ]]; then
    (cd ../.. && cargo build --release)
fi

exec .venv/bin/python -m pytest "$@"
