#!/usr/bin/env bash
# Lint and type-check (configuration in pyproject.toml): ruff on the package, tests, benchmarks and the
# docs' hooks; mypy --strict on the package and the docs' hooks. Exits non-zero on any finding. Needs the
# `test` extra (mypy, ruff).
set -euo pipefail
cd "$(dirname "$0")/.."

status=0
ruff check opendp_wgm tests benchmarks docs/hooks || status=1
mypy opendp_wgm docs/hooks || status=1
exit "$status"
