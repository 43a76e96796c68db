"""scripts/freeze_revision.py: what it writes for changed functions, views, triggers, policies and
table grants takes a database at head to exactly the edited state, and back."""

from __future__ import annotations

import importlib.util
import uuid
from collections.abc import Iterator
from types import ModuleType

import pytest
import sqlalchemy as sa

from oncelog.migrations import frozen
from oncelog.store import cluster, create_engine
from oncelog.store.engine import database_url
from tests.support import REPO
from tests.support.catalogue import catalogue, differences


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("freeze_revision", REPO / "scripts" / "freeze_revision.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


#: Edits of every kind the script freezes, as a developer would make them in store/sql.
EDITS = """
CREATE FUNCTION freeze_probe_v1(p integer) RETURNS integer LANGUAGE sql AS $$ SELECT p + 1 $$;
COMMENT ON FUNCTION freeze_probe_v1(integer) IS 'added';
REVOKE ALL ON FUNCTION freeze_probe_v1(integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION freeze_probe_v1(integer) TO oncelog_client;
COMMENT ON FUNCTION server_now_v1() IS 'comment changed';
CREATE VIEW freeze_probe WITH (security_barrier) AS SELECT freeze_probe_v1(1) AS two, 'it''s' AS quoted;
COMMENT ON VIEW freeze_probe IS 'a new view';
COMMENT ON COLUMN freeze_probe.quoted IS 'a column comment';
GRANT SELECT ON freeze_probe TO oncelog_reader;
COMMENT ON VIEW partition_offsets IS 'comment changed';
COMMENT ON TRIGGER records_insert_check ON records IS 'comment changed';
CREATE TRIGGER freeze_probe_guard BEFORE UPDATE ON clock FOR EACH ROW EXECUTE FUNCTION txn_history_guard_v1();
ALTER POLICY txn_history_acl ON txn_history TO oncelog_reader, oncelog_admin USING (false);
GRANT SELECT ON groups TO oncelog_reader;
REVOKE SELECT ON partitions FROM oncelog_client;
"""


@pytest.fixture
def two_heads(server_url: str, template_db: str) -> Iterator[tuple[str, str]]:
    names = [f"oncelog_fr_{uuid.uuid4().hex[:10]}" for _ in range(2)]
    for name in names:
        cluster.create_database(server_url, name, template=template_db)
    head, edited = (database_url(server_url).set(database=n).render_as_string(hide_password=False) for n in names)
    yield head, edited
    for name in names:
        cluster.drop_database(server_url, name)


def _run(engine: sa.Engine, text: str) -> None:
    with engine.begin() as conn:
        conn.exec_driver_sql("SET LOCAL search_path TO oncelog, pg_temp")
        driver = conn.connection.driver_connection
        assert driver is not None
        driver.execute(text)


def _catalogue(engine: sa.Engine) -> dict[str, dict[str, tuple[object, ...]]]:
    with engine.connect() as conn:
        return catalogue(conn)


def test_frozen_statements_take_head_to_the_edited_state_and_back(two_heads: tuple[str, str]) -> None:
    script = _script()
    head_url, edited_url = two_heads
    head, edited = create_engine(head_url), create_engine(edited_url)
    try:
        _run(edited, EDITS)
        before = _catalogue(head)
        target = _catalogue(edited)
        assert len(differences(before, target)) == 9

        up, down, names = script.diff(script._functions(head_url), script._functions(edited_url))
        up_before, up_after, other_names = script.diff_others(script._others(head_url), script._others(edited_url))
        down_before, down_after, _ = script.diff_others(script._others(edited_url), script._others(head_url))
        assert sorted(names + other_names) == sorted(
            [
                "+freeze_probe_v1(integer)",
                "server_now_v1()",
                "view freeze_probe",
                "view partition_offsets",
                "trigger freeze_probe_guard",
                "trigger records_insert_check",
                "policy txn_history_acl",
                "grants on groups",
                "grants on partitions",
            ]
        )
        up_text = "\n".join(up_before + up + up_after).replace(frozen.PLACEHOLDER, "oncelog")
        down_text = "\n".join(down_before + down + down_after).replace(frozen.PLACEHOLDER, "oncelog")
        assert "oncelog." not in up_text.replace("oncelog.pruning", "")  # nothing names the schema

        _run(head, up_text)
        assert differences(_catalogue(head), target) == []
        _run(head, down_text)
        assert differences(_catalogue(head), before) == []
    finally:
        head.dispose()
        edited.dispose()


def test_nothing_differs_nothing_is_written(two_heads: tuple[str, str]) -> None:
    script = _script()
    a, b = two_heads
    assert script.diff(script._functions(a), script._functions(b)) == ([], [], [])
    assert script.diff_others(script._others(a), script._others(b)) == ([], [], [])
