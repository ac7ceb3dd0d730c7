"""The leases that count the wraps using one gateway (issue 41): a wrap's lease counts
while its process lives, and no longer once it is gone or its id names another process,
so a wrap killed with SIGKILL never keeps a gateway up."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from sakur4.wrap.leases import Leases, alive, started_at


def finished_pid() -> int:
    """The id of a process that has ended (and been reaped)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_a_live_wrap_s_lease_counts_and_is_given_back(tmp_path: Path) -> None:
    leases = Leases("127.0.0.1", 8741, root=tmp_path)
    with leases.locked():
        leases.take(os.getpid())
    assert leases.holders() == [os.getpid()]
    leases.give_back(os.getpid())
    assert leases.holders() == []


def test_the_lease_of_a_process_that_is_gone_counts_for_nothing(tmp_path: Path) -> None:
    leases = Leases("127.0.0.1", 8741, root=tmp_path)
    gone = finished_pid()
    with leases.locked():
        (leases.dir / f"lease-{gone}").write_text("12345")
        leases.take(os.getpid())
    assert leases.holders() == [os.getpid()]
    assert not (leases.dir / f"lease-{gone}").exists()  # removed on the way


def test_a_reused_process_id_is_not_the_wrap_that_took_the_lease(tmp_path: Path) -> None:
    leases = Leases("127.0.0.1", 8741, root=tmp_path)
    me = os.getpid()
    with leases.locked():
        (leases.dir / f"lease-{me}").write_text("1")  # started at another time
    assert leases.holders() == []
    assert alive(me, started_at(me))
    assert not alive(me, "1")


def test_a_recorded_gateway_whose_process_is_gone_is_not_hosted(tmp_path: Path) -> None:
    leases = Leases("127.0.0.1", 8741, root=tmp_path)
    with leases.locked():
        leases.record(os.getpid(), os.getpid(), "http://127.0.0.1:8741")
        assert leases.hosted() is not None
        leases.record(finished_pid(), os.getpid(), "http://127.0.0.1:8741")
        assert leases.hosted() is None
        leases.forget()
        assert leases.hosted() is None


def test_each_address_has_its_own_leases(tmp_path: Path) -> None:
    a = Leases("127.0.0.1", 8741, root=tmp_path)
    b = Leases("127.0.0.1", 8742, root=tmp_path)
    with a.locked():
        a.take(os.getpid())
    assert b.holders() == []
