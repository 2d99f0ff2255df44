#!/usr/bin/env bash
# A bounded fuzz pass over everything the service reads from outside: OneBot frames, fleet
# snapshots, `coord eval` lines, the config and fleet files (src/fuzz.rs). The test suite runs
# the same targets with proptest's default 256 cases each; this runs CASES (default 200,000)
# each, in about ten seconds. A failure prints the input and proptest keeps it in
# proptest-regressions/ so the next run tries it first.
set -euo pipefail
cd "$(dirname "$0")/.."
export PROPTEST_CASES="${CASES:-200000}"
exec cargo test --release --lib fuzz_ -- --test-threads 2
