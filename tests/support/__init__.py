"""Test-only helpers (fault injection, etc.); not part of the installed package."""
