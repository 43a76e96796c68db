"""kafka-python's own integration tests against ``oncelog broker``: an external conformance suite.

kafka-python's sdist ships the tests its maintainers run against real Kafka brokers; given
``KAFKA_URI`` they use a running broker instead of starting one. ``scripts/setup.sh dev`` keeps
the sdist of the installed version beside the venv; this test copies its ``test`` package, adds
the ``test/service.py`` the sdist leaves out (tests/support/kafka_python_service.py), starts
``oncelog broker`` over this test's database, runs the producer, consumer, admin, SASL and SSL
suites in a pytest of their own, and reads their JUnit report: every test passes, except those
deselected below, each for the reason given and written in docs/guide-broker.md; every skip is
one of kafka-python's own, also listed there.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import kafka
import pytest
import sqlalchemy as sa

from tests.support.broker import broker_command

ROOT = Path(__file__).resolve().parents[2]
#: Where scripts/setup.sh dev unpacks the sdist of the installed kafka-python.
SDIST = Path(sys.prefix) / "share" / "oncelog" / f"kafka-python-{kafka.__version__}"
#: The Kafka version the broker's ApiVersions answer describes (kafka-python infers 4.0 from it,
#: which its own test_kafka_version_infer checks).
KAFKA_VERSION = "4.0"
SUITES = [
    "test/integration/test_producer_integration.py",
    "test/integration/test_consumer_integration.py",
    "test/integration/test_admin_integration.py",
    "test/integration/test_sasl_integration.py",
    "test/integration/test_ssl_integration.py",
]
#: Tests not run, each with its reason (also in docs/guide-broker.md, "kafka-python's own tests").
DESELECTED = {
    "test/integration/test_consumer_integration.py::test_kafka_consumer_unsupported_encoding": (
        "the store keeps records one by one and a fetch answers uncompressed batches, so a consumer "
        "without the gzip codec never meets a gzip batch"
    ),
    "test/integration/test_admin_integration.py::test_describe_metadata_quorum": (
        "DescribeQuorum describes KRaft's metadata quorum; there is none: the store holds the metadata"
    ),
    "test/integration/test_ssl_integration.py::TestSSLConnection::test_ssl_handshake": (
        "its fixture starts a Kafka broker of its own with Java keystores, whatever KAFKA_URI says; "
        "the broker's TLS is tested by tests/acceptance/test_broker_tls.py"
    ),
    "test/integration/test_ssl_integration.py::TestSSLConnection::test_legacy_kafka_client_ssl": (
        "its fixture starts a Kafka broker of its own with Java keystores, whatever KAFKA_URI says; "
        "the broker's TLS is tested by tests/acceptance/test_broker_tls.py"
    ),
}
#: kafka-python's own skip reasons that apply to this run (also in docs/guide-broker.md).
SKIP_REASONS = {
    "Requires KAFKA_VERSION < 0.10.1",
    "ListConfigResources requires broker >=4.1 (KRaft)",
    "Testing on external Kafka Broker",
}
#: The principal kafka-python's ACL test names (User:test): ACL principals are PostgreSQL roles.
ACL_ROLE = "test"


def _copy_of_the_tests(tmp_path: Path) -> Path:
    if not (SDIST / "test" / "integration").is_dir():
        raise AssertionError(f"kafka-python's tests are not at {SDIST}: run scripts/setup.sh dev")
    here = tmp_path / "kafka-python"
    shutil.copytree(SDIST / "test", here / "test")
    shutil.copy(SDIST / "pyproject.toml", here / "pyproject.toml")  # its pytest settings
    shutil.copy(ROOT / "tests" / "support" / "kafka_python_service.py", here / "test" / "service.py")
    # Without it, ``test`` is the standard library's test package.
    (here / "test" / "__init__.py").touch()
    return here


def _acl_role(engine: sa.Engine) -> bool:
    """Create the role the ACL test names, if it does not exist; whether this call created it."""
    with engine.begin() as conn:
        if conn.exec_driver_sql("SELECT 1 FROM pg_roles WHERE rolname = %(r)s", {"r": ACL_ROLE}).first():
            return False
        conn.exec_driver_sql(f"CREATE ROLE {ACL_ROLE} NOLOGIN")
        return True


@pytest.mark.timeout(900)
def test_kafka_pythons_own_integration_tests_pass_against_the_broker(
    db_url: str, engine: sa.Engine, tmp_path: Path
) -> None:
    tests = _copy_of_the_tests(tmp_path)
    kafka_root = tmp_path / "no-kafka"  # the fixtures want a Kafka install directory; nothing runs from it
    kafka_root.mkdir()
    report = tmp_path / "report.xml"
    made_role = _acl_role(engine)
    try:
        with broker_command(db_url, "--node-id", "0", "--auto-create-topics", "4") as (_, address):
            env = {
                **os.environ,
                "KAFKA_URI": f"PLAINTEXT://{address}",
                "KAFKA_VERSION": KAFKA_VERSION,
                "KAFKA_ROOT": str(kafka_root),
            }
            env.pop("PYTHONPATH", None)
            deselect = [arg for nodeid in DESELECTED for arg in ("--deselect", nodeid)]
            run = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pytest",
                    "-p",
                    "no:cacheprovider",
                    "-p",
                    "no:hypothesispytest",  # its plugin fails at the end of a session run from a copy
                    "--timeout=120",
                    "-q",
                    f"--junitxml={report}",
                    *deselect,
                    *SUITES,
                ],
                cwd=tests,
                env=env,
                capture_output=True,
                text=True,
                timeout=840,
                check=False,
            )
    finally:
        if made_role:
            with engine.begin() as conn:
                conn.exec_driver_sql(f"DROP ROLE {ACL_ROLE}")
    tail = run.stdout[-6000:] + run.stderr[-2000:]
    assert report.exists(), tail
    cases = ET.parse(report).getroot().iter("testcase")
    failed, skipped, passed = [], set(), 0
    for case in cases:
        name = f"{case.get('classname')}::{case.get('name')}"
        outcome = next(iter(case), None)
        if outcome is None or outcome.tag in ("system-out", "system-err", "properties"):
            passed += 1
        elif outcome.tag == "skipped":
            skipped.add(outcome.get("message", "").removeprefix("Skipped: ").strip())
        else:
            failed.append(f"{name}: {outcome.get('message', '')[:300]}")
    assert not failed, "\n".join(failed) + "\n" + tail
    assert skipped <= SKIP_REASONS, f"new skip reasons: {skipped - SKIP_REASONS}"
    assert passed >= 50, tail  # the suites really ran (52 when this was written)
    assert run.returncode == 0, tail


def test_the_guide_names_every_deselected_test_and_skip_reason() -> None:
    guide = (ROOT / "docs" / "guide-broker.md").read_text()
    for nodeid in DESELECTED:
        assert nodeid.rsplit("::", 1)[1] in guide, nodeid
    for reason in SKIP_REASONS:
        assert reason in guide, reason
