"""Kafka's configuration names onto the clients' keywords (oncelog.kafka_config), without a database."""

from __future__ import annotations

from typing import Any

import pytest

from oncelog import Admin, Consumer, Producer, errors
from oncelog.kafka_config import keyword_arguments, keywords


def _producer(config: dict[str, Any]) -> dict[str, Any]:
    return keyword_arguments(config, keywords(Producer), "Producer")


def _consumer(config: dict[str, Any]) -> dict[str, Any]:
    return keyword_arguments(config, keywords(Consumer), "Consumer")


def test_dotted_names_become_keywords() -> None:
    assert _producer(
        {
            "linger.ms": 5,
            "transactional.id": "billing-1",
            "enable.idempotence": True,
            "client.id": "svc",
            "max.in.flight.requests.per.connection": 1,
            "delivery.timeout.ms": 30_000,
            "batch_size": 4096,  # a keyword itself is taken as it is
        }
    ) == {
        "linger_ms": 5,
        "transactional_id": "billing-1",
        "enable_idempotence": True,
        "client_id": "svc",
        "max_in_flight": 1,
        "delivery_timeout_ms": 30_000,
        "batch_size": 4096,
    }
    assert _consumer(
        {
            "group.id": "g",
            "isolation.level": "read_committed",
            "auto.offset.reset": "smallest",
            "enable.auto.commit": False,
            "partition.assignment.strategy": "cooperative-sticky",
            "default.api.timeout.ms": 1000,
        }
    ) == {
        "group_id": "g",
        "isolation_level": "read_committed",
        "auto_offset_reset": "earliest",
        "enable_auto_commit": False,
        "partition_assignment_strategy": "sticky",
        "default_api_timeout_ms": 1000,
    }


def test_settings_that_change_nothing_are_taken_only_with_their_value() -> None:
    assert _producer({"acks": "all", "retries": 2147483647}) == {}
    assert _producer({"acks": -1}) == {}
    with pytest.raises(errors.ConfigurationError, match=r"acks=1 cannot be honoured: .*acks=all"):
        _producer({"acks": 1})
    with pytest.raises(errors.ConfigurationError, match="retries=0 cannot be honoured"):
        _producer({"retries": 0})


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"bootstrap.servers": "localhost:9092"}, "bootstrap.servers has no meaning in oncelog: .*database URL"),
        ({"compression.type": "lz4"}, "compression.type has no meaning"),
        ({"linger.msec": 5}, r"Producer has no setting 'linger.msec' \(its settings: .*linger_ms"),
        ({"group.id": "g"}, "Producer has no setting 'group.id'"),
        ({"linger.ms": 5, "linger_ms": 6}, "'linger_ms' sets linger_ms a second time"),
        ({1: 5}, "configuration names are strings"),
    ],
)
def test_what_cannot_be_taken_is_refused_by_name(config: dict[Any, Any], message: str) -> None:
    with pytest.raises(errors.ConfigurationError, match=message):
        _producer(config)


def test_a_configuration_is_a_mapping() -> None:
    with pytest.raises(errors.ConfigurationError, match="a mapping"):
        keyword_arguments([("linger.ms", 5)], keywords(Producer), "Producer")  # type: ignore[arg-type]


def test_from_config_refuses_a_setting_given_twice() -> None:
    with pytest.raises(errors.ConfigurationError, match="set in the configuration and as keywords: linger_ms"):
        Producer.from_config("postgresql://u@127.0.0.1:1/x", {"linger.ms": 5}, linger_ms=6)


def test_from_config_builds_the_client_with_the_settings() -> None:
    with Admin.from_config("postgresql://u@127.0.0.1:1/x", {"client.id": "ops", "request.timeout.ms": 2000}) as admin:
        assert admin.client_id == "ops"
    with pytest.raises(errors.ConfigurationError, match=r"Admin has no setting 'linger\.ms'"):
        Admin.from_config("postgresql://u@127.0.0.1:1/x", {"linger.ms": 5})
