"""Commit order equals offset order: a reader tailing a partition never sees offset N+1 while N
is missing, however many writers append to that partition at once.

produce_v2 takes the partition row lock, assigns offsets under it and holds it to commit. If it
did not (offsets from a sequence, say), a writer that took N could commit after one that took N+1,
and a reader would skip N for ever. Here several writers (threads, then separate processes, then
Producers) append many small batches concurrently to the same partitions, while tailing readers
re-read each partition from their position in a tight loop, every read a fresh snapshot:

* through ``oncelog.store.log.fetch`` (what consumers use): offsets contiguous from the position,
  and nothing below the reported high watermark missing;
* straight from the ``records`` table, with no high-watermark bound at all: the committed rows
  themselves must be contiguous from the position, which is the commit-order property itself.

At the end the log must be dense 0..n-1 with every written record exactly once, each writer's
records in its own order.
"""

from __future__ import annotations

import random
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from concurrent.futures import Future
from typing import Any, Self

import psycopg
import pytest
import sqlalchemy as sa

import oncelog
from oncelog.store import create_engine, log
from oncelog.store.records import RecordIn
from oncelog.types import RecordMetadata
from tests.support import REPO, child_env
from tests.support.append_child import Plan, plan, write_plan
from tests.support.logcheck import read_partition, sslmode_disable

#: Bound on how long the readers may take to catch up once the writers are done.
CATCH_UP_SECONDS = 60.0


def _libpq_url(url: str) -> str:
    return sslmode_disable(url).replace("postgresql+psycopg://", "postgresql://", 1)


class Tailer(threading.Thread):
    """Tails one partition from offset 0 until it has read ``target`` records (once told the target)."""

    def __init__(self, url: str, topic: str, partition: int, raw: bool, seed: int) -> None:
        super().__init__(name=f"tailer-{topic}-{partition}-{'raw' if raw else 'fetch'}", daemon=True)
        self.url, self.topic, self.partition, self.raw = url, topic, partition, raw
        self.rng = random.Random(seed)
        self.writing = threading.Event()
        self.writing.set()  # cleared by the test when every writer has finished
        self.target: int | None = None
        self.seen: list[bytes] = []
        self.failures: list[str] = []
        self.reads = 0
        self.reads_with_records_while_writing = 0
        self.empty_reads_below_hw = 0

    def run(self) -> None:
        try:
            if self.raw:
                self._tail_raw()
            else:
                self._tail_fetch()
        except Exception as exc:  # reported by the test, never lost in the thread
            self.failures.append(f"{self.name}: {exc!r}")

    def _done(self) -> bool:
        if self.writing.is_set() or self.target is None:
            return False
        if len(self.seen) > self.target:
            self.failures.append(f"{self.name}: read {len(self.seen)} records, only {self.target} written")
            return True
        return len(self.seen) == self.target

    def _check(self, offsets: list[int], vals: list[bytes], writing: bool) -> bool:
        pos = len(self.seen)
        self.reads += 1
        if offsets != list(range(pos, pos + len(offsets))):
            self.failures.append(f"{self.name}: read from {pos} returned offsets {offsets[:10]}... (a gap)")
            return False
        if offsets and writing:
            self.reads_with_records_while_writing += 1
        self.seen += vals
        return True

    def _tail_fetch(self) -> None:
        engine = create_engine(self.url, poolclass=sa.NullPool)
        deadline = None
        try:
            with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
                while not self._done():
                    if not self.writing.is_set():
                        deadline = deadline or time.monotonic() + CATCH_UP_SECONDS
                        if time.monotonic() > deadline:
                            self.failures.append(f"{self.name}: stuck at {len(self.seen)} of {self.target}")
                            return
                    writing = self.writing.is_set()
                    pos = len(self.seen)
                    max_records = self.rng.choice((1, 2, 7, 50, 500))
                    result = log.fetch(
                        conn, topic=self.topic, partition=self.partition, offset=pos, max_records=max_records
                    )
                    got = [r.offset for r in result.records]
                    if not self._check(got, [bytes(r.value or b"") for r in result.records], writing):
                        return
                    end = pos + len(got)
                    if end > result.high_watermark:
                        self.failures.append(
                            f"{self.name}: offset {end - 1} at or above the high watermark {result.high_watermark}"
                        )
                        return
                    if not got and result.high_watermark > pos:
                        # The same read says records exist at and after pos, yet returned none.
                        self.empty_reads_below_hw += 1
                        self.failures.append(
                            f"{self.name}: empty read at {pos} below the high watermark {result.high_watermark}"
                        )
                        return
                    if got and len(got) < max_records and end != result.high_watermark:
                        # Fewer records than asked for, yet the high watermark of the same read
                        # says more exist: an offset below it is not visible.
                        self.failures.append(
                            f"{self.name}: read from {pos} stopped at {end} "
                            f"below the high watermark {result.high_watermark}"
                        )
                        return
        finally:
            engine.dispose()

    def _tail_raw(self) -> None:
        deadline = None
        with psycopg.connect(_libpq_url(self.url), autocommit=True) as conn:
            row = conn.execute("SELECT topic_id FROM oncelog.topics WHERE name = %s", (self.topic,)).fetchone()
            assert row is not None
            topic_id = row[0]
            while not self._done():
                if not self.writing.is_set():
                    deadline = deadline or time.monotonic() + CATCH_UP_SECONDS
                    if time.monotonic() > deadline:
                        self.failures.append(f"{self.name}: stuck at {len(self.seen)} of {self.target}")
                        return
                writing = self.writing.is_set()
                # Every committed row from the position on, with no high-watermark bound: if a
                # later offset could commit before an earlier one, this would see the hole.
                rows = conn.execute(
                    'SELECT "offset", value FROM oncelog.records WHERE topic_id = %s AND partition = %s '
                    'AND "offset" >= %s ORDER BY "offset" LIMIT %s',
                    (topic_id, self.partition, len(self.seen), self.rng.choice((1, 3, 20, 1000))),
                ).fetchall()
                if not self._check([int(r[0]) for r in rows], [bytes(r[1]) for r in rows], writing):
                    return


def start_tailers(url: str, topic: str, partitions: int) -> list[Tailer]:
    tailers = [Tailer(url, topic, p, raw, seed=p * 2 + raw) for p in range(partitions) for raw in (False, True)]
    for t in tailers:
        t.start()
    return tailers


def finish_tailers(tailers: list[Tailer], expected: dict[int, list[bytes]]) -> None:
    for t in tailers:
        t.target = len(expected[t.partition])
        t.writing.clear()
    for t in tailers:
        t.join(CATCH_UP_SECONDS + 30)
        assert not t.is_alive(), f"{t.name} did not finish"
    failures = [f for t in tailers for f in t.failures]
    assert not failures, "\n".join(failures)
    # The race was real: every reader saw records arrive while the writers were still writing.
    for t in tailers:
        print(
            f"{t.name}: {t.reads} reads, {t.reads_with_records_while_writing} with records during writes, "
            f"{t.empty_reads_below_hw} empty reads reporting a higher high watermark"
        )
        assert t.reads_with_records_while_writing >= 5, (t.name, t.reads, t.reads_with_records_while_writing)


def expected_per_partition(plans: dict[str, Plan]) -> dict[int, list[bytes]]:
    out: dict[int, list[bytes]] = defaultdict(list)
    for batches in plans.values():
        for part, vals in batches:
            out[part] += vals
    return out


def verify_final_log(
    db_url: str, topic: str, partitions: int, plans: dict[str, Plan], tailers: list[Tailer]
) -> dict[int, list[bytes]]:
    """Dense logs holding every written record exactly once, each writer's in its own order."""
    expected = expected_per_partition(plans)
    logs: dict[int, list[bytes]] = {}
    for part in range(partitions):
        records = read_partition(db_url, topic, part)  # asserts offsets dense from 0
        vals = [bytes(r.value or b"") for r in records]
        logs[part] = vals
        assert Counter(vals) == Counter(expected[part]), f"partition {part}: records lost or duplicated"
        assert len(set(vals)) == len(vals)
        for writer, batches in plans.items():
            mine = [v for v in vals if v.startswith(f"{writer}-".encode())]
            assert mine == [v for p, b in batches if p == part for v in b], f"{writer} out of order in {part}"
    for t in tailers:
        assert t.seen == logs[t.partition], f"{t.name} saw a different log than the final one"
    return logs


def create_topic(db_url: str, name: str, partitions: int) -> None:
    with oncelog.Admin(db_url) as admin:
        admin.create_topic(name, partitions=partitions)


@pytest.mark.timeout(300)
def test_writer_threads_commit_in_offset_order(db_url: str) -> None:
    partitions, writers, batches = 2, 6, 250
    create_topic(db_url, "t", partitions)
    plans = {f"w{i}": plan(f"w{i}", batches, partitions, seed=1) for i in range(writers)}
    tailers = start_tailers(db_url, "t", partitions)
    start = threading.Event()
    errors: list[BaseException] = []

    def run(name: str, idempotent: bool) -> None:
        try:
            write_plan(db_url, "t", plans[name], idempotent=idempotent, start=start)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(name, i % 2 == 1), daemon=True) for i, name in enumerate(plans)]
    for t in threads:
        t.start()
    time.sleep(0.2)  # let every writer connect; the go is an event, not a timing assumption
    start.set()
    for t in threads:
        t.join(180)
        assert not t.is_alive(), "a writer thread hung"
    assert not errors, errors
    finish_tailers(tailers, expected_per_partition(plans))
    verify_final_log(db_url, "t", partitions, plans, tailers)


@pytest.mark.timeout(300)
def test_writer_processes_commit_in_offset_order(db_url: str) -> None:
    partitions, writers, batches, seed = 2, 4, 300, 7
    create_topic(db_url, "t", partitions)
    names = [f"p{i}" for i in range(writers)]
    plans = {name: plan(name, batches, partitions, seed) for name in names}
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.support.append_child",
                "t",
                name,
                str(batches),
                str(partitions),
                str(seed),
                "idempotent" if i % 2 else "plain",
            ],
            cwd=REPO,
            env=child_env(db_url),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i, name in enumerate(names)
    ]
    try:
        for proc in procs:
            assert proc.stdout is not None
            assert proc.stdout.readline().strip() == "ready"
        tailers = start_tailers(db_url, "t", partitions)
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
        for proc in procs:
            _out, err = proc.communicate(timeout=180)
            assert proc.returncode == 0, err
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
    finish_tailers(tailers, expected_per_partition(plans))
    verify_final_log(db_url, "t", partitions, plans, tailers)


@pytest.mark.timeout(300)
def test_concurrent_producers_commit_in_offset_order(db_url: str) -> None:
    """The same through the public API: several Producers, tiny batches, acknowledged offsets exact."""
    partitions, writers, per_writer = 2, 4, 400
    create_topic(db_url, "t", partitions)
    rng = random.Random(3)
    plans: dict[str, Plan] = {
        f"q{w}": [(rng.randrange(partitions), [f"q{w}-{n}".encode()]) for n in range(per_writer)]
        for w in range(writers)
    }
    tailers = start_tailers(db_url, "t", partitions)
    acks: dict[str, list[tuple[int, Future[RecordMetadata]]]] = {}
    errors: list[BaseException] = []
    start = threading.Event()

    def run(name: str) -> None:
        try:
            producer = oncelog.Producer(db_url, linger_ms=0, max_batch_records=3)
            try:
                start.wait(60)
                mine = acks.setdefault(name, [])
                for part, (value,) in plans[name]:
                    mine.append((part, producer.send("t", value, key=value, partition=part)))
                producer.flush(120)
            finally:
                producer.close(timeout=15)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(name,), daemon=True) for name in plans]
    for t in threads:
        t.start()
    start.set()
    for t in threads:
        t.join(180)
        assert not t.is_alive(), "a producer thread hung"
    assert not errors, errors
    finish_tailers(tailers, expected_per_partition(plans))
    logs = verify_final_log(db_url, "t", partitions, plans, tailers)
    for name, sent in acks.items():
        for i, (part, future) in enumerate(sent):
            meta = future.result(0)
            assert meta.partition == part
            assert logs[part][meta.offset] == f"{name}-{i}".encode()


@pytest.mark.timeout(60)
def test_empty_fetch_reports_the_high_watermark_of_its_own_snapshot(db_url: str) -> None:
    """FetchResult promises "the high watermark seen by that read". A fetch at the end of the log
    finds no records; if the fetch read the high watermark in a later statement (a later
    snapshot) than the records, an append committing in between would give (no records, high
    watermark > offset): records claimed below the high watermark that the same read did not
    return, which is what a gap looks like to a tailing reader. (Seen with the first fetch,
    which asked list_offsets_v1 for the high watermark after an empty fetch_v1.) The concurrent
    commit is injected deterministically before every statement of the fetch after its first, by a
    cursor class installed on the reader's own driver connection."""
    create_topic(db_url, "t", 1)
    reader_engine = create_engine(db_url, poolclass=sa.NullPool)
    writer_engine = create_engine(db_url, poolclass=sa.NullPool)
    try:
        with (
            reader_engine.connect().execution_options(isolation_level="AUTOCOMMIT") as reader,
            writer_engine.connect().execution_options(isolation_level="AUTOCOMMIT") as writer,
        ):
            log.produce(writer, topic="t", partition=0, records=[RecordIn(b"a")])
            statements: list[str] = []

            class CommitAnAppendFirst(psycopg.Cursor[Any]):
                """Every statement on the reader's connection, whichever layer sends it (SQLAlchemy
                or the store's binary cursor), first lets a concurrent append commit, except the
                first statement: a fetch that needs a second statement reads a later snapshot."""

                def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Self:
                    statements.append(str(query))
                    if len(statements) >= 2:
                        log.produce(writer, topic="t", partition=0, records=[RecordIn(f"b{len(statements)}".encode())])
                    return super().execute(query, params, **kwargs)

            dbapi = reader.connection.dbapi_connection
            assert isinstance(dbapi, psycopg.Connection)
            dbapi.cursor_factory = CommitAnAppendFirst
            result = log.fetch(reader, topic="t", partition=0, offset=1)
    finally:
        reader_engine.dispose()
        writer_engine.dispose()
    assert statements, "the fetch ran no statement on the reader's connection"
    # The read that found nothing at offset 1 saw the log end at 1; if it returned the appended
    # record instead, that record must be below the high watermark it reports.
    if result.records:
        assert [r.offset for r in result.records] == list(range(1, 1 + len(result.records)))
        assert result.high_watermark == 1 + len(result.records)
    else:
        assert result.high_watermark == 1, (
            f"an empty fetch at offset 1 reported high watermark {result.high_watermark} (statements: {statements!r})"
        )
