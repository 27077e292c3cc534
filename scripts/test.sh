#!/usr/bin/env bash
# Set up (see setup.sh) and run the whole test suite plus the linter.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
. .venv/bin/activate
ruff check .
python -m pytest test -q "$@"
