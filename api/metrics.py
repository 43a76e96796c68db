"""Client metrics: windowed rates, and export of any client's ``metrics()`` to Prometheus.

Producer and Consumer keep Kafka's client metrics as plain numbers (``metrics()`` returns a dict).
Rates are windowed as in Kafka's clients (``metrics.sample.window.ms`` x ``metrics.num.samples``,
30 s x 2 by default): the events of the current and the previous sample, over the time they span.

Prometheus is optional (``pip install oncelog[metrics]``)::

    from prometheus_client import start_http_server
    from oncelog.metrics import register_prometheus

    register_prometheus(producer, client_id="billing")   # read at every scrape
    start_http_server(9100)

Every key of ``metrics()`` becomes one metric ``oncelog_<kind>_<key>`` (kind: producer or
consumer) labelled ``client_id``; ``*_total`` keys are counters, everything else is a gauge.
Per-partition values (a consumer's lag) come from ``partition_metrics()`` and carry ``topic`` and
``partition`` labels.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from oncelog.errors import ConfigurationError

if TYPE_CHECKING:
    from prometheus_client.registry import CollectorRegistry

__all__ = ["MetricsSource", "PrometheusCollector", "WindowedRate", "register_prometheus"]

#: Kafka's defaults: metrics.sample.window.ms=30000, metrics.num.samples=2.
SAMPLE_WINDOW_SECONDS = 30.0
NUM_SAMPLES = 2


class WindowedRate:
    """Events per second over the last ``samples`` windows of ``window`` seconds (thread-safe).

    Like Kafka's ``Rate``: the oldest sample is dropped when a new one starts, and the elapsed
    time is at least one full window, so a single burst does not read as a huge rate.
    """

    def __init__(
        self,
        window: float = SAMPLE_WINDOW_SECONDS,
        samples: int = NUM_SAMPLES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if window <= 0 or samples < 1:
            raise ConfigurationError("a rate needs a positive window and at least one sample")
        self._window = window
        self._samples = samples
        self._clock = clock
        self._lock = threading.Lock()
        # (start time, count) of each live sample, oldest first.
        self._buckets: list[list[float]] = []

    def record(self, count: float = 1.0) -> None:
        """Count ``count`` events now."""
        now = self._clock()
        with self._lock:
            self._expire(now)
            if not self._buckets or now - self._buckets[-1][0] >= self._window:
                self._buckets.append([now, 0.0])
                del self._buckets[: -self._samples]
            self._buckets[-1][1] += count

    def rate(self) -> float:
        """Events per second over the live samples (0 when nothing was recorded lately)."""
        now = self._clock()
        with self._lock:
            self._expire(now)
            if not self._buckets:
                return 0.0
            total = sum(count for _, count in self._buckets)
            elapsed = max(now - self._buckets[0][0], self._window)
            return total / elapsed

    def _expire(self, now: float) -> None:
        horizon = now - self._window * self._samples
        while self._buckets and self._buckets[0][0] < horizon:
            self._buckets.pop(0)


class MetricsSource(Protocol):
    """What can be exported: a Producer or a Consumer (anything with ``metrics()``)."""

    def metrics(self) -> dict[str, float]: ...


def _kind(source: object) -> str:
    name = type(source).__name__.lower()
    return name if name in ("producer", "consumer") else "client"


class PrometheusCollector:
    """A prometheus_client collector that reads a client's metrics at every scrape.

    Reading at scrape time (instead of updating Prometheus objects on every send) keeps the send
    path free of Prometheus, and a closed client simply stops being reported once unregistered.
    """

    def __init__(self, source: MetricsSource, *, client_id: str, namespace: str = "oncelog") -> None:
        self._source = source
        self._client_id = client_id
        self._prefix = f"{namespace}_{_kind(source)}"

    def describe(self) -> list[Any]:
        """No fixed description: the metric set is the client's (prometheus_client accepts [])."""
        return []

    def collect(self) -> Iterator[Any]:
        """One metric family per key of ``metrics()``, plus per-partition gauges if offered."""
        # Imported on use: prometheus-client is an optional extra.
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily  # noqa: PLC0415

        for key, value in sorted(self._source.metrics().items()):
            if key.endswith("_total"):
                counter = CounterMetricFamily(
                    f"{self._prefix}_{key[: -len('_total')]}", f"oncelog {key}", labels=["client_id"]
                )
                counter.add_metric([self._client_id], float(value))
                yield counter
            else:
                gauge = GaugeMetricFamily(f"{self._prefix}_{key}", f"oncelog {key}", labels=["client_id"])
                gauge.add_metric([self._client_id], float(value))
                yield gauge
        per_partition: Callable[[], Mapping[tuple[str, int], Mapping[str, float]]] | None = getattr(
            self._source, "partition_metrics", None
        )
        if per_partition is None:
            return
        families: dict[str, Any] = {}
        for (topic, partition), values in sorted(per_partition().items()):
            for key, value in values.items():
                family = families.get(key)
                if family is None:
                    family = families[key] = GaugeMetricFamily(
                        f"{self._prefix}_partition_{key}",
                        f"oncelog per-partition {key}",
                        labels=["client_id", "topic", "partition"],
                    )
                family.add_metric([self._client_id, topic, str(partition)], float(value))
        yield from families.values()


def register_prometheus(
    source: MetricsSource,
    *,
    client_id: str,
    registry: CollectorRegistry | None = None,
    namespace: str = "oncelog",
) -> PrometheusCollector:
    """Export ``source``'s metrics to Prometheus (the default registry unless one is given).

    Returns the collector; ``registry.unregister(collector)`` stops the export (do it when the
    client closes). Needs the ``metrics`` extra (prometheus-client).
    """
    try:
        from prometheus_client import REGISTRY  # noqa: PLC0415 (an optional extra)
    except ImportError as exc:  # the optional extra is not installed
        raise ConfigurationError("Prometheus export needs prometheus-client: pip install 'oncelog[metrics]'") from exc
    collector = PrometheusCollector(source, client_id=client_id, namespace=namespace)
    (registry if registry is not None else REGISTRY).register(collector)
    return collector
