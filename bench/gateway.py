"""The gateway's own time per turn at 10k / 56k / 100k-token conversations, beside
llama-server's own apply-template + tokenize of the same prompt (the floor).

    nice -n 10 .venv/bin/python bench/gateway.py [--sizes 10000 56000 100000] [--turns 6]

The instant-backend arrangement: a real llama-server (the set-up's, started here on
loopback) answers ``/apply-template`` and ``/tokenize``; ``/v1/chat/completions`` is
answered at once by an in-process httpx transport, so what a turn costs is the
gateway's work and the layout calls it makes to the server, nothing of prefill.

Per size: a fresh store and gateway; the conversation's first sight (one request
carrying all of it), then ``--turns`` turns, each adding a user message, an assistant tool
call and its result, as an agent loop does. The floor is timed on each turn's rendered request
in the same run: ``/apply-template`` of the messages the gateway sends plus
``/tokenize`` of that prompt, what the server itself does with a chat request.

First sight is timed twice: *cold*, the fresh gateway above (no token pieces known), and
*warm*, another fresh gateway that has first seen a different conversation (other
system prompt, other text and code, ~37k tokens; never the measured one), so it knows
the pieces that one taught it and asks the server for the ones it does not.

Goals (issue 17), at the largest size: added time per turn <= 0.05x the floor; the
first sight <= 1.5x the floor; the time per turn within 1.5x of the smallest size's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from sakur4.backends.launcher import LlamaServer, ServerFlags
from sakur4.backends.llamacpp import LlamaCppClient
from sakur4.probe import ProbeResult
from sakur4.settings import Settings
from sakur4.store import Store, open_store
from sakur4.store.projects import Project, ensure_project
from sakur4.turns.pipeline import TurnPipeline

WINDOW = 262_144  # large enough that no size here is under pressure from the window
SYSTEM = "\n".join(
    f"Rule {i}: when a tool fails, read its error, fix the cause, and say what changed "
    f"(case {i * 7 % 13})."
    for i in range(120)
)
ANSWER = {
    "id": "chatcmpl-instant",
    "object": "chat.completion",
    "model": "instant",
    "choices": [
        {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "ok"}}
    ],
    "usage": {"completion_tokens": 1},
}


def tool_result(i: int) -> str:
    body = "\n".join(
        f"    value_{i}_{j} = compute_{j % 7}(row[{j}], scale={j * i % 97}, label='item {j}')"
        for j in range(24)
    )
    return (
        f"# module_{i}.py\nimport math\n\n\ndef handler_{i}(row):\n{body}\n    return value_{i}_0\n"
    )


def step(i: int) -> list[dict[str, Any]]:
    """One agent step: the user asks, the assistant calls a tool, the tool answers."""
    call = {
        "id": f"call_{i}",
        "type": "function",
        "function": {"name": "read_file", "arguments": json.dumps({"path": f"module_{i}.py"})},
    }
    return [
        {"role": "user", "content": pasted(i)},
        {"role": "assistant", "content": f"Reading module_{i}.py.", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": f"call_{i}", "content": tool_result(i)},
    ]


def pasted(i: int) -> str:
    """A user message with pasted code: user text stays Live, so it is the bulk of a long
    prompt once the tool results behind it are folded."""
    lines = "\n".join(
        f"    total_{j} = sum(row.amount * {j % 9 + 1} for row in batch_{i} if row.flag_{j % 4})"
        for j in range(28)
    )
    code = f"```python\ndef reconcile_{i}(batch_{i}):\n{lines}\n```"
    return f"Step {i}: the totals drift again here:\n{code}\nWhat changed?"


def other_step(i: int) -> list[dict[str, Any]]:
    """A step of a different conversation (for the warm first sight): a failing export
    job, its SQL and log lines, nothing of the measured conversation's text."""
    region = ("eu-north", "us-east", "ap-south")[i % 3]
    logs = "\n".join(
        f"2026-11-{i % 28 + 1:02d}T0{j % 10}:{j * 7 % 60:02d}Z WARN export[{region}] "
        f"batch {i * 31 + j} retried after {j % 5 + 1}s: connection reset by peer"
        for j in range(12)
    )
    call = {
        "id": f"q_{i}",
        "type": "function",
        "function": {"name": "run_query", "arguments": json.dumps({"region": region})},
    }
    rows = "\n".join(
        f"| {i * 100 + j} | {region} | {(j * 37) % 1000} rows | failed={j % 3 == 0} |"
        for j in range(16)
    )
    return [
        {"role": "user", "content": f"Ticket {i}: the nightly export keeps failing.\n{logs}"},
        {"role": "assistant", "content": "Checking the job table.", "tool_calls": [call]},
        {
            "role": "tool",
            "tool_call_id": f"q_{i}",
            "content": f"SELECT id, region, size, failed FROM export_jobs;\n{rows}",
        },
    ]


def other_conversation(steps: int) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": "You are an on-call assistant for a data platform."},
        {"role": "user", "content": "Why do the exports fail since Tuesday?"},
    ]
    for i in range(steps):
        msgs += other_step(i)
    return msgs


def conversation(steps: int) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "Find why handler totals drift and fix it."},
    ]
    for i in range(steps):
        msgs += step(i)
    return msgs


@dataclass
class Calls:
    """Time and count of the layout calls the gateway made to the real server."""

    ms: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    n: dict[str, int] = field(default_factory=lambda: defaultdict(int))

    def reset(self) -> None:
        self.ms.clear()
        self.n.clear()


class InstantChat(httpx.AsyncBaseTransport):
    """Chat completions answered at once; every other request goes to the real server."""

    def __init__(self, calls: Calls) -> None:
        self.real = httpx.AsyncHTTPTransport()
        self.calls = calls

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path == "/v1/chat/completions":
            return httpx.Response(200, json=ANSWER)
        t0 = time.perf_counter()
        r = await self.real.handle_async_request(request)
        content = b"".join([chunk async for chunk in r.stream])
        await r.aclose()
        self.calls.ms[path] += (time.perf_counter() - t0) * 1000
        self.calls.n[path] += 1
        return httpx.Response(r.status_code, headers=r.headers, content=content)

    async def aclose(self) -> None:
        await self.real.aclose()


def probe_result(url: str) -> ProbeResult:
    return ProbeResult(
        url=url,
        probed_at="bench",
        kind="llama.cpp",
        version=None,
        model=None,
        n_ctx=WINDOW,
        n_ctx_train=None,
        total_slots=1,
        slot_actions="unsupported",
        exact_tokenization=True,
        reuse_verifiable=True,
        reuse_field="timings.cache_n",
        checkpoint_source="checkpoint-ring",
        sources=(),
        reason="bench",
        experiment=(),
        prefill_tokens_per_s=None,
        advice=(),
    )


@dataclass
class Row:
    size: int
    tokens: int
    messages: int
    first_ms: float
    first_floor_ms: float
    first_calls: str
    warm_ms: float
    warm_floor_ms: float
    warm_calls: str
    turn_ms: list[float]
    floor_ms: list[float]
    turn_calls: list[str]
    turn_cpu: list[float]  # this process's CPU ms a turn: the gateway's own work only

    @property
    def turn(self) -> float:
        return statistics.median(self.turn_ms)

    @property
    def floor(self) -> float:
        return statistics.median(self.floor_ms)


async def floor(client: LlamaCppClient, body: dict[str, Any]) -> tuple[float, int]:
    """The server's own work for this request: render it, tokenize the prompt."""
    request = {k: v for k, v in body.items() if k not in ("stream", "stream_options")}
    t0 = time.perf_counter()
    prompt = await client.apply_template(request)
    tokens = await client.tokenize(prompt, add_special=True)
    return (time.perf_counter() - t0) * 1000, len(tokens)


def pieces(gw: TurnPipeline) -> Counter[str]:
    """How the gateway's layouts got token pieces so far (a tree without the cache: none)."""
    return Counter(getattr(gw.layouts, "piece_calls", {}))


def described(calls: Calls) -> str:
    parts = [f"{p.strip('/')} {calls.n[p]}x {calls.ms[p]:.0f} ms" for p in sorted(calls.n)]
    return ", ".join(parts) or "no server calls"


async def one_size(url: str, size: int, turns: int, work: Path) -> Row:
    plain = LlamaCppClient(url, timeout=600)
    calls = Calls()
    transport = InstantChat(calls)
    # Steps enough for ``size`` prompt tokens: tool results are folded once answered,
    # so a step's share of the prompt is mostly its user message.
    per_step = len(await plain.tokenize(pasted(size // 1000))) + 110
    head = len(await plain.tokenize(SYSTEM)) + 400
    steps = max(1, (size - head) // per_step - turns // 2)  # the turns add the rest
    settings = Settings.load()
    stores: list[Store] = []
    try:
        async with LlamaCppClient(url, timeout=600, transport=transport) as client:
            cpu: list[float] = []

            async def run(
                gw: tuple[TurnPipeline, Project],
                messages: list[dict[str, Any]],
                session: str = "bench",
            ) -> tuple[float, dict[str, Any]]:
                calls.reset()
                t0, c0 = time.perf_counter(), time.process_time()
                async with gw[0].turn({"messages": messages}, gw[1], session) as t:
                    _, t.outcome = await gw[0].sender.chat(t.prepared)
                cpu.append((time.process_time() - c0) * 1000)
                return (time.perf_counter() - t0) * 1000, t.prepared.body

            def gateway(name: str) -> tuple[TurnPipeline, Project]:
                store = open_store(work / f"store-{size}-{name}.db")
                stores.append(store)
                gw = TurnPipeline(settings, store, client, probe_result(url))
                return gw, ensure_project(store, work)

            msgs = conversation(steps)
            # Warm: a gateway that has seen a different conversation first.
            warm_gw = gateway("warm")
            await run(warm_gw, other_conversation(40), "other")
            seen = pieces(warm_gw[0])
            warm_ms, body = await run(warm_gw, msgs)
            warm_calls = described(calls) + f"; pieces: {dict(pieces(warm_gw[0]) - seen)}"
            warm_floor, _ = await floor(plain, body)
            # Cold: a fresh gateway, then the turns.
            gw = gateway("cold")
            cpu.clear()
            first_ms, body = await run(gw, msgs)
            first_calls = described(calls) + f"; pieces: {dict(pieces(gw[0]))}"
            first_floor, tokens = await floor(plain, body)
            turn_ms, floor_ms, turn_calls = [], [], []
            for k in range(turns):
                msgs = msgs + step(steps + k)
                ms, body = await run(gw, msgs)
                turn_ms.append(ms)
                turn_calls.append(described(calls))
                f, tokens = await floor(plain, body)
                floor_ms.append(f)
            return Row(
                size,
                tokens,
                len(msgs),
                first_ms,
                first_floor,
                first_calls,
                warm_ms,
                warm_floor,
                warm_calls,
                turn_ms,
                floor_ms,
                turn_calls,
                cpu[1:],
            )
    finally:
        await plain.aclose()
        for store in stores:
            store.close()


def verdict(ok: bool) -> str:
    return "met" if ok else "MISSED"


async def main(sizes: list[int], turns: int) -> None:
    flags = ServerFlags(ctx=4096, threads=1)
    with LlamaServer.from_settings(Settings.load(), flags) as server:
        rows = []
        with tempfile.TemporaryDirectory(prefix="sakur4-bench-gateway-") as tmp:
            for size in sizes:
                row = await one_size(server.url, size, turns, Path(tmp))
                rows.append(row)
                print(
                    f"{row.tokens:>7,} tokens, {row.messages} messages: "
                    f"first sight {row.first_ms:,.0f} ms (floor {row.first_floor_ms:,.0f} ms, "
                    f"{row.first_ms / row.first_floor_ms:.2f}x; {row.first_calls}); "
                    f"warm first sight {row.warm_ms:,.0f} ms (floor {row.warm_floor_ms:,.0f} ms, "
                    f"{row.warm_ms / row.warm_floor_ms:.2f}x; {row.warm_calls}); "
                    f"per turn median {row.turn:.1f} ms "
                    f"[{', '.join(f'{t:.0f}' for t in row.turn_ms)}] (floor {row.floor:,.0f} ms, "
                    f"{row.turn / row.floor:.3f}x; gateway CPU "
                    f"{statistics.median(row.turn_cpu):.1f} ms); last turn: {row.turn_calls[-1]}",
                    flush=True,
                )
    small, big = rows[0], rows[-1]
    print()
    print(f"goals at {big.tokens:,} tokens (floor: the server's apply-template + tokenize):")
    ratio = big.turn / big.floor
    print(
        f"  added time per turn <= 0.05x floor: {big.turn:.1f} ms / {big.floor:,.0f} ms "
        f"= {ratio:.3f}x  {verdict(ratio <= 0.05)}"
    )
    for name, ms, floor_ms in (
        ("cold", big.first_ms, big.first_floor_ms),
        ("warm", big.warm_ms, big.warm_floor_ms),
    ):
        ratio = ms / floor_ms
        print(
            f"  first sight ({name}) <= 1.5x floor: {ms:,.0f} ms / {floor_ms:,.0f} ms "
            f"= {ratio:.2f}x  {verdict(ratio <= 1.5)}"
        )
    cpu_big, cpu_small = (statistics.median(r.turn_cpu) for r in (big, small))
    print(
        f"  (the gateway's own CPU per turn, load-independent: {cpu_big:.1f} ms at "
        f"{big.tokens:,} tokens, {cpu_small:.1f} ms at {small.tokens:,}: "
        f"{cpu_big / cpu_small:.2f}x)"
    )
    ratio = big.turn / small.turn
    print(
        f"  per turn within 1.5x of {small.tokens:,} tokens': {big.turn:.1f} / {small.turn:.1f} ms "
        f"= {ratio:.2f}x  {verdict(ratio <= 1.5)}"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 56_000, 100_000])
    parser.add_argument("--turns", type=int, default=6)
    args = parser.parse_args()
    asyncio.run(main(args.sizes, args.turns))
