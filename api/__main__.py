"""``python -m oncelog`` runs the CLI."""

from oncelog.cli import main

main()
