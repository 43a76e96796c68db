"""``oncelog broker`` over TLS: Kafka's SSL and SASL_SSL security protocols with real clients
(confluent-kafka, kafka-python), certificates from a throwaway CA (trustme), and the command's
handling of certificate files and encrypted keys."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import confluent_kafka as ck
import pytest
import sqlalchemy as sa
import trustme
from cryptography.hazmat.primitives import serialization
from kafka import KafkaConsumer
from kafka import TopicPartition as KTopicPartition
from kafka.errors import KafkaTimeoutError

import oncelog
from oncelog.broker.auth import Principals
from oncelog.broker.tls import server_tls_context
from oncelog.errors import ConfigurationError
from tests.support.broker import broker_command, running_broker
from tests.support.logcheck import read_partition
from tests.support.roles import client_principal

TOPIC = "sealed"


@dataclass(frozen=True)
class Pems:
    """A CA's certificate and the broker's certificate chain and key, as PEM files."""

    ca: Path
    cert: Path
    key: Path


@pytest.fixture
def pems(tmp_path: Path) -> Pems:
    """A fresh CA and a broker certificate for 127.0.0.1 and localhost."""
    ca = trustme.CA()
    issued = ca.issue_cert("127.0.0.1", "localhost")
    paths = Pems(tmp_path / "ca.pem", tmp_path / "broker.pem", tmp_path / "broker.key")
    ca.cert_pem.write_to_path(str(paths.ca))
    issued.cert_chain_pems[0].write_to_path(str(paths.cert))
    for extra in issued.cert_chain_pems[1:]:
        extra.write_to_path(str(paths.cert), append=True)
    issued.private_key_pem.write_to_path(str(paths.key))
    return paths


@pytest.fixture
def topic(db_url: str) -> str:
    """A one-partition topic of this test's database."""
    with oncelog.Admin(db_url) as admin:
        admin.create_topic(TOPIC, partitions=1)
    return TOPIC


def _deliver(config: dict[str, Any], value: bytes) -> Any:
    """Produce one record with librdkafka; its delivery error (None: delivered)."""
    outcome: list[Any] = []
    producer = ck.Producer({"message.timeout.ms": 10_000, "enable.idempotence": True, **config})
    producer.produce(TOPIC, value, partition=0, on_delivery=lambda err, msg: outcome.append(err))
    producer.flush(20)
    return outcome[0] if outcome else "not delivered"


@pytest.mark.timeout(120)
def test_kafka_clients_write_and_read_over_tls(db_url: str, topic: str, pems: Pems, tmp_path: Path) -> None:
    tls = server_tls_context(pems.cert, pems.key)
    with running_broker(db_url, tls=tls) as address:
        ssl_config = {"bootstrap.servers": address, "security.protocol": "SSL", "ssl.ca.location": str(pems.ca)}
        assert _deliver(ssl_config, b"over tls") is None
        consumer = KafkaConsumer(
            bootstrap_servers=address,
            security_protocol="SSL",
            ssl_cafile=str(pems.ca),
            isolation_level="read_committed",
            auto_offset_reset="earliest",
            consumer_timeout_ms=5_000,
        )
        try:
            consumer.assign([KTopicPartition(TOPIC, 0)])
            assert [m.value for m in consumer] == [b"over tls"]
        finally:
            consumer.close()

        # A client that trusts another CA refuses the broker; one speaking plain text is not
        # served, and the broker serves TLS clients on after both.
        stranger = trustme.CA()
        stranger.cert_pem.write_to_path(str(tmp_path / "other-ca.pem"))
        other = {**ssl_config, "ssl.ca.location": str(tmp_path / "other-ca.pem"), "message.timeout.ms": 3_000}
        assert _deliver(other, b"unverified") is not None
        with pytest.raises(KafkaTimeoutError, match="bootstrap"):
            KafkaConsumer(bootstrap_servers=address, bootstrap_timeout_ms=3_000)
        assert _deliver(ssl_config, b"still served") is None
    assert [r.value for r in read_partition(db_url, TOPIC, 0)] == [b"over tls", b"still served"]


@pytest.mark.timeout(120)
def test_sasl_ssl_logs_clients_in_as_their_roles(db_url: str, engine: Any, topic: str, pems: Pems) -> None:
    principal = contextlib.contextmanager(client_principal)
    with (
        principal(engine, db_url) as alice,
        running_broker(db_url, principals=Principals(db_url), tls=server_tls_context(pems.cert, pems.key)) as address,
    ):
        config = {
            "bootstrap.servers": address,
            "security.protocol": "SASL_SSL",
            "ssl.ca.location": str(pems.ca),
            "sasl.mechanism": "PLAIN",
            "sasl.username": alice.name,
            "sasl.password": sa.make_url(alice.url).password or "",
        }
        assert _deliver(config, b"by alice, sealed") is None
        assert _deliver({**config, "sasl.password": "wrong", "message.timeout.ms": 3_000}, b"refused") is not None
        records = read_partition(db_url, TOPIC, 0)
        assert [r.value for r in records] == [b"by alice, sealed"]
        with engine.connect() as conn:
            owner = conn.exec_driver_sql(
                "SELECT owner::regrole::text FROM producers WHERE producer_id = %(p)s", {"p": records[0].producer_id}
            ).scalar_one()
        assert owner == alice.name


def test_bad_certificate_files_are_configuration_errors(pems: Pems, tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="no such file"):
        server_tls_context(tmp_path / "missing.pem")
    with pytest.raises(ConfigurationError, match="cannot load"):
        server_tls_context(pems.cert, pems.ca)  # a certificate where the key should be
    encrypted = _encrypted_key(pems, tmp_path, b"s3cret-phrase")
    with pytest.raises(ConfigurationError, match="encrypted"):
        server_tls_context(pems.cert, encrypted)  # no passphrase: never a prompt on the terminal
    with pytest.raises(ConfigurationError, match="cannot load"):
        server_tls_context(pems.cert, encrypted, key_password="wrong")
    assert server_tls_context(pems.cert, encrypted, key_password="s3cret-phrase") is not None


def _encrypted_key(pems: Pems, tmp_path: Path, passphrase: bytes) -> Path:
    key = serialization.load_pem_private_key(pems.key.read_bytes(), password=None)
    path = tmp_path / "encrypted.key"
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(passphrase),
        )
    )
    return path


@pytest.mark.timeout(120)
def test_the_command_takes_the_key_passphrase_from_its_environment_only(
    db_url: str, topic: str, pems: Pems, tmp_path: Path
) -> None:
    encrypted = str(_encrypted_key(pems, tmp_path, b"s3cret-phrase"))
    tls_args = ["--tls-cert", str(pems.cert), "--tls-key", encrypted]
    refused = subprocess.run(
        [sys.executable, "-m", "oncelog", "broker", "--listen", "127.0.0.1:0", *tls_args],
        env={**os.environ, "ONCELOG_DATABASE_URL": db_url},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert refused.returncode == 1
    assert "encrypted" in refused.stderr and "ONCELOG_BROKER_TLS_KEY_PASSWORD" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr  # one line, no traceback

    with broker_command(db_url, *tls_args, env={"ONCELOG_BROKER_TLS_KEY_PASSWORD": "s3cret-phrase"}) as (_, address):
        config = {"bootstrap.servers": address, "security.protocol": "SSL", "ssl.ca.location": str(pems.ca)}
        assert _deliver(config, b"through the command") is None
    assert [r.value for r in read_partition(db_url, TOPIC, 0)] == [b"through the command"]
