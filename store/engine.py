"""Connections to the oncelog database.

The schema that holds oncelog's objects is configurable (default ``oncelog``). Every connection
made here sets ``search_path`` to that schema, so store code and the migrations name objects
unqualified and one installation can live beside another in the same database.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import quote_plus

import sqlalchemy as sa
from sqlalchemy.engine import URL, make_url

from oncelog.errors import ConfigurationError

DEFAULT_SCHEMA = "oncelog"
_SCHEMA_RE = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


def validate_schema(schema: str) -> str:
    """Return ``schema`` if it is a plain lower-case identifier, else raise ConfigurationError.

    Only plain identifiers are accepted, so the name can be written into DDL and ``search_path``
    without quoting rules becoming part of the security model.
    """
    # fullmatch: `$` would also match before a trailing newline.
    if not isinstance(schema, str) or not _SCHEMA_RE.fullmatch(schema):
        raise ConfigurationError(f"invalid schema name {schema!r}: use lower-case letters, digits and '_' (at most 63)")
    return schema


#: What a password is replaced with wherever a URL is shown.
MASK = "***"
# A connection parameter holding a secret: libpq's ``password`` and ``sslpassword`` (compared in
# lower case: libpq's own keywords are case-sensitive, but a masked look-alike costs nothing).
_SECRET_KEY = re.compile(r"password", re.IGNORECASE)
# In text that does not parse as a URL, the same secrets by pattern: a ``key=value`` pair (a libpq
# keyword/value string, or a query parameter: the value ends at whitespace, '&' or '#'; a quoted
# value at its closing quote) and the password of a URL's userinfo (up to the last '@', so a
# password with an unencoded '@' is masked whole).
_SECRET_PAIR = re.compile(r"(\b\w*password\s*=\s*)(?:'(?:[^'\\]|\\.)*'?|[^\s&#]*)", re.IGNORECASE)
_USERINFO_PASSWORD = re.compile(r"(://[^:/?#@\s]*:)\S*@")


def database_url(url: str | URL) -> URL:
    """Parse a PostgreSQL URL and pin the psycopg 3 driver.

    Accepts ``postgresql://``, ``postgres://`` and ``postgresql+psycopg://``; anything else
    (another scheme, a libpq keyword/value string, a malformed URL, not a string at all) is a
    ConfigurationError whose message shows the URL through :func:`redact`, never its password.
    """
    if isinstance(url, URL):
        parsed = url
    elif isinstance(url, str):
        try:
            parsed = make_url(url)
        # ValueError: urllib and SQLAlchemy refuse some malformed URLs (a port that is not a
        # number, an unclosed IPv6 bracket) with it. `from None`: their messages quote the URL,
        # password included, and a chained exception is printed with every traceback.
        except (sa.exc.ArgumentError, ValueError):
            raise ConfigurationError(_invalid_url_message(url)) from None
    else:
        raise ConfigurationError(
            f"the database URL must be a str (postgresql://user@host:port/dbname), not {type(url).__name__}"
        )
    backend = parsed.get_backend_name()
    if backend not in ("postgresql", "postgres"):
        raise ConfigurationError(f"unsupported database URL scheme {backend!r}: oncelog needs postgresql://")
    if parsed.host and "@" in parsed.host:
        # An unencoded '@' in the password: SQLAlchemy splits at the first '@' and the rest of
        # the password would be taken for (and shown as) the host name.
        raise ConfigurationError(f"{_invalid_url_message(url)}; percent-encode '@' in the password as %40")
    if parsed.port is not None and not 0 < parsed.port < 65536:
        raise ConfigurationError(f"invalid database URL {redact(parsed)}: port {parsed.port} is not 1 to 65535")
    return parsed.set(drivername="postgresql+psycopg")


def _invalid_url_message(url: str | URL) -> str:
    text = url if isinstance(url, str) else ""
    hint = "expected postgresql://user@host:port/dbname"
    if "://" not in text and "=" in text:
        hint += " (libpq keyword/value strings are not accepted; write the same settings as a URL)"
    return f"invalid database URL {redact(url)}: {hint}"


def redact(url: object) -> str:
    """The URL as text with every password replaced by ``***``, safe for reprs, logs and errors.

    The one masking helper of oncelog. It masks the password of the userinfo
    (``user:password@host``), query parameters named like ``password`` (``?password=``,
    ``&sslpassword=``, also percent-encoded), and, in text that is not a URL (a libpq
    keyword/value string such as ``host=db password=x``, a malformed URL), every
    ``...password=value`` pair and whatever stands between ``user:`` and ``@``.
    """
    if not isinstance(url, str | URL):
        return f"<not a database URL: {type(url).__name__}>"
    try:
        parsed = make_url(url) if isinstance(url, str) else url
    except (sa.exc.ArgumentError, ValueError):
        return _mask_text(str(url))
    if parsed.host and "@" in parsed.host:
        # An unencoded '@' in the password put part of it in the host: mask the text instead.
        return _mask_text(str(url))
    query = parsed.query
    base = parsed.set(query={}).render_as_string(hide_password=True)
    if not query:
        return base
    pairs = []
    for key, value in query.items():
        values = value if isinstance(value, tuple) else (value,)
        for v in values:
            shown = MASK if _SECRET_KEY.search(key) else quote_plus(v)
            pairs.append(f"{quote_plus(key)}={shown}")
    return f"{base}?{'&'.join(pairs)}"


def _mask_text(text: str) -> str:
    """Mask secrets by pattern in text that does not parse as a URL."""
    text = _USERINFO_PASSWORD.sub(lambda m: f"{m.group(1)}{MASK}@", text)
    return _SECRET_PAIR.sub(lambda m: f"{m.group(1)}{MASK}", text)


def create_engine(url: str | URL, *, schema: str = DEFAULT_SCHEMA, **kwargs: Any) -> sa.Engine:
    """An engine whose connections use ``schema`` as their search_path.

    ``pg_temp`` is named last so a temporary table can never shadow an oncelog table.
    """
    schema = validate_schema(schema)
    connect_args = dict(kwargs.pop("connect_args", {}))
    connect_args.setdefault("options", f"-c search_path={schema},pg_temp")
    return sa.create_engine(
        database_url(url),
        connect_args=connect_args,
        pool_pre_ping=True,
        **kwargs,
    )
