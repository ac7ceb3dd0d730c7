"""A removal plan on a real KV-shifting llama-server (issue 40 item 5).

``--swa-full --cache-reuse 256``: the probe finds ``kv-shift``, the gateway plans with
ShiftFirst, and old turns leave the prompt whole. The same scripted session, run twice
on a fresh server each time through the gateway, sends byte-identical prompts and gets
byte-identical answers (the plan depends on nothing but the session and the server's
figures), and the server reports reusing text past where the prompt changed: it
shifted the kept runs into place, as the receipts say.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest

from fixtures_llama import REAL_SETTINGS, locate_backend
from sakur4.backends.launcher import LlamaServer, ServerFlags
from sakur4.demo.compare import Mode, Strategy, run_strategy
from sakur4.demo.records import StrategyRun
from sakur4.demo.script import PRESETS, generate
from sakur4.settings import Settings

WINDOW = 4096
CHAT = "/v1/chat/completions"


class Recording(httpx.AsyncBaseTransport):
    """The real server's transport, keeping every chat call's body and answer.

    No connection is kept alive: the gateway's calls run on its own event loop, closed
    before this test could close a pooled connection."""

    def __init__(self) -> None:
        self.inner = httpx.AsyncHTTPTransport(limits=httpx.Limits(max_keepalive_connections=0))
        self.calls: list[tuple[bytes, dict[str, Any]]] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self.inner.handle_async_request(request)
        if request.url.path != CHAT:
            return response
        body = await response.aread()
        await response.aclose()
        self.calls.append((request.content, json.loads(body)))
        return httpx.Response(response.status_code, headers=response.headers, content=body)

    async def aclose(self) -> None:
        return None  # the gateway's probe closes it; its chat client goes on using it


def _run(
    request: pytest.FixtureRequest, tmp_path: Path, name: str
) -> tuple[StrategyRun, Recording]:
    binary, model = locate_backend(
        REAL_SETTINGS, require=bool(request.config.getoption("--require-backend"))
    )
    flags = ServerFlags(ctx=WINDOW, swa_full=True, cache_reuse=256, server_template=True)
    where = tmp_path / name
    where.mkdir()
    recording = Recording()
    session = generate(replace(PRESETS["demo"], turns=7))

    async def replay(url: str) -> StrategyRun:
        return await run_strategy(
            Strategy("sakur4", "sakur4"),
            url,
            session,
            settings=Settings.load(store=where / "sakur4.db"),
            mode=Mode("cache-reuse", "cache-reuse", flags),
            summary_tokens=16,
            workdir=where,
            transport=recording,
        )

    log = where / "server.log"
    with LlamaServer(binary, model, flags, log_path=log, die_with_parent=True) as server:
        run = asyncio.run(replay(server.url))
    return run, recording


@pytest.mark.backend
def test_a_removal_plan_on_a_kv_shifting_server_keeps_byte_identical_runs(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    first, calls = _run(request, tmp_path, "first")
    second, again = _run(request, tmp_path, "second")
    assert first.profile == "shift-first"
    assert first.failed_turns == 0
    # Byte-identical: every prompt the gateway sent, and every answer.
    assert [body for body, _ in calls.calls] == [body for body, _ in again.calls]
    answers = [[c["message"] for c in a["choices"]] for _, a in calls.calls]
    assert answers == [[c["message"] for c in a["choices"]] for _, a in again.calls]
    assert [r.processed for r in first.records] == [r.processed for r in second.records]
    # Old turns left whole (straight to archived), and the server shifted what followed:
    # it reused text past where the prompt first changed, and the receipt says how much.
    receipts = first.detail["receipts"]
    removals = [
        r
        for r in receipts
        if any(s["to"] == "archived" and s["from"] == "live" for s in r["steps"])
    ]
    assert removals, [r["detail"]["reason"] for r in receipts]
    shifted = [r for r in removals if r["detail"].get("shifted")]
    assert shifted, [(r["divergence"], r["server_cached"]) for r in removals]
    for r in shifted:
        assert r["server_cached"] == r["divergence"] + r["detail"]["shifted"]
        assert r["server_cached"] > r["divergence"]
