"""A real router in front of two servers (issue 39 item 5): what Sakur4's sessions
process through vLLM's router beside the same sessions each alone on a server.

    nice -n 10 .venv/bin/python bench/router.py [--agents 4] [--turns 4] [--policy consistent_hash]

K agents (bench/agents.py's: a main session and subagents, each a generated demo
session) run interleaved round-robin through one Sakur4 gateway, each its own session
(``X-Sakur4-Session``), in front of ``vllm-router`` 0.1.17 (the test extra's) with
``--policy`` in front of two llama-server workers of the packaged model. The gateway
sends each session's routing key in ``X-Session-ID`` (its default routing headers),
which ``consistent_hash`` hashes; ``cache_aware`` routes by the prompt's text.
Baseline, measured in the same run: each agent's session alone through a gateway of its
own on a fresh server of its own (no router, nothing else on the server).

Each worker has K slots of ``--window`` tokens (``-np K -c K×window``): the gateway
assigns each session the least-used slot as if one server had them all, so with K
slots no two sessions share a slot on whichever worker they land (with fewer, two
sessions on one worker could share a slot and evict each other, which is the slot
count's doing, not the router's). The baseline's server has one slot of ``--window``.

Figures, from the servers' own counts: processed tokens (``timings.prompt_n`` of every
answer) through the router beside alone, and their ratio (goal <= 1.05x); per session
the share of its calls on its most-used worker, read from each worker's ``/metrics``
before and after every call (goal 100 %). The output is written to
bench/out/router-<policy>-k<K>-t<turns>.md.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path

import httpx
from agents import OUT, Agent, make_agents, run_sakur4  # bench/
from agents_figures import Call  # bench/
from processes import answering, stoppable  # bench/

from sakur4.backends.launcher import (
    LlamaServer,
    ServerFlags,
    ensure_model,
    find_llama_server,
    free_port,
)
from sakur4.probe import last_stored
from sakur4.settings import Settings

ROUTER = Path(sys.executable).parent / "vllm-router"
POLICIES = ("consistent_hash", "cache_aware")
DECODED = "llamacpp:n_decode_total"  # grows only on the worker that ran a call


def counters(url: str) -> dict[str, float]:
    """A worker's --metrics counters, read from the worker itself."""
    out: dict[str, float] = {}
    for line in httpx.get(url + "/metrics", timeout=10).text.splitlines():
        name, _, value = line.partition(" ")
        if name.startswith("llamacpp:") and value:
            out[name] = float(value)
    return out


@contextmanager
def router(workers: Sequence[str], policy: str, log: Path) -> Iterator[str]:
    """``vllm-router`` on loopback in front of ``workers``; its URL, until the block exits."""
    port = free_port()
    cmd = [
        str(ROUTER),
        *("--host", "127.0.0.1", "--port", str(port), "--policy", policy),
        *("--worker-urls", *workers),
        *("--prometheus-host", "127.0.0.1", "--prometheus-port", str(free_port())),
        *("--worker-startup-check-interval", "1", "--log-level", "warning"),
    ]
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    with answering(proc, log, url + "/health", "vllm-router", 60.0, 0.2):
        yield url


def probed(work: Path, url: str) -> str:
    """What the gateway's probe found of ``url`` (its checkpoint source): the cache
    experiment's requests carry no session key, so a router may split them."""
    found = last_stored(work / "gw" / "sakur4.db", url)
    return found.checkpoint_source if found is not None else "(no probe stored)"


async def routed_run(
    agents: Sequence[Agent], settings: Settings, a: argparse.Namespace, work: Path
) -> tuple[list[Call], list[int | None], str]:
    """All agents interleaved through one gateway, the router and two workers: the calls,
    for each the worker whose counters moved (None: not exactly one), and the probe's
    checkpoint source."""
    k = len(agents)
    flags = ServerFlags(ctx=a.window * k, parallel=k)
    binary, model = find_llama_server(settings), ensure_model(settings)
    served: list[int | None] = []
    with ExitStack() as stack:
        workers = [
            stack.enter_context(LlamaServer(binary, model, flags, log_path=work / f"w{i}.log"))
            for i in range(2)
        ]
        url = stack.enter_context(router([w.url for w in workers], a.policy, work / "router.log"))
        snapshot: list[list[dict[str, float]]] = [[]]

        async def before(n: int) -> None:
            snapshot[0] = [counters(w.url) for w in workers]

        def progress(c: Call) -> None:
            now = [counters(w.url) for w in workers]
            moved = [
                i
                for i, (b, n) in enumerate(zip(snapshot[0], now, strict=True))
                if n[DECODED] > b[DECODED]
            ]
            served.append(moved[0] if len(moved) == 1 else None)

        calls = await run_sakur4(url, agents, before, settings, work / "gw", progress)
        return calls, served, probed(work, url)


async def alone_run(
    agent: Agent, settings: Settings, a: argparse.Namespace, work: Path
) -> tuple[list[Call], str]:
    """One agent's session alone through a gateway of its own on a fresh server."""
    flags = ServerFlags(ctx=a.window, parallel=1)
    server = LlamaServer(
        find_llama_server(settings), ensure_model(settings), flags, log_path=work / "w.log"
    )

    async def before(n: int) -> None:
        return None

    with server:
        calls = await run_sakur4(server.url, [agent], before, settings, work / "gw", lambda c: None)
        return calls, probed(work, server.url)


def report(
    agents: Sequence[Agent],
    a: argparse.Namespace,
    routed: Sequence[Call],
    served: Sequence[int | None],
    alone: Sequence[Sequence[Call]],
    probes: Sequence[str],
    elapsed: float,
) -> str:
    lines = [
        f"# A real router in front of two servers: {a.policy}, {len(agents)} agents x "
        f"{a.turns} turns",
        "",
        f"- {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {elapsed:.0f} s; vllm-router "
        f"0.1.17 --policy {a.policy}; two llama-server workers of the packaged model, "
        f"-np {len(agents)} -c {a.window * len(agents)} each; alone: -np 1 -c {a.window}",
        "",
        "| session | calls | worker share | routed: processed | alone: processed | ratio |",
        "|---|---|---|---|---|---|",
    ]
    total_routed = total_alone = 0
    shares = []
    for i, agent in enumerate(agents):
        mine = [(c, w) for c, w in zip(routed, served, strict=True) if c.agent == i]
        workers = [w for _, w in mine]
        top = max(set(workers), key=workers.count)
        share = workers.count(top) / len(workers) if top is not None else 0.0
        shares.append(share)
        p_routed = sum(c.processed for c, _ in mine)
        p_alone = sum(c.processed for c in alone[i])
        total_routed += p_routed
        total_alone += p_alone
        where = f"worker {top}" if top is not None else "unknown"
        lines.append(
            f"| {agent.name} | {len(mine)} | {share:.0%} on {where} | {p_routed:,} | "
            f"{p_alone:,} | {p_routed / p_alone:.3f}x |"
        )
    ratio = total_routed / total_alone
    failed = sum(c.failed is not None for c in routed) + sum(
        c.failed is not None for calls in alone for c in calls
    )
    used = sorted({w for w in served if w is not None})
    lines += [
        f"| all | {len(routed)} | workers used: {used} | {total_routed:,} | {total_alone:,} | "
        f"{ratio:.3f}x |",
        "",
        f"- every session's calls on one worker: lowest share {min(shares):.0%} -> "
        f"{'met' if min(shares) == 1.0 else 'MISSED'}",
        f"- processed through the router <= 1.05x alone: {total_routed:,} / {total_alone:,} = "
        f"{ratio:.3f}x -> {'met' if ratio <= 1.05 else 'MISSED'}",
        f"- failed calls: {failed}",
        f"- the gateway's probe (checkpoint source): through the router {probes[0]}; alone "
        f"{', '.join(probes[1:])}",
    ]
    return "\n".join(lines) + "\n"


async def main(argv: Sequence[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--agents", type=int, default=4)
    p.add_argument("--turns", type=int, default=4)
    p.add_argument("--window", type=int, default=4096, help="each slot's window")
    p.add_argument("--policy", default="consistent_hash", choices=POLICIES)
    a = p.parse_args(argv)
    if not ROUTER.is_file():
        print(f"router: {ROUTER} missing: run scripts/setup-tests", file=sys.stderr)
        return 2
    stoppable()
    settings = Settings.load()
    agents = make_agents(a.agents, a.turns)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="sakur4-router-") as tmp:
        work = Path(tmp)
        for name in ["routed", *(f"alone{i}" for i in range(len(agents)))]:
            (work / name).mkdir()
        print(f"router: {len(agents)} agents through {a.policy}", file=sys.stderr)
        routed, served, probe = await routed_run(agents, settings, a, work / "routed")
        alone, probes = [], [probe]
        for i, agent in enumerate(agents):
            print(f"router: {agent.name} alone", file=sys.stderr)
            calls, probe = await alone_run(agent, settings, a, work / f"alone{i}")
            alone.append(calls)
            probes.append(probe)
    text = report(agents, a, routed, served, alone, probes, time.monotonic() - started)
    OUT.mkdir(exist_ok=True)
    out = OUT / f"router-{re.sub('_', '-', a.policy)}-k{a.agents}-t{a.turns}.md"
    out.write_text(text, encoding="utf-8")
    print(text)
    print(f"router: written to {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1:])))
