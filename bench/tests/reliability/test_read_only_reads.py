"""A store on a read-only mount: reads work, writes say why not (issue 15, row 15)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from reliability import faults
from reliability.procs import SAKUR4, sakur4_env

from sakur4.anchors import pin_anchor
from sakur4.receipts import Receipt, write_receipt
from sakur4.store import open_store
from sakur4.store.projects import add_project

MOUNTABLE = faults.can_mount()


def sakur4(store: Path, project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = sakur4_env(store, project)
    return subprocess.run(
        [*SAKUR4, *args], env=env, capture_output=True, text=True, timeout=120, cwd=project
    )


@pytest.mark.skipif(
    not MOUNTABLE and os.geteuid() == 0,
    reason="root without mount rights: file modes do not stop root, nothing to show",
)
def test_reads_work_on_a_read_only_mount_and_writes_say_why_not(tmp_path: Path) -> None:
    home, project = tmp_path / "store", tmp_path / "proj"
    project.mkdir()
    home.mkdir()
    s = open_store(home / "sakur4.db")
    p = add_project(s, project)
    pin_anchor(s, p.id, "never edit generated files")
    write_receipt(
        s,
        Receipt(
            project_id=p.id,
            session="s1",
            turn=1,
            context_window=8192,
            prompt_tokens=4000,
            profile="cache-first",
            profile_reason="r",
            verdict="fits",
            cache_verdict="reused",
        ),
    )
    s.close()
    before = (home / "sakur4.db").read_bytes()
    with faults.read_only_view(home) as view:
        ro = view / "sakur4.db"
        status = sakur4(ro, project, "status", "--json")
        assert status.returncode == 0, status.stderr
        assert json.loads(status.stdout)["anchors"] == 1
        receipts = sakur4(ro, project, "receipts", "--json")
        assert receipts.returncode == 0, receipts.stderr
        assert [r["turn"] for r in json.loads(receipts.stdout)] == [1]
        anchors = sakur4(ro, project, "anchor", "list")
        assert "never edit generated files" in anchors.stdout, anchors.stderr
        doctor = sakur4(ro, project, "doctor")
        assert doctor.returncode == 1
        assert "read-only" in doctor.stdout
        write = sakur4(ro, project, "remember", "a note")
        assert write.returncode == 1
        assert "read-only" in write.stderr
        assert "Traceback" not in write.stderr
    assert (home / "sakur4.db").read_bytes() == before
