"""Client metrics as Kafka's clients keep them, and their export to Prometheus.

The rates are checked with an injected clock (no sleeping, no timing assertions); the Prometheus
export is scraped for real over HTTP from prometheus_client's own server.
"""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.parser import text_string_to_metric_families

from oncelog import Admin, Consumer, Producer, TopicPartition, errors
from oncelog.metrics import WindowedRate, register_prometheus


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_windowed_rate_counts_the_live_samples_over_at_least_one_window() -> None:
    clock = FakeClock()
    rate = WindowedRate(window=10, samples=2, clock=clock)
    assert rate.rate() == 0.0
    rate.record(50)
    # A burst reads over a whole window, not over the zero seconds it took.
    assert rate.rate() == pytest.approx(5.0)
    clock.now += 10
    rate.record(100)  # a second sample starts
    assert rate.rate() == pytest.approx(150 / 10)
    clock.now += 5
    assert rate.rate() == pytest.approx(150 / 15)
    clock.now += 6  # the first sample is older than two windows now: dropped
    assert rate.rate() == pytest.approx(100 / 11)
    clock.now += 100
    assert rate.rate() == 0.0


def test_windowed_rate_keeps_only_its_samples() -> None:
    clock = FakeClock()
    rate = WindowedRate(window=1, samples=3, clock=clock)
    for _ in range(10):
        rate.record(1)
        clock.now += 1
    # Only the last three windows (three events) are live, over three seconds.
    assert rate.rate() == pytest.approx(3 / 3)
    with pytest.raises(errors.ConfigurationError):
        WindowedRate(window=0)
    with pytest.raises(errors.ConfigurationError):
        WindowedRate(samples=0)


@pytest.fixture
def topic(db_url: str) -> Iterator[str]:
    with Admin(db_url) as admin:
        admin.create_topic("m", partitions=2)
    yield "m"


def test_producer_metrics_cover_kafkas_set(db_url: str, topic: str) -> None:
    with Producer(db_url, transactional_id="metrics", linger_ms=0) as p:
        p.init_transactions()
        with p.transaction():
            for i in range(20):
                p.send(topic, f"v{i}".encode(), partition=i % 2)
        m = p.metrics()
    assert m["record_send_total"] == 20
    assert m["record_send_rate"] > 0 and m["request_rate"] > 0
    assert m["batch_send_total"] >= 2 and m["records_per_request_avg"] == 20 / m["batch_send_total"]
    assert 0 < m["batch_size_avg"] <= m["batch_size_max"]
    assert 0 < m["request_latency_avg_ms"] <= m["request_latency_max_ms"]
    assert m["record_retry_total"] == 0 and m["record_error_total"] == 0
    assert m["txn_commit_total"] == 1 and m["txn_commit_time_ms_total"] > 0 and m["txn_init_time_ms_total"] > 0
    for key in ("txn_begin_time_ms_total", "txn_abort_time_ms_total", "txn_send_offsets_time_ms_total"):
        assert key in m


def test_consumer_metrics_and_lag(db_url: str, topic: str) -> None:
    with Producer(db_url) as p:
        for i in range(30):
            p.send(topic, b"x" * 10, partition=i % 2)
    tps = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
    with Consumer(db_url, max_poll_records=10) as c:
        c.assign(tps)
        got = c.poll(5.0)
        m = c.metrics()
        assert m["records_consumed_total"] == len(got) == 10
        assert m["bytes_consumed_total"] == 100
        assert m["fetch_total"] == 1 and m["records_per_request_avg"] == 10
        assert m["fetch_rate"] > 0 and m["records_consumed_rate"] > 0
        assert 0 < m["fetch_latency_avg_ms"] <= m["fetch_latency_max_ms"]
        assert m["records_lag_max"] == 10  # 15 per partition, 5 read from each
        assert c.partition_metrics() == {
            (topic, 0): {"records_lag": 10.0, "position": 5.0},
            (topic, 1): {"records_lag": 10.0, "position": 5.0},
        }
        while c.poll(0.2):
            pass
        c.poll(0)  # one more fetch sees the end
        assert c.metrics()["records_lag_max"] == 0
        assert c.metrics()["records_consumed_total"] == 30


def test_read_committed_lag_stops_at_the_last_stable_offset(db_url: str, topic: str) -> None:
    tp = TopicPartition(topic, 0)
    with Producer(db_url, transactional_id="open", linger_ms=0) as p:
        p.init_transactions()
        p.begin_transaction()
        p.send(topic, b"pending", partition=0)  # offset 0, undecided: the last stable offset is 0
        p.flush()
        with Producer(db_url) as plain:
            plain.send(topic, b"after", partition=0)  # offset 1: the high watermark is 2
        with (
            Consumer(db_url, isolation_level="read_committed") as rc,
            Consumer(db_url, isolation_level="read_uncommitted", max_poll_records=1) as ru,
        ):
            rc.assign([tp])
            ru.assign([tp])
            rc.seek(tp, 0)
            ru.seek(tp, 0)
            assert rc.poll(0) == []
            assert [r.value for r in ru.poll(0)] == [b"pending"]
            # read_committed has nothing to read until the transaction ends; read_uncommitted
            # has one more record before the high watermark.
            assert rc.partition_metrics() == {(topic, 0): {"records_lag": 0.0, "position": 0.0}}
            assert ru.partition_metrics() == {(topic, 0): {"records_lag": 1.0, "position": 1.0}}
        p.abort_transaction()


def test_prometheus_scrape_over_http(db_url: str, topic: str) -> None:
    registry = CollectorRegistry()
    with Producer(db_url, linger_ms=0) as p, Consumer(db_url) as c:
        for i in range(6):
            p.send(topic, b"v", partition=i % 2).result(10)
        c.assign([TopicPartition(topic, 0), TopicPartition(topic, 1)])
        c.seek_to_beginning()
        c.poll(1.0)
        producer_collector = register_prometheus(p, client_id="app-p", registry=registry)
        register_prometheus(c, client_id="app-c", registry=registry)
        server, thread = start_http_server(0, addr="127.0.0.1", registry=registry)
        try:
            port = server.server_address[1]
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
                body = response.read().decode()
        finally:
            server.shutdown()
            server.server_close()
            thread.join(5)
        samples = {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(body)
            for s in family.samples
        }
        assert samples[("oncelog_producer_record_send_total", (("client_id", "app-p"),))] == 6
        assert samples[("oncelog_consumer_records_consumed_total", (("client_id", "app-c"),))] == 6
        assert ("oncelog_producer_record_send_rate", (("client_id", "app-p"),)) in samples
        lag_key = (
            "oncelog_consumer_partition_records_lag",
            (("client_id", "app-c"), ("partition", "0"), ("topic", topic)),
        )
        assert samples[lag_key] == 0
        registry.unregister(producer_collector)
        names = {f.name for f in registry.collect()}
        assert not any(n.startswith("oncelog_producer") for n in names)
        assert "oncelog_consumer_fetch" in names
