"""libpq's ``options`` in a database URL (``?options=-c synchronous_commit=local``) reach every
session of a client, beside the client's own: a user can choose per client what a commit waits
for (docs/operations.md, "What synchronous_commit promises"), and can never move the client's
search_path or lift its timeouts that way."""

from __future__ import annotations

import sqlalchemy as sa

from oncelog.store import create_engine
from oncelog.store.engine import Timeouts


def _with_options(db_url: str, options: str) -> str:
    return sa.make_url(db_url).update_query_dict({"options": options}).render_as_string(hide_password=False)


def test_the_urls_options_reach_the_session_and_the_clients_own_settings_win(db_url: str) -> None:
    url = _with_options(db_url, "-c synchronous_commit=local -c search_path=public -c statement_timeout=0")
    engine = create_engine(url, timeouts=Timeouts.for_request(5000))
    try:
        with engine.connect() as conn:
            shown = [
                conn.exec_driver_sql(f"SHOW {name}").scalar()
                for name in ("synchronous_commit", "search_path", "statement_timeout")
            ]
    finally:
        engine.dispose()
    assert shown == ["local", "oncelog,pg_temp", "5s"]


def test_a_url_without_options_gets_the_servers_settings_and_the_clients_search_path(db_url: str) -> None:
    plain = sa.create_engine(sa.make_url(db_url).set(drivername="postgresql+psycopg"))
    engine = create_engine(db_url)
    try:
        with plain.connect() as conn:
            server = conn.exec_driver_sql("SHOW synchronous_commit").scalar()
        with engine.connect() as conn:
            shown = [conn.exec_driver_sql(f"SHOW {name}").scalar() for name in ("synchronous_commit", "search_path")]
    finally:
        engine.dispose()
        plain.dispose()
    assert shown == [server, "oncelog,pg_temp"]
