"""The client-side watchdog (oncelog.store.engine): what bounds a request on a stalled network.

Pure socket tests, no database: a read blocked on a socket whose peer never answers ends when the
deadline passes, and a descriptor reused by another socket after its owner closed it is left alone.
"""

from __future__ import annotations

import socket
import threading
import time

from oncelog.store import engine

#: Bounds each wait here; never an assertion on speed.
WAIT = 10.0


def test_a_blocked_read_ends_at_the_deadline() -> None:
    ours, peer = socket.socketpair()
    with ours, peer:
        got: list[bytes] = []
        reader = threading.Thread(target=lambda: got.append(ours.recv(10)))
        reader.start()
        token = engine._WATCHDOG.arm(ours.fileno(), time.monotonic() + 0.1)
        reader.join(WAIT)
        assert not reader.is_alive()
        assert got == [b""]  # shut down: the read sees end of stream, as libpq does
        assert engine._WATCHDOG.disarm(token)  # it says it fired


def test_disarmed_in_time_nothing_is_cut() -> None:
    ours, peer = socket.socketpair()
    with ours, peer:
        token = engine._WATCHDOG.arm(ours.fileno(), time.monotonic() + 0.05)
        assert not engine._WATCHDOG.disarm(token)
        time.sleep(0.2)
        peer.sendall(b"x")
        assert ours.recv(1) == b"x"


def test_a_descriptor_reused_by_another_socket_is_not_cut() -> None:
    first, first_peer = socket.socketpair()
    fd = first.fileno()
    engine._WATCHDOG.arm(fd, time.monotonic() + 0.2)  # its owner never disarms (an error path)
    first.close()
    first_peer.close()
    second, second_peer = socket.socketpair()
    with second, second_peer:
        assert fd in (second.fileno(), second_peer.fileno())  # the number now names a new socket
        time.sleep(0.5)  # past the deadline
        second_peer.sendall(b"y")
        assert second.recv(1) == b"y"
        second.sendall(b"z")  # not shut down in either direction
        assert second_peer.recv(1) == b"z"
