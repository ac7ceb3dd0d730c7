"""Resource faults, bounded: a full disk, a read-only store, a backend that never answers.

A full disk is a size-limited tmpfs (mounting needs root); where mounting is not
permitted, RLIMIT_FSIZE on the serve process stands in, and the test says so.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from reliability import faults

from sakur4.backends.launcher import LlamaServer

MOUNTABLE = faults.can_mount()


def _ok(outcome: faults.Outcome) -> None:
    print("\n".join([outcome.name, *outcome.observed]))
    assert not outcome.problems, outcome.problems


@pytest.mark.skipif(not MOUNTABLE, reason="cannot mount a tmpfs: see the RLIMIT_FSIZE test")
def test_full_disk_serve_refuses_clearly_and_resumes(tmp_path: Path) -> None:
    _ok(faults.full_disk_serve(tmp_path))


@pytest.mark.skipif(not MOUNTABLE, reason="cannot mount a tmpfs: see the RLIMIT_FSIZE test")
def test_full_disk_index_refuses_clearly_and_resumes(tmp_path: Path) -> None:
    _ok(faults.full_disk_index(tmp_path))


def test_full_disk_emulated_with_rlimit(tmp_path: Path) -> None:
    """The fallback for machines where tmpfs cannot be mounted, run everywhere."""
    _ok(faults.full_disk_rlimit(tmp_path))


@pytest.mark.skipif(
    not MOUNTABLE and os.geteuid() == 0,
    reason="root without mount rights: file modes do not stop root, nothing to show",
)
def test_read_only_store_is_named_and_left_unchanged(tmp_path: Path) -> None:
    _ok(faults.read_only_store(tmp_path))


def test_silent_backend_at_start_is_waited_for_and_named(tmp_path: Path) -> None:
    _ok(faults.silent_backend_at_start(tmp_path, timeout=2.0))


@pytest.mark.backend
def test_backend_going_silent_times_out_and_the_gateway_recovers(
    llama_ring: LlamaServer, tmp_path: Path
) -> None:
    _ok(faults.silent_backend_midway(tmp_path, llama_ring.url, timeout=12.0))
