"""``test/service.py`` for kafka-python's integration tests, which their sdist leaves out.

The tests' fixtures import two classes from it: ``ExternalService``, a broker that runs already
(``KAFKA_URI``: here, ``oncelog broker``), and ``SpawnedService``, a Kafka or ZooKeeper process
they would start themselves. The conformance run (tests/acceptance/test_kafka_python_conformance.py)
copies this file into its copy of the tests. Only an external broker is served: a fixture that
tries to spawn Kafka fails at once with the reason.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ExternalService", "SpawnedService"]


class ExternalService:
    """A service that runs already, at ``host:port``: nothing to start, stop or read."""

    def __init__(self, host: str, port: int) -> None:
        self.host = host
        self.port = port

    def start(self) -> None:
        """Nothing to start."""

    def stop(self) -> None:
        """Nothing to stop: the broker belongs to whoever started it."""

    def dump_logs(self) -> None:
        """No logs of its own here."""

    def wait_for(self, pattern: str, timeout: float = 30) -> bool:
        """It is up already."""
        return True


class SpawnedService:
    """A Kafka or ZooKeeper process the tests would start: not available against oncelog."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise RuntimeError("this run serves an external broker only (KAFKA_URI): no Kafka process is spawned")
