"""Parked sessions on the real llama-server (issue 37): interleaved sessions on one slot,
a server killed and started again, a slot file that cannot be restored, a server started
another way, and owner-only files. (The cap, the choice of slot and the property that no
session is served another's state: tests/turns/test_parking.py.)

The server is the packaged Gemma 3 270M under ``--swa-full`` (a restored state resumes
at any divergence, as full attention does: docs/design/backends.md, "Slot files,
measured for the scheduler"), ``-np 1``, ``--slot-save-path``, and ``-cram 0``: no RAM
prompt cache swaps states in behind the gateway's back, so what a switch keeps is the
scheduler's doing. Every figure asserted is the server's own (``timings``) or the
receipt's.
"""

from __future__ import annotations

import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from fixtures_llama import REAL_SETTINGS, locate_backend
from sakur4.backends.launcher import LlamaServer, ServerFlags
from sakur4.receipts import list_receipts
from sakur4.store import open_store
from sakur4.store.projects import ensure_project


def _flags(slots: Path, ctx: int = 4096, swa_full: bool = True) -> ServerFlags:
    return ServerFlags(ctx=ctx, swa_full=swa_full, slot_save_path=slots, cache_ram=0)


@pytest.fixture
def parked_server(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[LlamaServer]:
    """A llama-server of the test's own that writes slot files (started; may be restarted)."""
    binary, model = locate_backend(
        REAL_SETTINGS, require=bool(request.config.getoption("--require-backend"))
    )
    slots = tmp_path / "slots"
    slots.mkdir()
    server = LlamaServer(binary, model, _flags(slots), log_path=tmp_path / "ls.log")
    server.start()
    yield server
    server.stop()


def _agent(name: str) -> list[dict[str, Any]]:
    """An agent's opening: its own long system prompt (~700 tokens), then a request."""
    rules = " ".join(f"Rule {i} of the {name} agent: keep file {i} as it is." for i in range(50))
    return [
        {"role": "system", "content": f"You are the {name} agent. {rules}"},
        {"role": "user", "content": f"{name}: list the files."},
    ]


def _turn(gw: Any, messages: list[dict[str, Any]], session: str) -> httpx.Response:
    r = httpx.post(
        gw.url + "/v1/chat/completions",
        json={"messages": messages, "max_tokens": 4, "temperature": 0},
        headers={"X-Sakur4-Session": session},
        timeout=300,
    )
    assert r.status_code == 200, r.text
    messages.append({"role": "assistant", "content": r.json()["choices"][0]["message"]["content"]})
    messages.append({"role": "user", "content": f"{session}: and the next one?"})
    return r


def _receipts(gw: Any, session: str) -> list[Any]:
    store = open_store(gw.store)
    try:
        project = ensure_project(store, gw.project)
        found = list_receipts(store, project.id, session=session, limit=100)
        return sorted(found, key=lambda r: r.id)  # oldest first
    finally:
        store.close()


def _slot(r: Any) -> dict[str, Any]:
    return dict(r.detail.get("parking") or {})


def _settle(gw: Any) -> None:
    """Wait until the gateway's background saves are written (its /health answers after
    the event loop ran them; the files are checked on disk)."""
    httpx.get(gw.url + "/health", timeout=60)


@pytest.mark.backend
def test_interleaved_sessions_on_one_slot_resume_from_their_parked_state(
    parked_server: LlamaServer, gateways: Any, tmp_path: Path
) -> None:
    gw = gateways.start(parked_server.url)
    a, b = _agent("coder"), _agent("reviewer")
    _turn(gw, a, "coder")
    _turn(gw, b, "reviewer")  # the coder is parked
    second_a = _turn(gw, a, "coder")
    second_b = _turn(gw, b, "reviewer")
    for session, answer in (("coder", second_a), ("reviewer", second_b)):
        timings = answer.json()["timings"]
        last = _receipts(gw, session)[-1]
        assert _slot(last).get("restored_tokens", 0) > 600, last.detail
        # Only what is new since its last turn is processed: the system prompt and the
        # first exchange come back from its file.
        assert timings["prompt_n"] < 60, timings
        assert timings["cache_n"] > 600, timings
    # Each file owner-only, named without the session's name, one per session.
    files = sorted((tmp_path / "slots").glob("sakur4-state-*.bin"))
    assert len(files) == 2, files
    for f in files:
        assert stat.S_IMODE(f.stat().st_mode) == 0o600, f
        assert "coder" not in f.name
        assert "reviewer" not in f.name


@pytest.mark.backend
def test_a_restarted_server_resumes_each_session_from_disk_unless_started_another_way(
    parked_server: LlamaServer, gateways: Any, tmp_path: Path
) -> None:
    slots = tmp_path / "slots"
    gw = gateways.start(parked_server.url)
    a, b = _agent("coder"), _agent("tester")
    first_a = _turn(gw, a, "coder")
    _turn(gw, b, "tester")
    held = first_a.json()["timings"]["prompt_n"] + first_a.json()["timings"]["cache_n"]
    _settle(gw)
    parked_server.stop(grace=0)  # killed (SIGKILL at once): nothing is saved on the way out
    parked_server.start()  # same flags, same directory, same port
    after = _turn(gw, a, "coder")
    timings = after.json()["timings"]
    last = _receipts(gw, "coder")[-1]
    assert _slot(last).get("restored_tokens", 0) >= held, last.detail
    assert timings["cache_n"] >= held, timings
    assert timings["prompt_n"] < 60, timings  # its new tokens only

    # Started another way (another window): the old states are ignored, and it is said.
    _settle(gw)
    parked_server.stop()
    parked_server.flags = _flags(slots, ctx=2048)
    parked_server.start()
    answer = _turn(gw, b, "tester")
    last = _receipts(gw, "tester")[-1]
    assert "saved by another server" in _slot(last).get("ignored", ""), last.detail
    assert "restored_tokens" not in _slot(last)
    assert answer.json()["timings"]["cache_n"] < 100


@pytest.mark.backend
def test_a_slot_file_that_cannot_be_restored_is_re_processed_and_said(
    parked_server: LlamaServer, gateways: Any, tmp_path: Path
) -> None:
    gw = gateways.start(parked_server.url)
    a, b = _agent("coder"), _agent("searcher")
    _turn(gw, a, "coder")
    _settle(gw)
    coder_files = list((tmp_path / "slots").glob("sakur4-state-*.bin"))
    assert len(coder_files) == 1
    _turn(gw, b, "searcher")  # the coder is parked
    coder_files[0].write_bytes(b"not a slot state")
    answer = _turn(gw, a, "coder")  # the turn is served all the same
    last = _receipts(gw, "coder")[-1]
    assert "restore_failed" in _slot(last), last.detail
    assert "re-processed instead" in _slot(last)["restore_failed"]
    assert not last.detail.get("failed")
    assert answer.json()["timings"]["cache_n"] < 100  # the whole prompt again
    # The next switch back works again: a good file was written after that answer.
    _turn(gw, b, "searcher")
    _turn(gw, a, "coder")
    assert _slot(_receipts(gw, "coder")[-1]).get("restored_tokens", 0) > 600
