"""Migrations are reversible and match the models; the schema documents itself."""

from __future__ import annotations

import subprocess
import sys

import pytest
import sqlalchemy as sa

from oncelog.errors import SchemaNotReadyError
from oncelog.store import create_engine, log, migrate, topics, txn
from oncelog.store.migrate import SchemaDriftError
from oncelog.store.records import RecordIn
from oncelog.store.schema import metadata


def _objects(conn: sa.Connection, schema: str) -> dict[str, set[str]]:
    """Every object in ``schema``, by kind, that a migration may create."""
    q = {
        "relations": "SELECT relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = :s",
        "functions": "SELECT proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = :s",
        "types": "SELECT typname FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace "
        "WHERE n.nspname = :s AND t.typtype NOT IN ('c', 'b') ",
    }
    return {k: set(conn.execute(sa.text(v), {"s": schema}).scalars()) for k, v in q.items()}


@pytest.mark.parametrize("schema", ["oncelog", "tenant_b"])
def test_round_trip(empty_db_url: str, schema: str) -> None:
    engine = create_engine(empty_db_url, schema=schema)
    try:
        assert migrate.current(engine, schema=schema) is None
        migrate.upgrade(engine, schema=schema)
        assert migrate.current(engine, schema=schema) == migrate.head()
        migrate.check(engine, schema=schema)
        with engine.connect() as conn:
            installed = _objects(conn, schema)
        assert {t.name for t in metadata.sorted_tables} <= installed["relations"]
        assert "txn_transition_v1" in installed["functions"]

        migrate.downgrade(engine, schema=schema, revision="base")
        assert migrate.current(engine, schema=schema) is None
        with engine.connect() as conn:
            left = _objects(conn, schema)
        # Only alembic's own version table (and its index) may stay behind.
        assert left["relations"] <= {"alembic_version", "alembic_version_pkc"}
        assert left["functions"] == set()
        assert left["types"] == set()

        migrate.upgrade(engine, schema=schema)
        migrate.check(engine, schema=schema)
        with engine.connect() as conn:
            assert _objects(conn, schema) == installed
    finally:
        engine.dispose()


def test_check_writes_nothing_to_stdout(db_url: str) -> None:
    """Callers own stdout (``oncelog verify --json`` prints JSON there): run in a process of its
    own, since alembic binds sys.stdout when it is imported."""
    code = "import sys; from oncelog.store import create_engine, migrate; migrate.check(create_engine(sys.argv[1]))"
    done = subprocess.run(
        [sys.executable, "-c", code, db_url], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""


def test_check_reports_drift(engine: sa.Engine) -> None:
    migrate.check(engine)
    with engine.begin() as conn:
        conn.exec_driver_sql("ALTER TABLE topics ADD COLUMN surprise integer")
    with pytest.raises(SchemaDriftError) as info:
        migrate.check(engine)
    assert "surprise" in str(info.value)


def test_check_reports_missing_constraint(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        conn.exec_driver_sql("ALTER TABLE topics DROP CONSTRAINT uq_topics_name")
    with pytest.raises(SchemaDriftError):
        migrate.check(engine)


def test_check_on_unmigrated_database(empty_db_url: str) -> None:
    engine = create_engine(empty_db_url)
    try:
        with pytest.raises(SchemaNotReadyError, match="oncelog db upgrade"):
            migrate.check(engine)
    finally:
        engine.dispose()


def test_every_table_and_column_has_a_comment(engine: sa.Engine) -> None:
    in_schema = (
        "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = 'oncelog' AND c.relkind IN ('r', 'v', 'm')"
    )
    with engine.connect() as conn:
        tables = (
            conn.execute(sa.text(f"SELECT c.relname {in_schema} AND obj_description(c.oid, 'pg_class') IS NULL"))
            .scalars()
            .all()
        )
        columns = (
            conn.execute(
                sa.text(
                    "SELECT c.relname || '.' || a.attname FROM pg_class c "
                    "JOIN pg_namespace n ON n.oid = c.relnamespace "
                    "JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped "
                    "WHERE n.nspname = 'oncelog' AND c.relkind IN ('r', 'v', 'm') "
                    "AND col_description(c.oid, a.attnum) IS NULL"
                )
            )
            .scalars()
            .all()
        )
        functions = (
            conn.execute(
                sa.text(
                    "SELECT proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
                    "WHERE n.nspname = 'oncelog' AND obj_description(p.oid, 'pg_proc') IS NULL"
                )
            )
            .scalars()
            .all()
        )
    assert tables == []
    assert columns == []
    assert functions == []


def test_functions_pin_their_search_path(engine: sa.Engine) -> None:
    """Every function runs with the schema it was installed in, whatever the caller's search_path."""
    with engine.connect() as conn:
        rows = conn.execute(
            sa.text(
                "SELECT proname, proconfig FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
                "WHERE n.nspname = 'oncelog'"
            )
        ).all()
    assert rows
    for name, config in rows:
        assert config is not None and "search_path=oncelog, pg_temp" in config, name


def test_0014_fills_txn_spans_from_the_log_and_downgrades_exactly(empty_db_url: str) -> None:
    """Revision 0014 moves the all-or-none probe from a per-record index to txn_spans: transactions
    committed before it get their spans from the log, open ones when they commit."""
    engine = create_engine(empty_db_url)
    rewritten = ("consistent_limits_v1", "txn_complete_v1", "enforce_retention_v1")

    def state() -> tuple[dict[str, str], set[str]]:
        with engine.connect() as conn:
            defs = dict(
                conn.exec_driver_sql(
                    "SELECT proname, pg_get_functiondef(p.oid) FROM pg_proc p "
                    "WHERE pronamespace = 'oncelog'::regnamespace AND proname = ANY(%(n)s)",
                    {"n": list(rewritten)},
                ).all()
            )
            indexes = set(
                conn.exec_driver_sql("SELECT indexname FROM pg_indexes WHERE schemaname = 'oncelog'").scalars()
            )
        return defs, indexes

    def spans(conn: sa.Connection) -> dict[tuple[int, int, int], tuple[int, int]]:
        rows = conn.exec_driver_sql(
            "SELECT producer_id, txn_number, partition, first_offset, last_offset FROM txn_spans"
        ).all()
        return {(r[0], r[1], r[2]): (r[3], r[4]) for r in rows}

    try:
        migrate.upgrade(engine, revision="0013")
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            topics.create_topic(conn, name="t", partitions=2)
            ids = {
                tid: txn.init_producer_id(conn, transactional_id=tid, transaction_timeout_ms=60_000)
                for tid in ("committed", "aborted", "open")
            }
            seq: dict[tuple[str, int], int] = {}

            def send(tid: str, partition: int, *values: bytes) -> None:
                ident = ids[tid]
                log.produce(
                    conn,
                    topic="t",
                    partition=partition,
                    records=[RecordIn(value=v) for v in values],
                    producer_id=ident.producer_id,
                    producer_epoch=ident.epoch,
                    base_sequence=seq.get((tid, partition), 0),
                    transactional_id=tid,
                    txn_number=ident.txn_number + 1,
                )
                seq[(tid, partition)] = seq.get((tid, partition), 0) + len(values)

            def end(tid: str, commit: bool) -> None:
                ident = ids[tid]
                txn.end_txn(
                    conn,
                    transactional_id=tid,
                    producer_id=ident.producer_id,
                    epoch=ident.epoch,
                    txn_number=ident.txn_number + 1,
                    commit=commit,
                )

            send("committed", 0, b"c1", b"c2")  # p0: 0-1
            send("aborted", 0, b"x")  # p0: 2
            send("open", 1, b"o1")  # p1: 0
            send("committed", 1, b"c3")  # p1: 1
            send("committed", 0, b"c4")  # p0: 3
            end("committed", True)  # markers p0: 4, p1: 2
            end("aborted", False)  # marker p0: 5
        before = state()
        assert "ix_records_producer_id_txn_number" in before[1]

        migrate.upgrade(engine, revision="0014")
        assert "ix_records_producer_id_txn_number" not in state()[1]
        c, o = ids["committed"], ids["open"]
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            assert spans(conn) == {
                (c.producer_id, c.txn_number + 1, 0): (0, 3),
                (c.producer_id, c.txn_number + 1, 1): (1, 1),
            }
            send("open", 1, b"o2")  # p1: 3
            end("open", True)
            assert spans(conn)[(o.producer_id, o.txn_number + 1, 1)] == (0, 3)
            got = log.fetch_many(conn, {("t", 0): 0, ("t", 1): 0}, read_committed=True)
            assert [r.value for r in got[("t", 0)].records] == [b"c1", b"c2", b"c4"]
            assert [r.value for r in got[("t", 1)].records] == [b"o1", b"c3", b"o2"]

        migrate.downgrade(engine, revision="0013")
        assert state() == before
        with engine.connect() as conn:
            assert conn.exec_driver_sql("SELECT to_regclass('oncelog.txn_spans')").scalar_one() is None
    finally:
        engine.dispose()
