"""Test-only helpers (fault injection, etc.); not part of the installed package."""

from __future__ import annotations

import os
from pathlib import Path

#: The repository's root (tests live in layers below tests/, at different depths).
REPO = Path(__file__).resolve().parents[2]

#: How a test's child process gets its database URL: in its environment (readable by the same
#: user only), never on its command line (readable by every local user, and the URL may hold a
#: password when ONCELOG_DATABASE_URL names an external server).
CHILD_URL_ENV = "ONCELOG_TEST_CHILD_URL"


def child_env(url: str) -> dict[str, str]:
    """The environment for a child process: this one's, plus ``url``."""
    return {**os.environ, CHILD_URL_ENV: url}


def child_url() -> str:
    """In a child process: the database URL its parent gave it (see :func:`child_env`)."""
    return os.environ[CHILD_URL_ENV]
