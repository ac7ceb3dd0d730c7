"""doctor reports a store no command can use; a read creates nothing (issue 15, row 15)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def sakur4(store: Path, project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sakur4", "--store", str(store), "--project", str(project), *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=project,
    )


def test_doctor_fails_on_a_device_in_place_of_the_store(tmp_path: Path) -> None:
    """`SAKUR4_STORE=/dev/null`: doctor warned "empty (0 bytes)" and exited 0."""
    out = sakur4(Path("/dev/null"), tmp_path, "doctor")
    assert out.returncode == 1, out.stdout
    assert "[FAIL] store         /dev/null is a device, not a regular file" in out.stdout
    out = sakur4(Path("/dev/null"), tmp_path, "status")
    assert (out.returncode, out.stderr.strip()) == (
        1,
        "sakur4: error: store /dev/null is a device, not a regular file",
    )


def test_a_read_command_creates_and_registers_nothing(tmp_path: Path) -> None:
    store = tmp_path / "store" / "sakur4.db"
    out = sakur4(store, tmp_path, "status", "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["project"]["id"] is None
    assert sakur4(store, tmp_path, "receipts").stdout.startswith("no receipts yet")
    assert not store.parent.exists()
