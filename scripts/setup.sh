#!/usr/bin/env bash
# Installs what oncelog needs on a Debian/Ubuntu machine, then the project into .venv.
# Idempotent: installs only what is missing, and is quick when everything is there.
#   apt: PostgreSQL server binaries, a Java runtime and the PostgreSQL JDBC driver (for Spark)
#   pip: a virtual environment with oncelog, its extras (dev, spark, metrics, bench) and oncelog-verify
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
  echo "oncelog needs Python >= 3.11 (found: $("$PYTHON" --version 2>&1 || echo none))" >&2
  exit 1
fi

missing=()
compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null || command -v initdb >/dev/null || missing+=(postgresql)
command -v java >/dev/null || missing+=(default-jre-headless)
[ -f /usr/share/java/postgresql.jar ] || missing+=(libpostgresql-jdbc-java)
"$PYTHON" -c 'import venv, ensurepip' 2>/dev/null || missing+=(python3-venv)

if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]} with apt-get"
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
# The full install runs when pyproject.toml changed; otherwise only the (fast) re-link of the
# package, which strict editable mode needs to see files added since the last install.
stamp=.venv/.oncelog-deps-$(cat pyproject.toml verify/pyproject.toml | sha256sum | cut -c1-16)
if [ ! -f "$stamp" ]; then
  echo "setup: installing Python dependencies into .venv"
  .venv/bin/python -m pip install -q --upgrade pip "setuptools>=77" wheel
  # oncelog-verify (folder verify/, the `verify` extra) is its own distribution: installed from
  # here in the same call, it is what satisfies the extra.
  .venv/bin/python -m pip install -q -e ./verify -e ".[dev,spark,metrics,bench,verify]" \
    --config-settings editable_mode=strict
  rm -f .venv/.oncelog-deps-*
  touch "$stamp"
else
  log=$(mktemp)
  if ! .venv/bin/python -m pip install -q --no-deps --no-build-isolation -e . -e ./verify \
      --config-settings editable_mode=strict >"$log" 2>&1; then
    cat "$log" >&2
    rm -f "$log"
    exit 1
  fi
  rm -f "$log"
fi
