"""Rank planner policies in seconds, with no server at all (SIMULATED, offline).

    .venv/bin/python bench/offline.py --size S16 [--mode swa-full] [--seeds 3] \
        [--set live_results=0 ...]

A generated coding-agent session (harness head, tool results log-uniform in a
range, 1–3 calls a turn, ~100-token answers, a correction pinned at turn 1, need
turns that ask about an earlier read) is replayed through the real engine
(``plan_turn`` + ``render_messages``), with the gateway's bookkeeping reproduced
(episodes keep their tiers between turns, the layout of the last prompt, the
checkpoint model's resume points) and a stand-in tokenizer: a message is one
role token plus one token per four characters of its text, so equal text is equal
tokens. The server is Sakur4's own checkpoint model (``backends.ring``;
``--swa-full`` is the same model with ``n_swa = 0``). Beside it, drop-oldest and
rolling observation masking (lag 1) on the same script and tokenizer.

A need turn asks about a read from 1–8 turns back; when the prompt the server
received for that call lacks the read's text verbatim, the scripted agent reads it
again (a tool call and the full text, new tokens), and those tokens count.

These figures are predictions over a stand-in tokenizer: for ranking choices
before a real run (bench/eviction.py), never for publishing.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import random
import statistics
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sakur4 import engine
from sakur4.backends.ring import (
    FULL_ATTENTION,
    CheckpointRules,
    SentPrompt,
    SlotPrediction,
    advance,
    empty_slot,
    predict_slot,
)
from sakur4.engine.policy import Policy
from sakur4.engine.truncation import oldest_to_drop

Message = dict[str, Any]

SIZES = {
    # window, turns, head tokens, result range (tokens), calls a turn: the shapes of
    # sakur4.demo.script.PRESETS (S8 here keeps the 3k head, 500-4,000 results)
    "small": (1536, 8, 200, (60, 200), (1, 2, 3)),
    "demo": (4096, 14, 1000, (80, 320), (1, 2)),
    "S8": (8192, 30, 3000, (500, 4000), (1, 2, 3)),
    "S8-bench": (8192, 30, 2500, (300, 2000), (1, 2, 3)),
    "S16": (16384, 45, 4000, (500, 4000), (1, 2, 3)),
    "S32": (32768, 60, 6000, (500, 4000), (1, 2, 3)),
}

WORDS = [
    "def",
    "return",
    "self",
    "value",
    "index",
    "parse",
    "token",
    "buffer",
    "result",
    "error",
    "module",
    "class",
    "import",
    "config",
    "stream",
    "decode",
    "encode",
    "header",
    "message",
    "request",
    "response",
    "cache",
    "window",
    "prefix",
    "layout",
    "episode",
    "anchor",
    "ledger",
    "symbol",
    "fact",
    "summary",
    "atlas",
    "recall",
    "query",
    "vector",
    "store",
]


def text_of(rng: random.Random, tokens: int) -> str:
    """About ``tokens`` stand-in tokens (4 characters each) of code-like text."""
    out: list[str] = []
    size = 0
    while size < tokens * 4:
        line = " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 10)))
        line = f"{len(out) + 1:5}  {line}"
        out.append(line)
        size += len(line) + 1
    return "\n".join(out)[: tokens * 4]


@dataclass
class Step:
    call_id: str
    path: str
    result: str


@dataclass
class Turn:
    index: int
    user: str
    steps: list[Step]
    answer: str
    need: int | None = None  # index of the earlier turn whose first read it asks about


def script(size: str, seed: int, need_share: float, need_max: int) -> tuple[str, list[Turn]]:
    _window, turns, head, (lo, hi), calls = SIZES[size]
    rng = random.Random(seed)
    system = "You are a coding agent. Tools: read_file, run_tests, grep.\n" + text_of(rng, head)
    out: list[Turn] = []
    for t in range(turns):
        steps = []
        for k in range(rng.choice(calls)):
            n = int(math.exp(rng.uniform(math.log(lo), math.log(hi))))
            steps.append(Step(f"call_{t}_{k}", f"src/mod_{t}_{k}.py", text_of(rng, n)))
        need = None
        if t >= 2 and rng.random() < need_share:
            need = max(0, t - rng.randint(1, need_max))
        user = f"Turn {t}: look at src/mod_{t}_0.py and tell me how it relates. " + text_of(rng, 20)
        if need is not None:
            user = f"Turn {t}: what did src/mod_{need}_0.py say about its error path? " + text_of(
                rng, 15
            )
        out.append(Turn(t, user, steps, f"Answer {t}: " + text_of(rng, 100), need))
    return system, out


CORRECTION = "Correction, keep for the whole session: do not edit generated files; run -x."


def call_msg(call_id: str, name: str, args: dict[str, Any]) -> Message:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": call_id,
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(args)},
            }
        ],
    }


def tokens_of(m: Message) -> list[int]:
    """The stand-in tokenizer: a role token, then one token per 4 characters."""
    parts = [m.get("role", ""), str(m.get("content") or "")]
    for c in m.get("tool_calls") or ():
        parts.append(c["function"]["name"] + c["function"]["arguments"])
    text = "\x1f".join(parts)
    out = [hash_int(m.get("role", "") + "<|role|>")]
    for i in range(0, len(text), 4):
        out.append(hash_int(text[i : i + 4]))
    return out


_H: dict[str, int] = {}


def hash_int(s: str) -> int:
    v = _H.get(s)
    if v is None:
        v = _H[s] = int.from_bytes(hashlib.blake2b(s.encode(), digest_size=6).digest(), "big")
    return v


@dataclass
class Server:
    """One slot of the checkpoint model: processed/reused per call."""

    rules: CheckpointRules
    window: int
    state: SlotPrediction = field(init=False)
    processed: int = 0
    calls: int = 0
    failed: int = 0
    history: list[SentPrompt] = field(default_factory=list)
    wasted: list[int] = field(default_factory=list)
    seen: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.state = empty_slot(self.rules)

    def send(self, messages: Sequence[Message]) -> tuple[int, list[tuple[int, int]], list[int]]:
        toks: list[int] = []
        spans = []
        users = []
        for m in messages:
            t = tokens_of(m)
            if m.get("role") == "user":
                users.append(len(toks))
            spans.append((len(toks), len(toks) + len(t)))
            toks += t
        self.calls += 1
        if len(toks) > self.window:
            self.failed += 1
            return -1, spans, toks
        sent = SentPrompt(tuple(toks), tuple(users), generated=2)
        self.state = advance(self.state, sent)
        reused = self.state.reuse[-1]
        self.processed += len(toks) - reused
        # Tokens processed again: all processed but those of messages never sent before.
        new = 0
        for m, (a, b) in zip(messages, spans, strict=True):
            key = json.dumps(m, sort_keys=True)
            if key not in self.seen:
                self.seen.add(key)
                new += b - a
        self.wasted.append(max(0, len(toks) - reused - new))
        self.history.append(SentPrompt(tuple(toks), tuple(users), 2, reused))
        return reused, spans, toks


class Agent:
    """Replays the script; at need turns, re-reads what the sent prompt lacks."""

    def __init__(self, system: str, turns: list[Turn]) -> None:
        self.system = system
        self.turns = turns
        self.rereads = 0
        self.reread_tokens = 0

    def run(self, strategy: Callable[[list[Message], int, str | None], list[Message]]) -> None:
        history: list[Message] = [{"role": "system", "content": self.system}]
        reads: dict[int, Step] = {}
        for turn in self.turns:
            pin = CORRECTION if turn.index == 1 else None
            user = turn.user if not pin else f"{pin}\n\n{turn.user}"
            history.append({"role": "user", "content": user})
            sent = strategy(history, turn.index, pin)
            if turn.need is not None and turn.need in reads:
                wanted = reads[turn.need]
                if not any(wanted.result in str(m.get("content") or "") for m in sent):
                    self.rereads += 1
                    self.reread_tokens += len(wanted.result) // 4
                    cid = f"reread_{turn.index}"
                    history.append(call_msg(cid, "read_file", {"path": wanted.path}))
                    history.append({"role": "tool", "tool_call_id": cid, "content": wanted.result})
                    strategy(history, turn.index, None)
            for step in turn.steps:
                history.append(call_msg(step.call_id, "read_file", {"path": step.path}))
                history.append(
                    {"role": "tool", "tool_call_id": step.call_id, "content": step.result}
                )
                strategy(history, turn.index, None)
            reads[turn.index] = turn.steps[0]
            history.append({"role": "assistant", "content": turn.answer})


# -- strategies -------------------------------------------------------------------


def baseline(rules: CheckpointRules) -> Callable[..., list[Message]]:
    server = Server(rules, 10**9)

    def send(history: list[Message], turn: int, pin: str | None) -> list[Message]:
        server.send(history)
        return history

    send.server = server  # type: ignore[attr-defined]
    return send


def drop_oldest(
    rules: CheckpointRules, window: int, trig: float, targ: float, lag: int | None = None
) -> Any:
    """Drop whole messages after the system prompt down to target at the trigger.

    With ``lag``, rolling observation masking first: each tool result is replaced by
    a placeholder once ``lag`` newer results exist (past the trigger anyway, the
    harness drops the oldest, as here)."""
    server = Server(rules, window)
    start = [1]
    events = [0]

    def send(history: list[Message], turn: int, pin: str | None) -> list[Message]:
        shown = history
        if lag is not None:
            results = [i for i, m in enumerate(history) if m.get("role") == "tool"]
            masked = set(results[: max(0, len(results) - lag)])
            shown = [
                {**m, "content": "[tool output omitted]"} if i in masked else m
                for i, m in enumerate(history)
            ]
        kept = [shown[0], *shown[start[0] :]]
        sizes = [len(tokens_of(m)) for m in kept]
        total = sum(sizes)
        if total >= window * trig:
            need = total - window * targ
            start[0] += oldest_to_drop(sizes[1:], [m.get("role") for m in kept[1:]], need)
            events[0] += 1
            kept = [shown[0], *shown[start[0] :]]
        server.send(kept)
        return kept

    send.server = server  # type: ignore[attr-defined]
    send.events = events  # type: ignore[attr-defined]
    return send


class Sakur4:
    """The gateway's bookkeeping around the real engine, offline."""

    def __init__(
        self, rules: CheckpointRules, window: int, policy: Policy, source: str = "checkpoint-ring"
    ) -> None:
        self.server = Server(rules, window)
        self.rules = rules
        self.window = window
        self.source = source
        self.tiers: dict[int, engine.Tier] = {}
        self.layout: engine.Layout | None = None
        self.anchors: list[engine.Anchor] = []
        self.events = 0
        self.refused = 0
        self.verdicts: list[str] = []
        self.reasons: list[str] = []
        self.ratio = 1.0
        # What every plan of the run shares, built once.
        self.settings = engine.PlanSettings(window, engine.choose_profile("detected"), policy)
        self.live_turns: list[int] = []
        self.sizes: dict[int, int] = {}

    def count(self, text: str) -> int:
        return math.ceil((len(text) + 3) // 4 * self.ratio)

    def episodes(self, history: list[Message]) -> list[engine.Episode]:
        # Counted once, when first seen, as the gateway stores them: a stub names
        # the size, so a size that changed would change the stub's bytes.
        out = []
        for i, m in enumerate(history):
            tier = self.tiers.get(i, engine.Tier.LIVE)
            if i not in self.sizes:
                text = m.get("content") or m.get("tool_calls")[0]["function"]["arguments"]
                self.sizes[i] = self.count(text)
            n = self.sizes[i]
            role = m["role"]
            if role == "tool":
                out.append(
                    engine.Episode(
                        i * 4,
                        "tool",
                        engine.Kind.TOOL_RESULT,
                        m["content"],
                        n,
                        tier,
                        tool_name="read_file",
                        tool_call_id=m["tool_call_id"],
                    )
                )
            elif m.get("tool_calls"):
                c = m["tool_calls"][0]
                args = c["function"]["arguments"]
                out.append(
                    engine.Episode(
                        i * 4,
                        "assistant",
                        engine.Kind.TOOL_CALL,
                        args,
                        n,
                        tier,
                        tool_name=c["function"]["name"],
                        tool_call_id=c["id"],
                    )
                )
            else:
                out.append(engine.Episode(i * 4, role, engine.Kind.MESSAGE, m["content"], n, tier))
        return out

    def __call__(self, history: list[Message], turn: int, pin: str | None) -> list[Message]:
        if pin:
            self.anchors.append(engine.Anchor(1, pin, 10, self.count(pin)))
        eps = self.episodes(history)
        cps = self.checkpoints()
        plan = engine.plan_turn(
            eps,
            self.settings,
            anchors=self.anchors,
            layout=self.layout,
            checkpoints=cps,
            count=self.count,
        )
        self.verdicts.append(plan.verdict.value)
        self.reasons.append(plan.reason)
        if plan.verdict is engine.Verdict.REFUSED:
            self.refused += 1
            self.server.calls += 1
            self.server.failed += 1
            return []
        if plan.chosen_cut is not None:
            self.events += 1
        for s in plan.steps:
            self.tiers[s.episode_id // 4] = s.to_tier
        rendered = engine.render_messages(eps, self.anchors, plan)
        reused, spans, toks = self.server.send(list(rendered.messages))
        if reused < 0:
            self.layout = None
            return list(rendered.messages)
        self.layout = engine.Layout(
            tuple(engine.Span(k, a, b) for k, (a, b) in zip(rendered.keys, spans, strict=True))
        )
        est = sum(self.count(str(m.get("content") or "")) for m in rendered.messages)
        if est:
            self.ratio = max(0.25, min(4.0, len(toks) / (est / self.ratio)))
        return list(rendered.messages)

    def checkpoints(self) -> engine.Checkpoints:
        if self.layout is None or not self.server.history:
            return engine.Checkpoints.none()
        if self.source != "checkpoint-ring":
            return engine.Checkpoints.every()
        pred = predict_slot(self.server.history[-48:], self.rules)
        cands = [s.start for s in self.layout.spans] + [self.layout.end]
        return engine.Checkpoints.at(pred.resume_positions(cands))


def run(
    size: str, seed: int, mode: str, policy: Policy, need_share: float, need_max: int
) -> dict[str, Any]:
    window = SIZES[size][0]
    system, turns = script(size, seed, need_share, need_max)
    rules = CheckpointRules(min_step=256) if mode == "ring" else FULL_ATTENTION
    source = "checkpoint-ring" if mode == "ring" else "exact-prefix"
    prof = engine.choose_profile("detected")
    out: dict[str, Any] = {}
    strategies: dict[str, Any] = {
        "baseline": baseline(rules),
        "drop-oldest": drop_oldest(rules, window, prof.trigger, prof.target),
        "mask lag 1": drop_oldest(rules, window, prof.trigger, prof.target, lag=1),
        "sakur4": Sakur4(rules, window, policy, source),
    }
    for name, strat in strategies.items():
        agent = Agent(system, turns)
        agent.run(strat)
        server = strat.server
        out[name] = {
            "processed": server.processed,
            "rereads": agent.rereads,
            "reread_tokens": agent.reread_tokens,
            "failed": server.failed,
            "events": strat.events
            if isinstance(strat, Sakur4)
            else getattr(strat, "events", [0])[0],
            "wasted": sum(server.wasted),
            "split": _split(strat) if isinstance(strat, Sakur4) else "",
            "obj": strat,
        }
    base = out["baseline"]["processed"]
    for r in out.values():
        # Re-reads are new tokens the baseline never had: the overhead includes them.
        r["overhead"] = r["processed"] - base
    return out


def _split(s: Sakur4) -> str:
    """Re-processed cached tokens by the kind of plan that caused them."""
    kinds: dict[str, int] = {}
    for v, r, w in zip(s.verdicts, s.reasons, s.server.wasted, strict=False):
        k = "pressure" if v != "fits" else ("tidy" if "cut at" in r else "append")
        kinds[k] = kinds.get(k, 0) + w
    return " ".join(f"{k} {v:,}" for k, v in sorted(kinds.items()))


def main(argv: Sequence[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="S16")
    ap.add_argument("--mode", default="ring", choices=["ring", "swa-full"])
    ap.add_argument("--seeds", type=int, default=1)
    ap.add_argument("--need-share", type=float, default=0.3)
    ap.add_argument("--need-max", type=int, default=8)
    ap.add_argument("--set", action="append", default=[], help="policy field=value")
    ap.add_argument("-v", action="store_true")
    a = ap.parse_args(argv)
    kw: dict[str, Any] = {}
    for s in a.set:
        k, v = s.split("=", 1)
        kw[k] = (
            type(getattr(Policy(), k))(v)
            if not isinstance(getattr(Policy(), k), bool)
            else v in ("1", "true", "True")
        )
    policy = Policy(**kw)
    agg: dict[str, list[dict[str, Any]]] = {}
    for seed in range(a.seeds):
        res = run(a.size, seed, a.mode, policy, a.need_share, a.need_max)
        for k, v in res.items():
            agg.setdefault(k, []).append(v)
        if a.v:
            s = res["sakur4"]["obj"]
            for i, (v, r) in enumerate(zip(s.verdicts, s.reasons, strict=True)):
                if v != "fits" or "steps" in r:
                    print(f"  call {i}: {r}")
    print(f"SIMULATED offline, size {a.size}, mode {a.mode}, {a.seeds} seed(s), policy {policy}")
    print(
        f"{'strategy':<12} {'processed':>10} {'overhead':>9} {'rereads':>8} "
        f"{'re-read tok':>11} {'re-proc':>8} {'events':>7} {'failed':>7}"
    )
    drop = statistics.mean(r["overhead"] for r in agg["drop-oldest"])
    for k, rs in agg.items():
        ov = statistics.mean(r["overhead"] for r in rs)
        print(
            f"{k:<12} {statistics.mean(r['processed'] for r in rs):>10,.0f} {ov:>9,.0f} "
            f"{statistics.mean(r['rereads'] for r in rs):>8.1f} "
            f"{statistics.mean(r['reread_tokens'] for r in rs):>11,.0f} "
            f"{statistics.mean(r['wasted'] for r in rs):>8,.0f} "
            f"{statistics.mean(r['events'] for r in rs):>7.1f} "
            f"{statistics.mean(r['failed'] for r in rs):>7.1f}"
            + (f"  {ov / drop:.2f}x drop" if drop else "")
            + (f"  [{rs[-1]['split']}]" if rs[-1]["split"] else "")
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
