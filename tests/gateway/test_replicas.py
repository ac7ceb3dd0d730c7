"""Gateway replicas sharing sessions (issue 39 item 4), on real parts: two ``sakur4
gateway`` processes (``SAKUR4_SHARED_SESSIONS=true``) sharing one SQLite store (the
failover test also one PostgreSQL: the tests' server), in front of one real llama-server.

- A scripted session served alternately by the two, turn by turn, gets per-call plans
  and server figures identical to the same session through one gateway (no sharing).
- A replica killed (SIGKILL) after a turn: the next turn goes through the other, every
  receipt is there and closed, and the numbering goes on.
- The same session sent to both at once: one waits for the other (never two plans of
  one session at a time), and both turns are numbered and answered.

The server is ``llama_ring_cms`` (Gemma 3's checkpoint ring, ``-cms 256``, ``-cram 0``:
what it reuses follows from what it was sent, nothing swapped in behind the gateway),
its slot erased before each run so both runs start from an empty cache. The assistant
messages are the script's (the model's own answers could differ between runs); the
model answers one token, so what each call leaves in the slot is the same.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from fixtures_postgresql import PostgresServer, postgresql_server  # noqa: F401  (fixture)
from gateway_process import GatewayProcess, wait_for
from sakur4.backends.launcher import LlamaServer
from sakur4.receipts import Receipt, list_receipts
from sakur4.store import open_store
from sakur4.store.projects import ensure_project
from tracebacks import traceback_in

SESSION = "replicated"
SHARED = {"SAKUR4_SHARED_SESSIONS": "true"}
# The turns' tool output: enough that the session presses the 8k window by its last
# turns, so the plans fold (the receipts' steps) and not only extend.
TURNS = 8


def _output(i: int, lines: int) -> str:
    return "\n".join(
        f"src/module_{i}/file_{j}.py:{j * 7}: def handler_{i}_{j}(x): ..." for j in range(lines)
    )


def script(lines: int = 30) -> list[list[dict[str, Any]]]:
    """Each call's messages: a system prompt, then per turn a request, a tool call and
    its output (the harness resends the whole conversation every call)."""
    rules = " ".join(f"Rule {i}: read before you edit file {i}." for i in range(40))
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": f"You are a coding agent. {rules}"},
    ]
    calls = []
    for i in range(TURNS):
        messages.append({"role": "user", "content": f"Step {i}: find the handlers of module {i}."})
        calls.append([dict(m) for m in messages])
        call = {
            "id": f"call_{i}",
            "type": "function",
            "function": {"name": "grep", "arguments": f'{{"pattern": "def handler_{i}_"}}'},
        }
        messages.append({"role": "assistant", "content": "", "tool_calls": [call]})
        messages.append({"role": "tool", "tool_call_id": f"call_{i}", "content": _output(i, lines)})
    return calls


class Gateways:
    """Gateway processes of one test, each group sharing a store in its own directory;
    stopped at the end, and any traceback in their logs fails the test."""

    def __init__(self, where: Path) -> None:
        self.where = where
        self.started: list[GatewayProcess] = []

    def start(self, group: str, backend: str, env: dict[str, str] | None = None) -> GatewayProcess:
        home = self.where / group
        home.mkdir(exist_ok=True)
        g = GatewayProcess(home, backend, env=env)
        self.started.append(g)
        wait_for("the gateway's probe", lambda: _ready(g), timeout=300)
        return g


def _ready(g: GatewayProcess) -> bool:
    assert g.proc.poll() is None, g.said
    try:
        return httpx.get(g.url + "/health", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.fixture
def gateways(tmp_path: Path) -> Iterator[Gateways]:
    made = Gateways(tmp_path)
    yield made
    for g in made.started:
        g.stop()
    for g in made.started:
        found = traceback_in(g.said)
        if found:
            pytest.fail(f"the gateway on port {g.port} logged a traceback:\n{found}")


def _erase(server: LlamaServer) -> None:
    r = httpx.post(server.url + "/slots/0?action=erase", timeout=60)
    assert r.status_code == 200, r.text


def _send(g: GatewayProcess, messages: list[dict[str, Any]]) -> dict[str, Any]:
    r = httpx.post(
        g.url + "/v1/chat/completions",
        json={"messages": messages, "max_tokens": 1, "temperature": 0},
        headers={"X-Sakur4-Session": SESSION},
        timeout=600,
    )
    assert r.status_code == 200, r.text
    return dict(r.json())


def _receipts(home: Path, target: str | None = None) -> list[Receipt]:
    """The session's receipts in the store of the gateways in ``home`` (``target``: a
    PostgreSQL URL they were given instead of the file there)."""
    store = open_store(target or home / "store.db")
    try:
        project = ensure_project(store, home / "project")
        return sorted(
            list_receipts(store, project.id, SESSION, limit=1000), key=lambda r: r.id or 0
        )
    finally:
        store.close()


def figures(r: Receipt) -> dict[str, Any]:
    """What a call's plan and the server's work were: the same for the same plan."""
    return {
        "turn": r.turn,
        "prompt_tokens": r.prompt_tokens,
        "processed": r.server_processed,
        "reused": r.server_cached,
        "predicted_reuse": r.predicted_reuse,
        "divergence": r.divergence,
        "verdict": r.verdict,
        "requested_cut": r.requested_cut,
        "chosen_cut": r.chosen_cut,
        "steps": [(s["episode"], s["from"], s["to"], s["tokens_after"]) for s in r.steps],
        "planned": r.detail.get("planned_prompt_tokens"),
    }


@pytest.mark.backend
def test_a_session_served_alternately_by_two_replicas_plans_as_one_gateway(
    llama_ring_cms: LlamaServer, gateways: Gateways
) -> None:
    calls = script()
    one = gateways.start("one", llama_ring_cms.url)
    _erase(llama_ring_cms)
    for messages in calls:
        _send(one, messages)
    alone = [figures(r) for r in _receipts(gateways.where / "one")]

    pair = [gateways.start("pair", llama_ring_cms.url, SHARED) for _ in range(2)]
    _erase(llama_ring_cms)
    for i, messages in enumerate(calls):
        _send(pair[i % 2], messages)
    served = _receipts(gateways.where / "pair")
    alternated = [figures(r) for r in served]

    assert [f["turn"] for f in alone] == list(range(1, TURNS + 1))
    assert any(f["steps"] for f in alone), "the script never folded: it tests less than it says"
    assert alternated == alone
    # Every turn after the first was planned from the state the other replica wrote.
    rebuilt = [r.detail.get("rebuilt_from_version") for r in served]
    assert rebuilt == [None, *range(1, TURNS)], rebuilt


@pytest.mark.backend
@pytest.mark.parametrize("engine", ["sqlite", "postgresql"])
def test_a_replica_killed_after_a_turn_the_other_serves_the_next(
    llama_ring_cms: LlamaServer, gateways: Gateways, engine: str, request: pytest.FixtureRequest
) -> None:
    """On one SQLite file, and on one PostgreSQL (the tests' server, a schema of its own)."""
    target = None
    if engine == "postgresql":
        server: PostgresServer = request.getfixturevalue("postgresql_server")
        target = server.new_schema_url()
    env = {**SHARED, **({"SAKUR4_STORE": target} if target else {})}
    calls = script(lines=3)[:4]
    first, second = (gateways.start("pair", llama_ring_cms.url, env) for _ in range(2))
    _send(first, calls[0])
    _send(second, calls[1])
    _send(first, calls[2])
    first.proc.kill()  # SIGKILL: nothing is written on the way out
    first.proc.wait()
    _send(second, calls[3])
    got = _receipts(gateways.where / "pair", target)
    assert [r.turn for r in got] == [1, 2, 3, 4]
    assert all(not r.in_flight and r.server_processed is not None for r in got)
    # The last turn was planned from the state the killed replica wrote, and the server
    # reused what that turn left in the slot (the prompt up to its new messages).
    assert got[-1].detail.get("rebuilt_from_version") == 3
    assert got[-1].predicted_reuse is not None
    assert got[-1].predicted_reuse > got[2].prompt_tokens // 2
    assert (got[-1].server_cached or 0) > got[2].prompt_tokens // 2


@pytest.mark.backend
def test_one_session_sent_to_both_replicas_at_once_is_planned_one_turn_at_a_time(
    llama_ring_cms: LlamaServer, gateways: Gateways
) -> None:
    calls = script(lines=3)
    pair = [gateways.start("pair", llama_ring_cms.url, SHARED) for _ in range(2)]
    _send(pair[0], calls[0])
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        both = list(pool.map(_send, pair, [calls[1], calls[1]]))
    assert len(both) == 2
    got = _receipts(gateways.where / "pair")
    assert [r.turn for r in got] == [1, 2, 3]
    # One after the other: the later planned from the state the earlier wrote.
    assert got[2].detail.get("rebuilt_from_version") == 2
