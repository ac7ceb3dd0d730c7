"""One session through one gateway, and through two gateway replicas taking turns
(issue 39 item 4): per-call processed tokens side by side, and whether they are identical.

    nice -n 10 .venv/bin/python bench/replicas.py                      # the demo script, real
    nice -n 10 .venv/bin/python bench/replicas.py --size S8 --simulate # S8, predicted prefill

The script is the demo's (``sakur4.demo.script``, preset ``demo`` by default), its
scripted agent driving the calls (the demo's own driver, pins and re-reads included).
*one*: the session through one gateway, as ``sakur4 demo`` runs it. *pair*: two
gateways (``SAKUR4_SHARED_SESSIONS=true``, each its own turn pipeline, one store), the
agent's calls sent to the first and the second in turn, so every call after the first
is planned by a gateway that did not plan the call before it. Each run gets a fresh
server (the same flags: the mode's) and a fresh store.

``--simulate``: the server's prefill is predicted (bench/simserver.py: the real
server's template and tokenizer, the checkpoint model's reuse), one simulated slot
shared by both gateways as one server's is (``OneSlot``). The two gateways run in this process
(each its own uvicorn thread and pipeline); tests/gateway/test_replicas.py holds the
same with two processes.

Goal (issue 39): identical per-call plans and processed tokens on the demo script;
total processed within 1 % on S8 (simulated).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from modes import checkpoint_rules  # bench/, beside this script
from simserver import SimulatedChat  # bench/

from sakur4.anchors import pin_anchor
from sakur4.backends.launcher import LlamaServer
from sakur4.backends.report import read_report
from sakur4.backends.ring import CheckpointRules, empty_slot
from sakur4.demo.agent import ScriptedAgent, drive
from sakur4.demo.compare import Mode, chat_for, ring, swa_full
from sakur4.demo.scenario import Request, Session
from sakur4.demo.script import PRESETS, generate, preset
from sakur4.demo.via_gateway import CHAT_PATH, SESSION, fold_refetch, running_gateway
from sakur4.receipts import Receipt, list_receipts
from sakur4.settings import Settings
from sakur4.store import open_store
from sakur4.store.projects import ensure_project


class OneSlot:
    """The simulated server's one slot, shared by the gateways' simulators: each gateway
    runs on its own event loop, so each has its own :class:`SimulatedChat` (its
    connections belong to that loop), and what the slot holds passes between them."""

    def __init__(self, url: str, rules: CheckpointRules, window: int) -> None:
        self.url, self.rules, self.window = url, rules, window
        self.state = empty_slot(rules)
        self.cached: list[int | None] = []

    def transport(self) -> httpx.AsyncBaseTransport:
        return SlotView(self, SimulatedChat(self.url, self.rules, self.window))


class SlotView(httpx.AsyncBaseTransport):
    """One gateway's simulator, reading and writing the shared slot around each call.
    Never closed by its gateway (its probe closes the transport it is given, then its
    chat client goes on using it)."""

    def __init__(self, slot: OneSlot, sim: SimulatedChat) -> None:
        self.slot, self.sim = slot, sim

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.sim.state, self.sim.cached = self.slot.state, self.slot.cached
        try:
            return await self.sim.handle_async_request(request)
        finally:
            self.slot.state, self.slot.cached = self.sim.state, self.sim.cached


@dataclass(frozen=True)
class Call:
    """One call's figures: the server's, and its receipt's plan."""

    turn: int
    step: int
    gateway: int
    processed: int
    reused: int
    plan: tuple[Any, ...]


def plan_of(r: Receipt | None) -> tuple[Any, ...]:
    """What a receipt says the plan was (the same plan gives the same tuple)."""
    if r is None:
        return ("no receipt",)
    steps = tuple((s["episode"], s["from"], s["to"]) for s in r.steps)
    return (r.turn, r.verdict, r.prompt_tokens, r.predicted_reuse, r.chosen_cut, steps)


async def run(
    settings: Settings, session: Session, replicas: int, slot: OneSlot | None
) -> list[Call]:
    """The scripted session through ``replicas`` gateways taking calls in turn."""
    shared = {"shared_sessions": replicas > 1}
    with contextlib.ExitStack() as stack:
        gateways = [
            stack.enter_context(
                running_gateway(
                    settings.model_copy(update=shared),
                    backend_transport=slot.transport() if slot is not None else None,
                )
            )
            for _ in range(replicas)
        ]
        store = open_store(settings.store)
        stack.callback(store.close)
        project = ensure_project(store, settings.project_root())
        agent = ScriptedAgent(session, fold_refetch(store, project.id))
        chat = chat_for(session)
        headers = {"X-Sakur4-Session": SESSION}
        answered: list[tuple[Request, int, dict[str, Any], int | None]] = []
        async with httpx.AsyncClient(timeout=settings.backend_timeout) as c:

            async def send(i: int, req: Request) -> Sequence[Mapping[str, Any]]:
                gw = gateways[i % replicas]
                if req.pin:
                    pin_anchor(store, project.id, req.pin, priority=10, session=SESSION)
                before = len(gw.spy.sent)
                resp = await c.post(
                    gw.url + CHAT_PATH, json={**chat, "messages": req.messages}, headers=headers
                )
                if resp.status_code != 200:
                    raise SystemExit(f"call {i} refused: {resp.status_code} {resp.text[:300]}")
                rid = resp.headers.get("x-sakur4-receipt")
                answered.append((req, i % replicas, resp.json(), int(rid) if rid else None))
                sent = gw.spy.sent[before:]
                return list(sent[-1]["messages"]) if sent else []

            await drive(agent, send)
        receipts = {r.id: r for r in list_receipts(store, project.id, SESSION, limit=100_000)}
    calls = []
    for req, gw_index, answer, rid in answered:
        rep = read_report(answer)
        receipt = receipts.get(rid) if rid is not None else None
        calls.append(
            Call(
                req.turn,
                req.step,
                gw_index,
                rep.processed or 0,
                rep.reused or 0,
                plan_of(receipt),
            )
        )
    return calls


async def one_run(
    settings: Settings, session: Session, mode: Mode, replicas: int, simulate: bool, work: Path
) -> list[Call]:
    """A fresh server (its slot empty) and a fresh store for one run."""
    where = Path(tempfile.mkdtemp(prefix=f"replicas-{replicas}-", dir=work))
    (where / "project").mkdir()
    with LlamaServer.from_settings(settings, mode.flags, die_with_parent=True) as server:
        s = settings.model_copy(
            update={
                "store": where / "sakur4.db",
                "project": where / "project",
                "backend": server.url,
                "gateway_port": 0,
                "checkpoint_min_step": mode.flags.checkpoint_min_step or 8192,
            }
        )
        slot = OneSlot(server.url, checkpoint_rules(mode), mode.window) if simulate else None
        return await run(s, session, replicas, slot)


def table(one: list[Call], pair: list[Call]) -> str:
    lines = [
        "| call | turn.step | one: processed | pair: gateway | pair: processed | plan same |",
        "|---:|---|---:|---:|---:|---|",
    ]
    for i, (a, b) in enumerate(zip(one, pair, strict=True)):
        same = "yes" if a.plan == b.plan else f"no: {a.plan} vs {b.plan}"
        lines.append(
            f"| {i} | {a.turn}.{a.step} | {a.processed:,} | {b.gateway + 1} | "
            f"{b.processed:,} | {same} |"
        )
    return "\n".join(lines)


async def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--size", default="demo", help=f"script preset: {', '.join(PRESETS)}")
    p.add_argument("--mode", choices=("swa-full", "ring"), default="swa-full")
    p.add_argument("--simulate", action="store_true", help="predicted prefill (bench/simserver)")
    args = p.parse_args()
    params = preset(args.size)
    session = generate(params)
    mode = swa_full(params.window) if args.mode == "swa-full" else ring(params.window)
    settings = Settings.load()
    with tempfile.TemporaryDirectory(prefix="sakur4-replicas-") as tmp:
        work = Path(tmp)
        one = await one_run(settings, session, mode, 1, args.simulate, work)
        pair = await one_run(settings, session, mode, 2, args.simulate, work)
    if len(one) != len(pair):
        print(f"the runs made {len(one)} and {len(pair)} calls: the agent diverged")
        return 1
    print(table(one, pair))
    total_one = sum(c.processed for c in one)
    total_pair = sum(c.processed for c in pair)
    same_processed = [a.processed for a in one] == [b.processed for b in pair]
    same_plans = [a.plan for a in one] == [b.plan for b in pair]
    ratio = total_pair / total_one if total_one else 1.0
    moved = sum(1 for c in one if c.plan[-1])
    kind = "simulated" if args.simulate else "real"
    print(
        f"\n{params.name} ({args.mode}, {kind}): {len(one)} calls; processed one gateway "
        f"{total_one:,}, two alternating {total_pair:,} ({ratio:.4f}x); per-call processed "
        f"identical: {'yes' if same_processed else 'no'}; per-call plans identical: "
        f"{'yes' if same_plans else 'no'} ({moved} of the calls' plans moved episodes)"
    )
    return 0 if same_plans and abs(ratio - 1) <= 0.01 else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
