#!/usr/bin/env bash
# The README's main-job command: set up what is missing, then run the demo on the embedded
# default (a private PostgreSQL started on demand), or on ONCELOG_DATABASE_URL when set.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh main
exec .venv/bin/oncelog demo "$@"
