"""Kafka's own client through ``oncelog broker``, against the store call and oncelog's own clients.

    .venv/bin/python -m bench.broker [--quick] [--json PATH] [--repeat N]

The server is ``ONCELOG_DATABASE_URL`` when set (it needs CREATEDB), else the embedded default
cluster (see ``bench/produce.py``, whose setup this reuses), in a database of its own. The broker
is ``oncelog broker`` in a process of its own, on loopback, as it is deployed (in this process
it would share the interpreter with the benchmark's own Python loop feeding librdkafka).

For 100 B and 1 KiB values, the same records (keys and values) to a fresh 4-partition topic each
time:

* **store call** (baseline): ``store.log.produce_batches`` on one connection, one batch of 1000
  records per partition per call, idempotent (a producer id, sequences);
* **broker, idempotent**: confluent-kafka's Producer (librdkafka) with ``enable.idempotence``,
  ``linger.ms=5``, through the broker;
* **broker, transactional**: the same with a ``transactional.id``, 1000-record transactions;
* **oncelog Producer**: oncelog's own Producer (defaults), for comparison;
* **oncelog Producer, transactional**: the same in 1000-record transactions, the baseline of the
  broker's transactional run on the same transactions (the store call above is idempotent, not
  transactional, so against it that run also pays what a transaction costs the store).

Then reads of the idempotent run's records, read_committed, from the start to the end:
confluent-kafka's Consumer through the broker against oncelog's ``Consumer.poll`` (baseline).

Records/s per case; every kind measured back to back in each run, runs repeated ``--repeat``
times (default 3; 1 with --quick); the ratios are the medians of the per-run ratios.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import confluent_kafka as ck

import oncelog
from bench.produce import (
    Bench,
    Data,
    log,
    machine_info,
    result_fields,
    run_main,
    scratch_database,
    titled,
)
from bench.report import broker_section
from oncelog.store import log as store_log
from oncelog.store.engine import DEFAULT_SCHEMA
from oncelog.store.records import ProduceBatch
from oncelog.verify.broker import running_broker

PARTITIONS = 4
BATCH = 1000
SIZES = (100, 1024)
FULL_RECORDS = {100: 100_000, 1024: 40_000}
QUICK_RECORDS = 2_000
KINDS = (
    "store",
    "broker_idempotent",
    "broker_transactional",
    "producer",
    "producer_transactional",
    "consume_broker",
    "consume_poll",
)


def _store_call(bench: Bench, topic: str, payload: Data, records: int) -> float:
    """Records/s of store.log.produce_batches, 1000-record batches, every partition in each call."""
    per_call = BATCH * PARTITIONS
    with bench.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        ident = store_log.init_producer_id(conn)
        sequences = [0] * PARTITIONS
        started = time.perf_counter()
        for first in range(0, records, per_call):
            batches = []
            for p in range(PARTITIONS):
                count = min(BATCH, max(0, records - first - p * BATCH))
                if count:
                    rows = payload.batches(first + p * BATCH, count, count)[0]
                    batches.append(ProduceBatch(topic, p, sequences[p], rows))
                    sequences[p] += count
            store_log.produce_batches(conn, batches=batches, producer_id=ident.producer_id, producer_epoch=ident.epoch)
        return records / (time.perf_counter() - started)


def _librdkafka(address: str, topic: str, payload: Data, records: int, *, transactional: bool, warm_up: str) -> float:
    """Records/s of confluent-kafka's Producer through the broker, until every record is
    acknowledged, from a producer that has its producer id (``warm_up``: a topic for the record
    that waits for it)."""
    config: dict[str, Any] = {"bootstrap.servers": address, "enable.idempotence": True, "linger.ms": 5}
    if transactional:
        config["transactional.id"] = f"bench-{uuid.uuid4().hex[:8]}"
    producer = ck.Producer(config)
    if transactional:
        producer.init_transactions(60)
    else:
        # An idempotent producer asks for its producer id on a timer (librdkafka waits about
        # 0.5 s after the first metadata), which a long-lived producer pays once: one record to a
        # topic of its own, acknowledged, before the clock starts.
        producer.produce(warm_up, b"warm-up", partition=0)
        if producer.flush(60) != 0:
            raise RuntimeError("librdkafka's warm-up record was not acknowledged")
    started = time.perf_counter()
    for first in range(0, records, BATCH):
        if transactional:
            producer.begin_transaction()
        for i in range(first, min(first + BATCH, records)):
            rows = payload.records[i % len(payload.records)]
            while True:
                try:
                    producer.produce(topic, rows.value, key=rows.key, partition=i % PARTITIONS)
                    break
                except BufferError:  # librdkafka's queue is full: let it drain
                    producer.poll(0.01)
        if transactional:
            producer.commit_transaction(60)
    if producer.flush(120) != 0:
        raise RuntimeError("librdkafka left records unacknowledged")
    return records / (time.perf_counter() - started)


def _producer(bench: Bench, topic: str, payload: Data, records: int, *, transactional: bool = False) -> float:
    """Records/s of oncelog's Producer (defaults); ``transactional``: in 1000-record transactions,
    as the broker's transactional run writes them, timed after init_transactions."""
    transactional_id = f"bench-{uuid.uuid4().hex[:8]}" if transactional else None
    with oncelog.Producer(bench.sa_url, transactional_id=transactional_id) as producer:
        if transactional:
            producer.init_transactions()
        started = time.perf_counter()
        for first in range(0, records, BATCH):
            if transactional:
                producer.begin_transaction()
            for i in range(first, min(first + BATCH, records)):
                row = payload.records[i % len(payload.records)]
                producer.send(topic, row.value, key=row.key, partition=i % PARTITIONS)
            if transactional:
                producer.commit_transaction()
        producer.flush()
        return records / (time.perf_counter() - started)


def _consume_broker(address: str, topic: str, records: int) -> float:
    consumer = ck.Consumer(
        {
            "bootstrap.servers": address,
            "group.id": f"bench-{uuid.uuid4().hex[:8]}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.assign([ck.TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        # Timed from the first records delivered, after the client's start-up (connections,
        # metadata, offsets), as for Consumer.poll below; the first delivery's records not counted.
        got = 0
        while not got:
            got = sum(1 for m in consumer.consume(1000, timeout=1.0) if m.error() is None)
        first, started = got, time.perf_counter()
        while got < records:
            got += sum(1 for m in consumer.consume(1000, timeout=1.0) if m.error() is None)
        return (got - first) / (time.perf_counter() - started)
    finally:
        consumer.close()


def _consume_poll(bench: Bench, topic: str, records: int) -> float:
    with oncelog.Consumer(bench.sa_url, isolation_level="read_committed", max_poll_records=1000) as consumer:
        tps = [oncelog.TopicPartition(topic, p) for p in range(PARTITIONS)]
        consumer.assign(tps)
        for tp in tps:
            consumer.seek(tp, 0)
        got = 0
        while not got:
            got = len(consumer.poll(1.0))
        first, started = got, time.perf_counter()
        while got < records:
            got += len(consumer.poll(1.0))
        return (got - first) / (time.perf_counter() - started)


def measure(bench: Bench, address: str, size: int, records: int, repeat: int) -> dict[str, Any]:
    payload = Data(size)
    runs: list[dict[str, float]] = []
    for n in range(repeat):
        run: dict[str, float] = {}
        run["store"] = _store_call(bench, bench.new_topic(PARTITIONS)[0], payload, records)
        read_topic = bench.new_topic(PARTITIONS)[0]
        warm_up = bench.new_topic(1)[0]
        run["broker_idempotent"] = _librdkafka(
            address, read_topic, payload, records, transactional=False, warm_up=warm_up
        )
        run["broker_transactional"] = _librdkafka(
            address, bench.new_topic(PARTITIONS)[0], payload, records, transactional=True, warm_up=warm_up
        )
        run["producer"] = _producer(bench, bench.new_topic(PARTITIONS)[0], payload, records)
        run["producer_transactional"] = _producer(
            bench, bench.new_topic(PARTITIONS)[0], payload, records, transactional=True
        )
        # Reads alternate which goes first: the second finds the pages cached as much as the first did.
        if n % 2:
            run["consume_poll"] = _consume_poll(bench, read_topic, records)
            run["consume_broker"] = _consume_broker(address, read_topic, records)
        else:
            run["consume_broker"] = _consume_broker(address, read_topic, records)
            run["consume_poll"] = _consume_poll(bench, read_topic, records)
        log(f"broker: {size} B, run {n + 1}: " + ", ".join(f"{k} {v:,.0f}/s" for k, v in run.items()))
        runs.append(run)

    def ratio(kind: str, baseline: str) -> float:
        return round(statistics.median(r[kind] / r[baseline] for r in runs), 3)

    return {
        "value_bytes": size,
        "records": records,
        "runs": runs,
        **{f"{kind}_per_s": round(statistics.median(r[kind] for r in runs), 1) for kind in KINDS},
        "ratio_idempotent_to_store": ratio("broker_idempotent", "store"),
        "ratio_transactional_to_store": ratio("broker_transactional", "store"),
        "ratio_producer_to_store": ratio("producer", "store"),
        "ratio_transactional_to_producer_transactional": ratio("broker_transactional", "producer_transactional"),
        "ratio_consume_to_poll": ratio("consume_broker", "consume_poll"),
    }


def run(quick: bool, repeat: int) -> dict[str, Any]:
    started = time.perf_counter()
    machine = machine_info()
    with (
        scratch_database() as (bench, server),
        tempfile.TemporaryDirectory(prefix="oncelog-bench-broker-") as folder,
        running_broker(bench.sa_url, schema=DEFAULT_SCHEMA, log=Path(folder) / "broker.log") as broker,
    ):
        cases = [
            measure(bench, broker.bootstrap, size, QUICK_RECORDS if quick else FULL_RECORDS[size], repeat)
            for size in SIZES
        ]
    return {
        **result_fields("broker", quick, repeat, machine, server),
        "settings": {
            "partitions": PARTITIONS,
            "batch": BATCH,
            "repeat": repeat,
            "librdkafka": ck.libversion()[0],
            "broker": "process",
        },
        "cases": cases,
        "seconds": round(time.perf_counter() - started, 1),
    }


def render(result: dict[str, Any]) -> str:
    return titled("# oncelog broker benchmark", result["quick"], broker_section(result))


def main(argv: Sequence[str] | None = None) -> int:
    return run_main(
        argv,
        prog="bench.broker",
        doc=__doc__,
        repeat_help="runs per case (default 3; 1 with --quick)",
        default_repeat=3,
        run=run,
        render=render,
    )


if __name__ == "__main__":
    sys.exit(main())
