"""bench/agents.py: the interleaving, the RAM cache's scaling, the table and its goals
(no server), and one real run of two agents through one gateway (slow tier)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from typing import Any

import agents as bench
import agents_figures as figures
import hearth
import kv_bytes
import pytest

from fixtures_llama import REAL_SETTINGS, locate_backend
from sakur4.demo.agent import ScriptedAgent
from sakur4.demo.scenario import Request

# Gemma 3 270M's GGUF metadata (the packaged model's keys that size its KV cache).
GEMMA3_270M = {
    "general.architecture": "gemma3",
    "gemma3.block_count": 18,
    "gemma3.embedding_length": 640,
    "gemma3.attention.head_count": 4,
    "gemma3.attention.head_count_kv": 1,
    "gemma3.attention.key_length": 256,
    "gemma3.attention.value_length": 256,
    "gemma3.attention.sliding_window": 512,
}


def _order(agents: Sequence[bench.Agent]) -> tuple[list[int], list[list[Request]]]:
    """The interleaved order and each agent's requests, sent to a recorder (no server)."""
    seen: list[list[Request]] = [[] for _ in agents]

    async def send(i: int, n: int, req: Request) -> Sequence[Mapping[str, Any]]:
        seen[i].append(req)
        return req.messages

    order = asyncio.run(bench.interleave([ScriptedAgent(a.session) for a in agents], send))
    return order, seen


def test_calls_interleave_round_robin_and_each_agent_keeps_its_own_order() -> None:
    agents = bench.make_agents(3, turns=2)
    order, seen = _order(agents)
    counts = [len(bench.dry_requests(a.session)) for a in agents]
    assert [len(s) for s in seen] == counts  # every call of every agent, once
    # Round-robin: while every agent has calls left, one of each in turn; after that the
    # agents still going, in turn.
    expected: list[int] = []
    left = list(counts)
    while any(left):
        for i in range(len(left)):
            if left[i]:
                expected.append(i)
                left[i] -= 1
    assert order == expected
    for a, reqs in zip(agents, seen, strict=True):
        assert [bench.plain(r.messages) for r in reqs] == bench.dry_requests(a.session)


def test_agents_have_heads_of_their_own() -> None:
    agents = bench.make_agents(4, turns=2)
    assert [a.name for a in agents] == [
        "agent1-main",
        "agent2-reviewer",
        "agent3-tester",
        "agent4-searcher",
    ]
    systems = [a.session.system for a in agents]
    assert len(set(systems)) == 4
    # No two heads share a first line: their prompts diverge at the system prompt.
    assert len({s.splitlines()[0] for s in systems}) == 4
    assert {t["function"]["name"] for t in agents[1].session.tools} == set(bench.ROLES[1].tools)
    assert len(agents[0].session.tools) > len(agents[1].session.tools)


def test_the_said_answer_is_what_the_agent_sends_back() -> None:
    (agent,) = bench.make_agents(1, turns=2)
    reqs = bench.dry_requests(agent.session)
    turn0 = agent.session.turns[0]
    # After the turn's first call comes a tool call (content ""), after its last one
    # the scripted answer; after the session's last call, nothing.
    assert bench.next_said(reqs, 0) == ""
    assert bench.next_said(reqs, len(turn0.steps)) == turn0.answer
    assert bench.next_said(reqs, len(reqs) - 1) == ""
    body = json.dumps(
        {"choices": [{"message": {"role": "assistant", "content": "xy", "tool_calls": [1]}}]}
    ).encode()
    message = json.loads(hearth.said_answer(body, "the answer"))["choices"][0]["message"]
    assert message == {"role": "assistant", "content": "the answer"}


def test_the_ram_cache_is_scaled_to_hold_two_sessions() -> None:
    shape = kv_bytes.kv_shape(GEMMA3_270M)
    # 3 of 18 layers keep every token, 15 keep 512 + 512 (n_ubatch) cells; 1 KV head of
    # 256 + 256 at 2 bytes: 1,024 bytes a layer and token.
    assert (shape.per_token_full, shape.per_token_swa, shape.swa_cells) == (3072, 15360, 1024)
    assert shape.state_bytes(4000, swa_full=True) == 18432 * 4000
    # Without --swa-full: the global layers' tokens, the window, and the checkpoint (a
    # copy of the window) the saved prompt carries: 1,300 tokens -> 33.8 MiB (measured:
    # 32.5-34.3 MiB at 1.0-1.6k tokens).
    assert shape.state_bytes(4000, swa_full=False) == 3072 * 4000 + 2 * 15360 * 1024
    assert round(shape.state_bytes(1300, swa_full=False) / 2**20, 1) == 33.8
    s = kv_bytes.ram_scaling(shape, 4000, swa_full=True)
    assert s.cram_mib == 141  # ceil(2 x 73,728,000 / 1,048,576 = 140.6)
    assert 2.0 <= s.sessions_held < 2.01
    text = s.describe()
    assert "-cram 141 MiB holds 2.0" in text
    assert "149,796 tokens = 2.3 sessions of 66k" in text  # 8 GiB / 57,344 bytes a token
    tiny = kv_bytes.kv_shape(
        {
            "general.architecture": "llama",
            "llama.block_count": 4,
            "llama.embedding_length": 128,
            "llama.attention.head_count": 4,
            "llama.attention.head_count_kv": 2,
        }
    )
    assert (tiny.per_token_full, tiny.swa_cells) == (1024, 0)  # 4 x 2 x (32 + 32) x 2
    assert kv_bytes.ram_scaling(tiny, 4000, swa_full=False).cram_mib == 8


def _run(strategy: str, processed: list[list[int]], **kw: Any) -> figures.Run:
    """A kept run of len(processed) agents, call i of agent a processing processed[a][i]
    of 1,000-token prompts, interleaved round-robin."""
    calls = []
    n = 0
    for i in range(max(len(p) for p in processed)):
        for a, p in enumerate(processed):
            if i < len(p):
                session = kw.get("sessions", {}).get(n, f"agent{a + 1}")
                calls.append(figures.Call(a, n, i, 0, 1000, 1000 - p[i], p[i], session=session))
                n += 1
    spec = figures.RunSpec("full", "default", 1, strategy, 4096, 8, kw.get("restart_at"))
    return figures.Run(spec, [f"agent{a + 1}" for a in range(len(processed))], calls)


def test_the_table_and_goals_state_each_figure() -> None:
    runs = [
        _run("straight", [[1000, 1000], [1000, 1000]]),
        _run("sakur4", [[1000, 50], [1000, 100]]),
    ]
    text = figures.table(runs)
    rows = text.splitlines()
    assert rows[0].startswith("| model | mode | -np | -cram MiB | strategy | a1 reuse | a2 reuse")
    # The ceiling: each agent's first 1,000 processed, its second call's (no new tokens)
    # reused in full.
    assert (
        "| (ceiling) | 50.0% | 50.0% | 4,000 | 2,000 | 2,000 | 50.0% | 0.50x | - | - |" in rows[2]
    )
    assert "| straight | 0.0% | 0.0% | 4,000 | 0 | 4,000 | 0.0% | 1.00x | 0 | - |" in rows[3]
    assert "| sakur4 | 47.5% | 45.0% | 4,000 | 1,850 | 2,150 | 46.2% | 0.54x | 0 | - |" in rows[4]
    g = figures.goals(runs)
    assert "straight: every agent reuses >= 90%: lowest 0.0% (ceiling 50.0%) -> MISSED" in " ".join(
        g
    )
    assert "2,150 / 4,000 = 0.54x -> MISSED" in " ".join(g)
    assert g[-2] == "zero failed turns: 0 failed -> met"
    assert g[-1].endswith("0 of 4 did not -> met")


def test_an_answer_from_another_session_is_a_missed_goal() -> None:
    run = _run("sakur4", [[1000, 10], [1000, 10]], sessions={3: "agent1"})
    assert [c.index for c in figures.wrong_sessions(run)] == [3]
    assert figures.goals([run])[-1].endswith("1 of 4 did not -> MISSED")


def test_a_restart_counts_what_the_first_call_after_it_processed_again() -> None:
    # Restart before call 4: each agent held its 1,000-token prompt. Agent 1's next call
    # (1,200 tokens, 200 new) processed 1,200: all it held again. Agent 2's (1,300, 300
    # new) processed 305: 5 of what it held again.
    run = _run("straight", [[1000, 10], [1000, 10]], restart_at=4)
    run.calls += [
        figures.Call(0, 4, 2, 0, 1200, 0, 1200, session="agent1"),
        figures.Call(1, 5, 2, 0, 1300, 995, 305, session="agent2"),
    ]
    res = figures.resumes(run)
    assert [(r.agent, r.held, r.reprocessed) for r in res] == [(0, 1000, 1000), (1, 1000, 5)]
    # The ceiling processes each agent's first prompt and its new tokens only.
    assert [a.processed for a in figures.ceiling(run)] == [1200, 1300]
    assert "1,005 / 2,000 (50.2%)" in figures.table([run])
    assert "1,005 of 2,000 = 50.2% -> MISSED" in " ".join(figures.goals([run]))


def test_the_gguf_reader_reads_the_packaged_models_kv_shape() -> None:
    _, model = locate_backend(REAL_SETTINGS, require=False)
    meta = kv_bytes.gguf_metadata(model)
    shape = kv_bytes.kv_shape(meta)
    assert meta["general.architecture"] == "gemma3"
    assert (shape.per_token_full, shape.per_token_swa, shape.swa_cells) == (3072, 15360, 1024)


def test_two_agents_through_one_gateway_each_answer_is_its_own_session(
    request: pytest.FixtureRequest,
) -> None:
    """Real llama-server (-np 2) and a real gateway: 2 agents x 2 turns interleaved, every
    call answered, and every answer's receipt names the agent that sent it."""
    _, model = locate_backend(
        REAL_SETTINGS, require=bool(request.config.getoption("--require-backend"))
    )
    assert REAL_SETTINGS is not None
    agents = bench.make_agents(2, turns=2)
    spec = figures.RunSpec("swa", "advice", 2, "sakur4", 4096, 0, None)
    run = asyncio.run(bench.run_one(spec, agents, REAL_SETTINGS, model, lambda _: None))
    assert [c.failed for c in run.calls] == [None] * len(run.calls)
    assert [c.session for c in run.calls] == [agents[c.agent].name for c in run.calls]
    assert figures.wrong_sessions(run) == []
    counts = [len(bench.dry_requests(a.session)) for a in agents]
    assert all(sum(c.agent == i for c in run.calls) >= n for i, n in enumerate(counts))
    assert all(c.prompt_tokens > 0 for c in run.calls)
