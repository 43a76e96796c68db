"""The command line without the optional extras: ``pip install oncelog`` alone gives a working
``oncelog`` (the broker's Kafka codec, kafka-python, is the broker extra), and a command that needs
an extra says which, in one line."""

from __future__ import annotations

import subprocess
import sys

#: Runs the CLI's entry point with kafka-python made unimportable, as in an install without the
#: broker extra (a None in sys.modules makes its import raise ModuleNotFoundError).
_WITHOUT_KAFKA = "import sys; sys.modules['kafka'] = None; from oncelog.cli import main; main()"


def _cli_without_kafka(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", _WITHOUT_KAFKA, *args], capture_output=True, text=True, timeout=120, check=False
    )


def test_the_cli_starts_without_the_broker_extra() -> None:
    listed = _cli_without_kafka("--help")
    assert listed.returncode == 0, listed.stderr
    assert "broker" in listed.stdout and "dev-db" in listed.stdout


def test_the_broker_command_names_the_extra_it_needs() -> None:
    refused = _cli_without_kafka("broker")
    assert refused.returncode == 1
    assert refused.stderr.strip().splitlines() == [
        "error: oncelog broker needs Kafka's protocol codec (kafka is not installed): pip install 'oncelog[broker]'"
    ]
