#!/usr/bin/env bash
# The README's test command: set up what is missing, then run the whole test suite against a
# private PostgreSQL (or ONCELOG_DATABASE_URL when set). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh dev
exec .venv/bin/python -m pytest "$@"
