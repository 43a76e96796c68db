"""Migrations are reversible and match the models; the schema documents itself."""

from __future__ import annotations

import itertools
import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa

from oncelog import migrations as migrations_package
from oncelog.errors import SchemaNotReadyError
from oncelog.store import create_engine, log, migrate, topics, txn
from oncelog.store.migrate import SchemaDriftError
from oncelog.store.records import RecordIn
from oncelog.store.schema import metadata
from tests.support.catalogue import catalogue, differences


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


#: A fetch request: topics, partitions, offsets, max records, read_committed.
Request = tuple[list[str], list[int], list[int | None], int, bool]


class _Writer:
    """Writes to topic ``t`` through the store's protocol calls: as transactional ids (each in its
    first transaction) or, with ``tid`` None, plainly."""

    def __init__(self, conn: sa.Connection, tids: tuple[str, ...], timeout_ms: int = 60_000) -> None:
        self.conn = conn
        self.ids = {
            tid: txn.init_producer_id(conn, transactional_id=tid, transaction_timeout_ms=timeout_ms) for tid in tids
        }
        self.seq: dict[tuple[str, int], int] = {}

    def send(self, tid: str | None, partition: int, *values: bytes) -> None:
        batch = [RecordIn(value=v) for v in values]
        if tid is None:
            log.produce(self.conn, topic="t", partition=partition, records=batch)
            return
        ident = self.ids[tid]
        log.produce(
            self.conn,
            topic="t",
            partition=partition,
            records=batch,
            producer_id=ident.producer_id,
            producer_epoch=ident.epoch,
            base_sequence=self.seq.get((tid, partition), 0),
            transactional_id=tid,
            txn_number=ident.txn_number + 1,
        )
        self.seq[(tid, partition)] = self.seq.get((tid, partition), 0) + len(values)

    def end(self, tid: str, commit: bool) -> None:
        ident = self.ids[tid]
        txn.end_txn(
            self.conn,
            transactional_id=tid,
            producer_id=ident.producer_id,
            epoch=ident.epoch,
            txn_number=ident.txn_number + 1,
            commit=commit,
        )


def test_0014_fills_txn_spans_from_the_log_and_downgrades_exactly(empty_db_url: str) -> None:
    """Revision 0014 moves the all-or-none probe from a per-record index to txn_spans: transactions
    committed before it get their spans from the log, open ones when they commit."""
    engine = create_engine(empty_db_url)
    rewritten = ("consistent_limits_v1", "txn_complete_v1", "enforce_retention_v1")

    def state() -> tuple[dict[str, str], set[str]]:
        with engine.connect() as conn:
            defs: dict[str, str] = dict(
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
            w = _Writer(conn, ("committed", "aborted", "open"))
            send, end, ids = w.send, w.end, w.ids
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
            w.conn = conn
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


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("0014", "0015"),  # a fetch's bounds in one statement (fetch_bounds_v2)
        ("0015", "0016"),  # the all-or-none cut from txn_spans (consistent_limits_v1)
    ],
)
def test_fetch_rewrites_answer_every_fetch_as_before_and_downgrade_exactly(
    empty_db_url: str, old: str, new: str
) -> None:
    """Revisions that rewrite the read path for speed change no answer. On one log holding plain,
    committed, aborted, open and expired-open transactions, and a committed transaction above an
    open one's last stable offset (the all-or-none cut, also from inside it), fetch_v3 and fetch_v2
    answer every request of a grid exactly as before, errors included; the downgrade restores every
    function, its comment and its grants."""
    engine = create_engine(empty_db_url)

    def definitions() -> dict[str, str]:
        with engine.connect() as conn:
            return dict(
                conn.exec_driver_sql(
                    "SELECT p.oid::regprocedure::text, pg_get_functiondef(p.oid) "
                    "|| coalesce(obj_description(p.oid, 'pg_proc'), '') || coalesce(p.proacl::text, '') "
                    "FROM pg_proc p WHERE pronamespace = 'oncelog'::regnamespace AND p.prokind = 'f'"
                ).all()
            )

    ends: dict[int, int] = {}
    requests: list[Request] = []

    def answers() -> list[object]:
        out: list[object] = []
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            for topics_, parts, offsets, limit, committed in requests:
                args = {"t": topics_, "p": parts, "o": offsets, "n": limit, "rc": committed}
                for fn in ("fetch_v3", "fetch_v2"):
                    try:
                        rows = conn.exec_driver_sql(
                            f"SELECT * FROM {fn}(%(t)s::text[], %(p)s::int[], %(o)s::bigint[], %(n)s, %(rc)s)", args
                        ).all()
                        out.append([tuple(r) for r in rows])
                    except sa.exc.DBAPIError as exc:
                        # Not the CONTEXT lines: they name the function that raised.
                        out.append((exc.orig.sqlstate, exc.orig.diag.message_primary))  # type: ignore[union-attr]
        return out

    try:
        migrate.upgrade(engine, revision=old)
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            topics.create_topic(conn, name="t", partitions=3)
            w = _Writer(conn, ("a", "b", "open", "late", "stale"), timeout_ms=600_000)
            send, end = w.send, w.end
            send(None, 0, b"plain1", b"plain2")
            send("a", 0, b"a1")
            send("a", 1, b"a2", b"a3")
            send("b", 1, b"b1")
            end("a", True)
            end("b", False)
            send("open", 2, b"o1")  # holds partition 2 back from here
            send("late", 1, b"l1")
            send("late", 1, b"l1b")  # partition 1, offset 6: a read from here starts inside "late"
            send("late", 2, b"l2")  # above partition 2's last stable offset
            end("late", True)  # read_committed returns it on neither partition 1 nor 2
            send("stale", 0, b"s1")
            send(None, 1, b"plain3")
            # Setup: an open transaction past its timeout (fetches report it; none aborts it).
            conn.exec_driver_sql(
                "UPDATE transactions SET txn_started_at = now() - interval '1 hour' WHERE transactional_id = 'stale'"
            )
            ends.update(
                (p, o)
                for p, o in conn.exec_driver_sql(
                    "SELECT partition, next_offset FROM partitions JOIN topics USING (topic_id) WHERE name = 't'"
                )
            )
        # Every ordered pair of (partition, offset) choices, and triples of the interesting ones.
        choices = [(p, o) for p in (0, 1, 2) for o in sorted({0, 3, 6, ends[p], ends[p] + 1})] + [(7, 0), (0, -1)]
        picks = [*itertools.permutations(choices, 1), *itertools.permutations(choices, 2)]
        picks += itertools.permutations([(0, 0), (1, 0), (2, 0), (1, 6), (7, 0)], 3)
        for picked in picks:
            for limit in (1, 2, 500):
                for committed in (True, False):
                    requests.append(
                        (["t"] * len(picked), [p for p, _ in picked], [o for _, o in picked], limit, committed)
                    )
        requests.append((["t", "nope"], [1, 0], [0, 0], 10, True))
        requests.append(([], [], [], 10, True))
        requests.append((["t"], [0], [None], 10, True))
        requests.append((["t", "t"], [0], [0, 0], 10, True))  # lengths differ
        requests.append((["t"], [0], [0], 0, True))  # no record allowed
        before_defs, before = definitions(), answers()
        # The grid holds the cut: read_committed from 0 on partitions 1 and 2 withholds "late" on
        # both; from 6 on partition 1 (inside "late") too.
        cut: list[tuple[Request, list[bytes]]] = [
            ((["t", "t"], [1, 2], [0, 0], 500, True), [b"a2", b"a3"]),
            ((["t", "t"], [1, 2], [6, 0], 500, True), []),
            ((["t"], [1], [6], 500, True), [b"l1b", b"plain3"]),
        ]
        for request, values in cut:
            rows = before[requests.index(request) * 2]  # fetch_v3's answer
            assert isinstance(rows, list) and [r[3] for r in rows if r[1] is not None] == values

        migrate.upgrade(engine, revision=new)
        assert definitions() != before_defs
        assert answers() == before

        migrate.downgrade(engine, revision=old)
        assert definitions() == before_defs
    finally:
        engine.dispose()


def test_every_revision_downgrades_to_exactly_the_state_before_it(empty_db_url: str) -> None:
    """Each revision, upgraded and then downgraded, leaves the catalogue exactly as it found it:
    every function's definition, comment and grants, every column, constraint, index, view,
    trigger and policy (tests.support.catalogue). Its frozen SQL also names no other schema."""
    engine = create_engine(empty_db_url)
    revisions = migrate.revisions()
    assert revisions[0] == "0001" and revisions[-1] == migrate.head()
    try:
        for revision in revisions:
            with engine.connect() as conn:
                before = catalogue(conn)
            migrate.upgrade(engine, revision=revision)
            with engine.connect() as conn:
                after = catalogue(conn)
            assert differences(before, after), f"revision {revision} installs nothing"
            migrate.downgrade(engine, revision="-1")
            with engine.connect() as conn:
                assert differences(before, catalogue(conn)) == [], f"downgrade of {revision}"
            migrate.upgrade(engine, revision=revision)
        assert migrate.current(engine) == migrate.head()
    finally:
        engine.dispose()


def test_revisions_are_frozen_sql() -> None:
    """A revision applies its own frozen SQL files and nothing else: it imports no other revision
    and holds no SQL text of its own (migrations/frozen.py)."""
    versions = Path(migrations_package.__file__).parent / "versions"
    modules = sorted(versions.glob("0*.py"))
    assert modules
    for module in modules:
        source = module.read_text()
        assert "importlib" not in source and "oncelog.migrations.versions" not in source, module.name
        assert "CREATE " not in source.split('"""', 2)[2], module.name  # no SQL after the docstring
        for direction in ("up", "down"):
            frozen_sql = versions / "sql" / f"{module.stem}.{direction}.sql"
            assert frozen_sql.read_text().strip(), frozen_sql
            assert f'frozen.apply("{module.stem}", "{direction}", schema)' in source, module.name


def test_0025_keeps_the_records_of_topics_that_had_no_retention(empty_db_url: str) -> None:
    """Revision 0025 gives new topics Kafka's 7-day default: a topic created before it without a
    retention keeps its records for ever (-1), and one set explicitly keeps its value. Down again,
    a topic that followed the default gets that value written in, and -1 is NULL (for ever) again."""
    engine = create_engine(empty_db_url)

    def retention() -> dict[str, int | None]:
        with engine.connect() as conn:
            rows = conn.exec_driver_sql("SELECT name, retention_ms FROM topics ORDER BY name").all()
        return {str(name): ms for name, ms in rows}

    try:
        migrate.upgrade(engine, revision="0024")
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            topics.create_topic(conn, name="old-forever", partitions=1)
            topics.create_topic(conn, name="old-hour", partitions=1, config={"retention_ms": 3_600_000})
        migrate.upgrade(engine, revision="0025")
        assert retention() == {"old-forever": -1, "old-hour": 3_600_000}
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            topics.create_topic(conn, name="new-default", partitions=1)
            # Raw SQL: today's describe_topic reads columns later revisions added.
            follows = conn.exec_driver_sql(
                "SELECT t.retention_ms, s.log_retention_ms FROM topics t CROSS JOIN settings s "
                "WHERE t.name = 'new-default'"
            ).one()
            assert tuple(follows) == (None, 604_800_000)
        migrate.downgrade(engine, revision="0024")
        assert retention() == {"new-default": 604_800_000, "old-forever": None, "old-hour": 3_600_000}
    finally:
        engine.dispose()
