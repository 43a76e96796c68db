"""The CLI's last-resort error line (oncelog.cli.one_line): one line, the exception's type and the
first line of its message; for a Py4J error, its Java exception's line, not the Java stack."""

from __future__ import annotations

from oncelog.cli import one_line


class _Java:
    def toString(self) -> str:
        return "org.apache.spark.SparkException: Job aborted due to stage failure\n\tat org.apache.spark..."


class Py4JJavaError(Exception):
    """Shaped as py4j's: the message holds the Java stack, java_exception the Java object."""

    def __init__(self) -> None:
        super().__init__("An error occurred while calling o42.save.\n: org.apache.spark...\n\tat ...")
        self.java_exception = _Java()


def test_one_line_names_the_type_and_the_first_line() -> None:
    assert one_line(ValueError("bad value\nmore detail")) == "ValueError: bad value"
    assert one_line(KeyError()) == "KeyError"
    assert one_line(RuntimeError("\n\n  indented first line  \n")) == "RuntimeError: indented first line"


def test_a_py4j_error_is_said_by_its_java_exception() -> None:
    assert one_line(Py4JJavaError()) == (
        "Py4JJavaError: org.apache.spark.SparkException: Job aborted due to stage failure"
    )
