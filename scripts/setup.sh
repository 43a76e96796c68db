#!/usr/bin/env bash
# Installs what oncelog needs on a Debian/Ubuntu machine, then the project into .venv.
# Idempotent: installs only what is missing, and is quick when everything is there.
#
#   scripts/setup.sh main   what the main job (oncelog demo) needs: oncelog and its spark extra
#   scripts/setup.sh dev    the above, plus what the tests need: the dev, metrics, bench and verify
#                           extras and oncelog-verify (the default: scripts/test.sh, .ci/run)
#
#   apt: PostgreSQL server binaries, pg_auto_failover (oncelog dev-cluster), a Java runtime >= 17
#        (Spark 4) and the PostgreSQL JDBC driver
#   pip: a virtual environment .venv holding the project, editable
# It ends by saying what it installed.
set -euo pipefail
cd "$(dirname "$0")/.."

profile=${1:-dev}
case "$profile" in
  main) extras="spark" ;;
  dev) extras="dev,spark,metrics,bench,verify,broker" ;;
  *) echo "usage: scripts/setup.sh [main|dev]" >&2; exit 2 ;;
esac

PYTHON=${PYTHON:-python3}
if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
  echo "oncelog needs Python >= 3.11 (found: $("$PYTHON" --version 2>&1 || echo none))" >&2
  exit 1
fi

# The major version of the java on PATH (0: none). "1.8.0_x" is Java 8; "17.0.x" is 17.
java_major() {
  local v
  v=$(java -version 2>&1 | sed -n 's/.*version "\([^"]*\)".*/\1/p' | head -1) || true
  case "$v" in
    "") echo 0 ;;
    1.*) echo "$v" | cut -d. -f2 ;;
    *) echo "${v%%[.+-]*}" ;;
  esac
}

# Clusters Debian's postgresql-common knows of (0 without it).
clusters() {
  if command -v pg_lsclusters >/dev/null; then pg_lsclusters -h 2>/dev/null | wc -l; else echo 0; fi
}

installed=()
apt_install() {
  echo "setup: installing $* with apt-get"
  local sudo=""
  if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
  installed+=("$@")
}

clusters_before=$(clusters)
missing=()
compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null || command -v initdb >/dev/null || missing+=(postgresql)
command -v java >/dev/null || missing+=(default-jre-headless)
[ -f /usr/share/java/postgresql.jar ] || missing+=(libpostgresql-jdbc-java)
"$PYTHON" -c 'import venv, ensurepip' 2>/dev/null || missing+=(python3-venv)
# kcat (librdkafka's command-line client): the broker's tests use it as a Kafka user would.
[ "$profile" = dev ] && ! command -v kcat >/dev/null && missing+=(kcat)
if [ ${#missing[@]} -gt 0 ]; then
  apt_install "${missing[@]}"
fi

# pg_auto_failover runs `oncelog dev-cluster` (three nodes with automatic failover); its
# extension is built for one PostgreSQL major version: the newest server installed.
pg_major=$(ls /usr/lib/postgresql 2>/dev/null | sort -n | tail -1 || true)
if [ -n "$pg_major" ] && { ! command -v pg_autoctl >/dev/null \
    || [ ! -f "/usr/share/postgresql/$pg_major/extension/pgautofailover.control" ]; }; then
  apt_install pg-auto-failover-cli "postgresql-$pg_major-auto-failover"
fi

# Spark 4 runs on Java 17 or later: an older default java gets a newer one beside it.
if [ "$(java_major)" -lt 17 ]; then
  apt_install openjdk-17-jre-headless
  java17=$(ls -d /usr/lib/jvm/java-17-openjdk-*/bin/java 2>/dev/null | head -1 || true)
  if [ -n "$java17" ] && [ "$(java_major)" -lt 17 ]; then
    echo "setup: the default java is older than 17; Spark needs 17+: run oncelog with" >&2
    echo "       JAVA_HOME=$(dirname "$(dirname "$java17")") (or: sudo update-alternatives --config java)" >&2
  fi
fi

# Debian's postgresql package creates and starts a cluster of its own (port 5432 by default);
# oncelog runs its own private server instead and never uses it: say so, once, when it appears.
clusters_after=$(clusters)
if [ "$clusters_after" -gt "$clusters_before" ]; then
  echo "setup: Debian's postgresql package started its own cluster ($(pg_lsclusters -h | awk '{print $1 "/" $2 " on port " $3}' | paste -sd, -))."
  echo "       oncelog does not use it (it runs a private server of its own); to stop it: sudo systemctl disable --now postgresql"
fi

if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
  installed+=(".venv (a Python virtual environment)")
fi
# The full install runs when pyproject.toml changed or a larger profile is asked for; otherwise
# only the (fast) re-link of the package, which strict editable mode needs to see files added
# since the last install. A dev install serves main too.
digest=$(cat pyproject.toml verify/pyproject.toml | sha256sum | cut -c1-16)
stamp=.venv/.oncelog-deps-$profile-$digest
if [ ! -f "$stamp" ] && [ ! -f ".venv/.oncelog-deps-dev-$digest" ]; then
  echo "setup: installing oncelog[$extras] and its Python dependencies into .venv"
  targets=(-e ".[$extras]")
  # oncelog-verify (folder verify/, the `verify` extra) is its own distribution: installed from
  # here in the same call, it is what satisfies the extra.
  if [ "$profile" = dev ]; then targets=(-e ./verify "${targets[@]}"); fi
  log=$(mktemp)
  if ! { .venv/bin/python -m pip install -q --upgrade pip "setuptools>=77" wheel \
         && .venv/bin/python -m pip install -q "${targets[@]}" --config-settings editable_mode=strict; } >"$log" 2>&1; then
    cat "$log" >&2
    rm -f "$log"
    exit 1
  fi
  rm -f "$log"
  rm -f .venv/.oncelog-deps-*
  touch "$stamp"
  installed+=("oncelog[$extras] in .venv")
else
  relink=(-e .)
  if .venv/bin/python -c 'import oncelog.verify' 2>/dev/null; then relink+=(-e ./verify); fi
  log=$(mktemp)
  if ! .venv/bin/python -m pip install -q --no-deps --no-build-isolation "${relink[@]}" \
      --config-settings editable_mode=strict >"$log" 2>&1; then
    cat "$log" >&2
    rm -f "$log"
    exit 1
  fi
  rm -f "$log"
fi

# kafka-python's own integration tests ship in its sdist, not its wheel: the broker's
# conformance test (tests/acceptance/test_kafka_python_conformance.py) runs them, so the dev
# profile keeps the sdist of the installed version beside the venv. Tests never download.
if [ "$profile" = dev ]; then
  kp_version=$(.venv/bin/python -c 'import kafka; print(kafka.__version__)')
  kp_dir=.venv/share/oncelog/kafka-python-$kp_version
  if [ ! -d "$kp_dir/test/integration" ]; then
    kp_tmp=$(mktemp -d)
    log=$(mktemp)
    if ! .venv/bin/python -m pip download -q --no-deps --no-binary :all: "kafka-python==$kp_version" -d "$kp_tmp" >"$log" 2>&1; then
      cat "$log" >&2
      rm -rf "$kp_tmp" "$log"
      exit 1
    fi
    rm -f "$log"
    rm -rf "$kp_dir"
    mkdir -p "$kp_dir"
    tar -xzf "$kp_tmp"/kafka_python-*.tar.gz -C "$kp_dir" --strip-components=1
    rm -rf "$kp_tmp"
    installed+=("kafka-python $kp_version's own tests (its sdist)")
  fi
fi

if [ ${#installed[@]} -gt 0 ]; then
  echo "setup: installed: $(IFS=';'; echo "${installed[*]}" | sed 's/;/; /g')"
else
  echo "setup: nothing to install (PostgreSQL, pg_auto_failover, Java $(java_major), the JDBC driver and .venv are in place)"
fi
