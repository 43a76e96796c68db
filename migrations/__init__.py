"""The alembic environment of oncelog, shipped inside the wheel.

Run it through :mod:`oncelog.store.migrate` (``oncelog db upgrade``), which injects the
connection and the schema name; ``upgrade head`` therefore works from an installed wheel.
"""
