#!/usr/bin/env bash
# The whole test suite, on a fresh machine: installs what the tests need, then runs
# formatting, lints and every test (release build: the property tests and the planner are
# much faster optimised).
set -euo pipefail
cd "$(dirname "$0")/.."

cargo fmt --all -- --check
cargo clippy --all-targets -- -D warnings
cargo test --release
