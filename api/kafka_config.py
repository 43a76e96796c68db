"""Kafka's configuration names for the clients' keyword arguments.

A configuration written for Kafka's clients (``{"linger.ms": 5, "transactional.id": "billing"}``)
becomes the keyword arguments of :class:`oncelog.Producer`, :class:`oncelog.Consumer` or
:class:`oncelog.Admin`: a dotted name is the keyword with ``_`` for ``.``, a few are renamed, and
the settings that only concern brokers and networks are refused with the reason, as is every key
the client does not know. Values are Python values (``5``, ``True``), checked as the keywords' are.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Collection, Mapping
from typing import Any

from oncelog.errors import ConfigurationError

#: Kafka names whose keyword here is not the name with underscores for dots.
RENAMED = {
    "max.in.flight.requests.per.connection": "max_in_flight",
    "default.api.timeout.ms": "default_api_timeout_ms",
}

#: Kafka settings without a counterpart here, and why: a configuration that sets one is refused, so
#: that nobody believes it took effect.
NO_MEANING = {
    "bootstrap.servers": "oncelog has no brokers: the database URL (the first argument) says where to connect",
    "security.protocol": "the database URL sets the connection's security (sslmode and friends)",
    "sasl.mechanism": "the database URL and PostgreSQL's authentication identify the client",
    "sasl.mechanisms": "the database URL and PostgreSQL's authentication identify the client",
    "sasl.username": "the database URL and PostgreSQL's authentication identify the client",
    "sasl.password": "the database URL and PostgreSQL's authentication identify the client",
    "compression.type": "records are stored as given; PostgreSQL compresses large values itself (TOAST)",
}


#: Kafka's values that read differently here, per setting (Java's assignor classes, librdkafka's names).
VALUES: dict[str, dict[Any, Any]] = {
    "partition.assignment.strategy": {
        "org.apache.kafka.clients.consumer.RangeAssignor": "range",
        "org.apache.kafka.clients.consumer.RoundRobinAssignor": "roundrobin",
        "org.apache.kafka.clients.consumer.StickyAssignor": "sticky",
        "org.apache.kafka.clients.consumer.CooperativeStickyAssignor": "sticky",
        "cooperative-sticky": "sticky",
    },
    "auto.offset.reset": {"smallest": "earliest", "beginning": "earliest", "largest": "latest", "end": "latest"},
}


def _acks(value: Any) -> bool:
    return value in ("all", -1, "-1")


def _retries(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


#: Kafka settings accepted only with the value by which oncelog always behaves (they change nothing).
ALWAYS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "acks": (_acks, "a record is acknowledged once its database transaction commits, which is acks=all"),
    "retries": (
        _retries,
        "a failed request is retried until delivery_timeout_ms (delivery.timeout.ms), as Kafka's idempotent "
        "producer does: retries must be a positive integer",
    ),
}


def keywords(cls: type) -> frozenset[str]:
    """The keyword arguments ``cls(database_url, ...)`` takes."""
    params = inspect.signature(cls).parameters.values()
    kinds = (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return frozenset(p.name for p in params if p.kind in kinds and p.name not in ("self", "database_url"))


def with_overrides(config: Mapping[str, Any], overrides: Mapping[str, Any], cls: type, client: str) -> dict[str, Any]:
    """The keyword arguments of ``cls`` (the client named ``client``) from ``config`` and the
    ``overrides`` given beside it; a key set in both is a ConfigurationError."""
    kwargs = keyword_arguments(config, keywords(cls), client)
    twice = sorted(kwargs.keys() & overrides.keys())
    if twice:
        raise ConfigurationError(f"set in the configuration and as keywords: {', '.join(twice)}")
    return {**kwargs, **overrides}


def keyword_arguments(config: Mapping[str, Any], accepted: Collection[str], client: str) -> dict[str, Any]:
    """``config`` (Kafka's dotted names, or the keywords themselves) as keyword arguments of
    ``client``, which takes ``accepted``. ConfigurationError names the first key it cannot take."""
    if not isinstance(config, Mapping):
        raise ConfigurationError(f"a configuration is a mapping of names to values, not {type(config).__name__}")
    out: dict[str, Any] = {}
    for key, value in config.items():
        if not isinstance(key, str):
            raise ConfigurationError(f"configuration names are strings, not {key!r}")
        if key in NO_MEANING:
            raise ConfigurationError(f"{key} has no meaning in oncelog: {NO_MEANING[key]}")
        if key in ALWAYS:
            check, why = ALWAYS[key]
            if not check(value):
                raise ConfigurationError(f"{key}={value!r} cannot be honoured: {why}")
            continue
        name = RENAMED.get(key, key.replace(".", "_"))
        if name not in accepted:
            raise ConfigurationError(f"{client} has no setting {key!r} (its settings: {', '.join(sorted(accepted))})")
        if name in out:
            raise ConfigurationError(f"{key!r} sets {name} a second time")
        translate = VALUES.get(key, {})
        out[name] = translate.get(value, value) if isinstance(value, str) else value
    return out
