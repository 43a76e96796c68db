"""The client-side watchdog (oncelog.store.engine): what bounds a request on a stalled network.

Pure socket tests, no database: a read blocked on a socket whose peer never answers ends when the
deadline passes, and a descriptor reused by another socket after its owner closed it is left alone.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
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


#: A child process arms the watchdog on a socket that never gets an answer, says so, and after
#: the parent's go-ahead (once it was stopped and resumed) reports whether the socket was cut.
_PAUSED_CHILD = """
import socket, sys, time
from oncelog.store import engine
ours, peer = socket.socketpair()
ours.setblocking(False)
def cut() -> bool:
    try:
        return ours.recv(1) == b""
    except BlockingIOError:
        return False
engine._WATCHDOG.arm(ours.fileno(), time.monotonic() + float(sys.argv[1]))
print("armed", flush=True)
sys.stdin.readline()
time.sleep(0.3)  # six ticks of the watchdog: it has looked at the deadline since the resume
print("cut" if cut() else "whole", flush=True)
end = time.monotonic() + 10
while not cut() and time.monotonic() < end:
    time.sleep(0.05)
print("cut" if cut() else "whole", flush=True)
"""


def test_time_the_process_was_stopped_does_not_count() -> None:
    """A process stopped past its deadline (SIGSTOP: a zombie producer, a paused VM) and resumed
    keeps its connection, so it reads the answer that arrived meanwhile; the bound still holds
    for the time it runs."""
    with subprocess.Popen(
        [sys.executable, "-c", _PAUSED_CHILD, "2.0"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as child:
        assert child.stdin is not None and child.stdout is not None
        try:
            assert child.stdout.readline().strip() == "armed"
            os.kill(child.pid, signal.SIGSTOP)
            time.sleep(3.0)  # past the deadline, with the child stopped
            os.kill(child.pid, signal.SIGCONT)
            child.stdin.write("go\n")
            child.stdin.flush()
            assert child.stdout.readline().strip() == "whole"  # about 2 s of its bound are left
            assert child.stdout.readline().strip() == "cut"  # and they run out
        finally:
            child.kill()
