"""The floor: the fewest tokens any plan can make the server process for a script.

    nice .venv/bin/python bench/floor.py --size demo --mode swa-full
    nice .venv/bin/python bench/floor.py --size S8 --mode ring
    nice .venv/bin/python bench/floor.py --size S16 --measure     # sizes from a server

The script (:mod:`sakur4.demo.script`), the scripted agent's re-reads
(:mod:`sakur4.demo.agent`), the window and the server's resume model fix what every
plan pays; :mod:`floor_model` (beside this file) finds the cheapest plan, exactly,
over a plan space every strategy of the bench lies in or above (removal at message
granularity; stubs, placeholders and summaries cost at least the removal they
replace). The figure is the bench's *overhead*: tokens processed beyond the
no-management baseline (bench/eviction.py, ``Comparison.overhead_tokens``), re-reads
included.

Per mode:

- ``swa-full``: any prefix resumes (the simulator's model with ``n_swa`` 0): the
  floor is **exact** over the plan space.
- ``ring``, ``default``: a context-checkpoint ring resumes at a checkpoint at or
  before the change, never past the common prefix, so on the same prompts it
  processes at least what ``--swa-full`` does: the ``--swa-full`` floor is a
  **bound** (the floor is at least it).
- ``cache-reuse``: the server may also shift kept runs of >= 256 tokens, so a
  removal can cost less than on ``--swa-full``: the floor lies between the
  re-reads-only relaxation (every removal free: a **bound** below) and the
  ``--swa-full`` floor (a plan the server serves at no more: a bound above).
- ``recurrent`` modes run another model whose tokenizer was not measured here:
  refused.

Token sizes: ``--sizes measured`` (default) reads bench/floor_sizes/<script key>.json,
written by ``--measure``: each message's token span as the set-up's llama-server
renders and tokenizes the whole session (:class:`~sakur4.backends.layout.TokenLayouts`);
``--sizes estimated`` uses the generator's characters-per-token figures (an
approximation, labelled so).

Strategies' figures ("/ floor"): :data:`FIGURES`, each with its source and whether
it is real or simulated; the floor is never above any of them (bench/tests/test_floor.py).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from floor_model import (  # bench/, beside this script
    ANSWER,
    CALL,
    KNOWN,
    PROMISES,
    REQUEST,
    REREAD_CALL,
    REREAD_RESULT,
    RESULT,
    FloorScript,
    Infeasible,
    Item,
    Plan,
    Slot,
    lower_bound,
    solve,
    without_foresight,
)

from sakur4.demo.agent import same_call
from sakur4.demo.scenario import Session, assistant_call, tool_result
from sakur4.demo.script import CHARS_PER_TOKEN, HEAD_CHARS_PER_TOKEN, generate, preset

SIZES = Path(__file__).resolve().parent / "floor_sizes"
MODES = ("swa-full", "ring", "default", "cache-reuse")
# The promises' sets, weakest first: the price of each is the step between two floors.
VARIANTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("no promise", ()),
    ("correction pinned", ("pin",)),
    ("correction pinned + requests kept (Sakur4's)", PROMISES),
)
# --prices: what the quality dial and foresight add to Sakur4's promises.
DIAL = ("+ newest answered result kept (the quality dial, held at any pressure)", KNOWN)


# ---------------------------------------------------------------------------
# The session as messages and items


def messages_of(session: Session) -> tuple[list[dict[str, Any]], list[Item], list[Slot]]:
    """The session's messages in prompt order — the system message, then one per item,
    every possible re-read pair in its place — with the items and the calls, as the
    scripted agent makes them (:meth:`ScriptedAgent.calls`). Token sizes are 0 here."""
    if session.attach_reads or session.environment is not None:
        raise ValueError("the floor models the tools shape only (not Claude Code's)")
    msgs: list[dict[str, Any]] = [{"role": "system", "content": session.system}]
    items: list[Item] = []
    slots: list[Slot] = []
    texts: list[str] = []

    def add(kind: str, turn: int, message: dict[str, Any], text: str, pin: bool = False) -> int:
        items.append(Item(len(items), kind, turn, 0, pin=pin))
        msgs.append(message)
        texts.append(text)
        return len(items) - 1

    prev_answer: str | None = None
    for turn in session.turns:
        t = turn.index
        arriving = []
        if prev_answer is not None:
            arriving.append(
                add(ANSWER, t - 1, {"role": "assistant", "content": prev_answer}, prev_answer)
            )
        user = turn.user if not turn.pin else f"{turn.pin}\n\n{turn.user}"
        arriving.append(add(REQUEST, t, {"role": "user", "content": user}, user, bool(turn.pin)))
        need = turn.need.turn if turn.need is not None else None
        slots.append(Slot(t, 0, tuple(arriving), need))
        if turn.need is not None:
            again = same_call(turn.need, [])
            pair = (
                add(REREAD_CALL, t, assistant_call(again), ""),
                add(REREAD_RESULT, t, tool_result(again), again.result),
            )
            slots.append(Slot(t, -1, pair, None, reread=True))
        for k, step in enumerate(turn.steps):
            pair = (
                add(CALL, t, assistant_call(step), ""),
                add(RESULT, t, tool_result(step), step.result),
            )
            slots.append(Slot(t, k + 1, pair))
        prev_answer = turn.answer
    needs = {tn.need.turn: tn.need.content for tn in session.turns if tn.need is not None}
    held = [frozenset(n for n, c in needs.items() if text and c in text) for text in texts]
    items = [Item(it.id, it.kind, it.turn, it.tokens, held[it.id], it.pin) for it in items]
    return msgs, items, slots


def estimated_sizes(msgs: Sequence[Mapping[str, Any]]) -> tuple[int, int, list[int]]:
    """(head, generation prompt, per item) from characters: the generator's 2.85
    characters a token (3.5 for the head) and 5 tokens of wrapper a message."""
    wrap = 5

    def chars(m: Mapping[str, Any]) -> int:
        calls = m.get("tool_calls") or []
        return len(str(m.get("content") or "")) + sum(len(json.dumps(c)) for c in calls)

    head = 1 + wrap + round(chars(msgs[0]) / HEAD_CHARS_PER_TOKEN)
    return head, 3, [wrap + round(chars(m) / CHARS_PER_TOKEN) for m in msgs[1:]]


def build(name: str, session: Session, sizes: Mapping[str, Any]) -> FloorScript:
    _, items, slots = messages_of(session)
    per = list(sizes["items"])
    if len(per) != len(items):
        raise ValueError(f"the sizes list {len(per)} items, the session {len(items)}")
    sized = tuple(
        Item(it.id, it.kind, it.turn, n, it.holds, it.pin) for it, n in zip(items, per, strict=True)
    )
    return FloorScript(name, int(sizes["head"]), int(sizes["gen"]), sized, tuple(slots))


def sizes_path(key: str) -> Path:
    return SIZES / f"{key}.json"


def load_sizes(key: str, session: Session, how: str) -> dict[str, Any]:
    if how == "estimated":
        msgs, _, _ = messages_of(session)
        head, gen, per = estimated_sizes(msgs)
        return {"head": head, "gen": gen, "items": per, "source": "ESTIMATED from characters"}
    path = sizes_path(key)
    if not path.is_file():
        raise ValueError(
            f"{path.relative_to(SIZES.parent.parent)} is missing: run with --measure "
            "(needs the set-up's llama-server) or --sizes estimated"
        )
    body: dict[str, Any] = json.loads(path.read_text())
    return body


# ---------------------------------------------------------------------------
# Measuring the sizes on the set-up's llama-server


async def _measure(session: Session, url: str) -> dict[str, Any]:
    import httpx

    from sakur4.backends.layout import TokenLayouts
    from sakur4.backends.llamacpp import LlamaCppClient
    from sakur4.demo.compare import chat_for

    msgs, items, _ = messages_of(session)
    client = LlamaCppClient(url, timeout=600.0, transport=httpx.AsyncHTTPTransport())
    layouts = TokenLayouts(client)
    body = {**chat_for(session), "messages": msgs}
    whole = await layouts.layout(body)
    spans = whole.spans
    gen = len(whole.tokens) - whole.generation_start
    head = spans[0].end
    per = [s.end - s.start for s in spans[1:]]
    # Additivity: the prompt without any re-read pair (the baseline's last call) must
    # be the same spans, token for token: a message's tokens do not depend on which
    # others are present. Checked, not assumed.
    keep = [0] + [
        i + 1 for i, it in enumerate(items) if it.kind not in (REREAD_CALL, REREAD_RESULT)
    ]
    base = await layouts.layout({**body, "messages": [msgs[i] for i in keep]})
    same = [b.end - b.start for b in base.spans] == [spans[i].end - spans[i].start for i in keep]
    clean = sum(1 for s in spans if not s.clean_end)
    await client.aclose()
    return {
        "head": head,
        "gen": gen,
        "items": per,
        "spans_independent": same,
        "unclean_ends": clean,
        "prompt_tokens": len(whole.tokens),
    }


def measure(size: str) -> Path:
    from sakur4.backends.launcher import LlamaServer, ServerFlags
    from sakur4.settings import Settings

    params = preset(size)
    session = generate(params)
    settings = Settings.load()
    # The server's own ChatML fallback, as bench/eviction.py starts every server: the
    # packaged template renders tool calls ~50 tokens longer.
    flags = ServerFlags(ctx=4096, threads=1, server_template=True)
    with LlamaServer.from_settings(settings, flags) as server:
        found = asyncio.run(_measure(session, server.url))
        found["source"] = (
            f"measured: the set-up's llama-server and model ({Path(server.model).name}), "
            "its ChatML fallback template and tokenizer, as bench/eviction.py runs them"
        )
    found["key"] = params.key
    SIZES.mkdir(exist_ok=True)
    path = sizes_path(params.key)
    path.write_text(json.dumps(found, indent=0) + "\n")
    return path


# ---------------------------------------------------------------------------
# Strategies' figures (overhead incl. re-reads), each with its source


@dataclass(frozen=True, slots=True)
class Figure:
    overhead: int
    kind: str  # "real" or "simulated"


README_MATRIX = "docs/results.md 'Every mode, every peer' (Sakur4 engine 973b2d24)"
# (size, mode) -> strategy -> figure. S8/S16: the README's matrix (real where it
# says R, the rest simulated); demo: bench/eviction.py --size demo --simulate.
FIGURES: dict[tuple[str, str], tuple[str, dict[str, Figure]]] = {}


STRATEGIES = (
    "drop-oldest", "summarise", "mask-lag1", "mask-10turns", "opencode", "claude-code",
    "opencode-1.18", "claude-code-2.1", "sakur4",
)  # fmt: skip
# Overhead incl. re-reads per strategy in the order above; R: a real run, else simulated.
# The cache-reuse rows' Sakur4 (and demo's drop-oldest) are issue 40 item 5's, engine
# 949a7960 (ShiftFirst): demo real (bench/eviction.py --size demo --modes cache-reuse
# --sim-baseline, 2026-12-07), S8 and S16 simulated; before it 2,594 / 12,147 / 41,446.
# opencode-1.18 and claude-code-2.1: today's releases (OpenCode 1.18.33, Claude Code
# 2.1.332, issue 40 item 6), simulated 2026-12-07: docs/results.md "Today's releases of
# the peers". S32: the README's matrix, all simulated, before ShiftFirst; "-": not run.
TABLE = """
demo swa-full    5602  2986   5756   5602   15314  9301   34439  1595   2594
demo ring        5665  3065   5868   5665   15363  9878   34536  1653   3132
demo default     5665  3065   5868   5665   15363  10194  34536  1653   3132
demo cache-reuse 306R  2986   4361   327    7603   9301   34439  1595   61R
S8 default       21019 66583  19742R 21019  235295 62204  127412 51199  16038
S8 ring          21019 66583  19743  21019  235295 61938  127412 51199  15673
S8 swa-full      20779 65865  14573R 20779  234958 61256  127207 50659  12131R
S8 cache-reuse   8081  65865  14574  8081   138380 61256  127207 50659  6728
S16 default      98966 192566 59410  98966  615866 293269 250278 156055 45510R
S16 ring         98920R 192566 59410R 98966 615866 289553 250278 154421 45412
S16 swa-full     98493 191851 49093R 98493  615421 286759 250025 153762 41416R
S16 cache-reuse  33633 191851 47885  33633  336888 269550 250025 129932 33511
S32 default      269834 100256 93981 269834 449903 386083 -      -      53283
S32 ring         257718 93266 87051  257718 449903 295493 -      -      53503
S32 swa-full     257358 92935 65970  257358 449722 285881 -      -      49600
S32 cache-reuse  25665 92935  58174  25665  178159 285881 -      -      21474
"""
DEMO_SIM = (
    "bench/eviction.py --size demo --modes swa-full,ring,default,cache-reuse --simulate, "
    "2026-12-06 (baseline 8,311; Sakur4 at engine 04360a6d with other helpers' "
    "uncommitted engine edits: +62682b on swa-full, +3ff5a0 elsewhere)"
)
for _line in TABLE.strip().splitlines():
    _size, _mode, *_cells = _line.split()
    FIGURES[(_size, _mode)] = (
        DEMO_SIM if _size == "demo" else README_MATRIX,
        {
            name: Figure(int(c.rstrip("R")), "real" if c.endswith("R") else "simulated")
            for name, c in zip(STRATEGIES, _cells, strict=True)
            if c != "-"
        },
    )


# ---------------------------------------------------------------------------


# States kept per call when the exact programme is out of reach (S8, S16): the plan
# found is a feasible one, an upper bound; the relaxation gives the lower.
BEAM = 30
# Items up to which the exact programme runs (demo: 79 items, minutes).
EXACT_ITEMS = 100


@dataclass(frozen=True, slots=True)
class Floor:
    """One floor figure with what it is: ``exact``, or a bound (the floor is at least
    ``low`` and at most ``high``, the cost of a plan found)."""

    mode: str
    low: int
    high: int | None  # None: no plan's cost on this server is modelled (ring, default)
    exact: bool
    plan: Plan  # the best plan found (exact when ``exact``) on the exact-prefix model

    def text(self) -> str:
        if self.exact:
            return f"{self.low:,} (exact)"
        if self.high is None:
            return f"at least {self.low:,} (bound: the --swa-full floor's lower bound)"
        return f"{self.low:,} to {self.high:,} (bound: the floor lies between)"


def floor_for(script: FloorScript, window: int, mode: str, promises: Sequence[str]) -> Floor:
    if mode not in MODES:
        raise ValueError(
            f"mode {mode!r}: the floor is computed for {', '.join(MODES)} (the recurrent "
            "modes run a model whose tokenizer was not measured)"
        )
    found = solve(script, window, promises, beam=BEAM)
    if not found.exact and len(script.items) <= EXACT_ITEMS:
        found = solve(script, window, promises, bound=found.overhead)
    low = found.overhead if found.exact else lower_bound(script, window, promises)
    if mode == "swa-full":
        return Floor(mode, low, found.overhead, found.exact, found)
    if mode in ("ring", "default"):
        # At least the exact-prefix floor; a plan's cost on the ring is not modelled, so
        # no plan found there bounds it from above.
        return Floor(mode, low, None, False, found)
    relaxed = lower_bound(script, window, promises, free_events=True)
    return Floor(mode, relaxed, found.overhead, relaxed == found.overhead, found)


def describe(script: FloorScript, plan: Plan) -> list[str]:
    items = script.items
    lines = []
    for e in plan.events:
        kinds: dict[str, int] = {}
        for i in e.removed:
            kinds[items[i].kind] = kinds.get(items[i].kind, 0) + 1
        what = ", ".join(f"{n} {k}" for k, n in sorted(kinds.items()))
        cut = items[e.cut]
        lines.append(
            f"turn {e.turn} call {e.step}: cut at the {cut.kind} of turn {cut.turn} "
            f"(removed {what}), {e.reprocessed:,} re-processed"
        )
    return lines


def ratio(overhead: int, f: Floor) -> str:
    """``overhead / floor``: one figure when exact, else the range the bounds give."""

    def r(x: int) -> str:
        return f"{overhead / x:.2f}x" if x > 0 else "inf"

    if f.exact:
        return r(f.low)
    if f.high is None:
        return f"at most {r(f.low)}"
    return f"{r(f.high)} to {r(f.low)}"


def print_prices(script: FloorScript, window: int, mode: str, sakur4s: Floor) -> None:
    """The quality dial's price (the newest answered result kept, as the planner's
    ``live_results`` 1 keeps it below the trigger; here at any pressure, so an upper
    figure for the dial) and foresight's (the same promises planned without knowing
    which reads later turns ask about: every need re-reads)."""
    dial = floor_for(script, window, mode, KNOWN)
    blind = without_foresight(script)
    print(f"  {DIAL[0]}: {dial.text()}")
    for label, promises in (("Sakur4's promises", PROMISES), ("with the quality dial", KNOWN)):
        plan = floor_for(blind, window, mode, promises).plan
        print(
            f"  without foresight, {label}: a plan at {plan.overhead:,} "
            f"({len(plan.rereads)} re-reads, {plan.reread_tokens:,} tokens; "
            f"{'its best' if plan.exact else 'found, not proven best'})"
        )
    print(f"  price of the quality dial: {_price(dial, sakur4s)}")


def _price(f: Floor, g: Floor) -> str:
    if f.exact and g.exact:
        return f"{f.low - g.low:+,}"
    if f.high is None or g.high is None:
        return "not bounded (no plan's cost is modelled on this server)"
    return f"between {f.low - g.high:+,} and {f.high - g.low:+,}"


def parse(argv: Sequence[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--size", default="demo", help="script preset: demo, S8, S16, S32")
    p.add_argument("--mode", default="swa-full", help=", ".join(MODES))
    p.add_argument("--sizes", choices=("measured", "estimated"), default="measured")
    p.add_argument("--measure", action="store_true", help="measure the sizes on a server first")
    p.add_argument("--plan", action="store_true", help="print the optimal plan's events")
    p.add_argument(
        "--prices",
        action="store_true",
        help="also the quality dial's and foresight's prices (minutes at S8)",
    )
    return p.parse_args(argv)


def main(argv: Sequence[str]) -> int:
    a = parse(argv)
    try:
        params = preset(a.size)
        if a.measure:
            print(f"sizes measured -> {measure(a.size)}")
        session = generate(params)
        sizes = load_sizes(params.key, session, a.sizes)
        script = build(params.name, session, sizes)
        floors = [(label, floor_for(script, params.window, a.mode, ps)) for label, ps in VARIANTS]
    except (ValueError, Infeasible) as e:
        print(f"bench/floor.py: {e}", file=sys.stderr)
        return 2
    print(f"== floor: {params.describe()}")
    print(
        f"mode {a.mode}, window {params.window:,}; sizes: {sizes.get('source', '?')}; "
        f"baseline {script.baseline():,} processed (the model's: every token once)"
    )
    for label, f in floors:
        p = f.plan
        print(
            f"  {label}: {f.text()}; its plan: re-processed {p.reprocessed:,}, "
            f"{len(p.rereads)} re-reads ({p.reread_tokens:,} tokens), {len(p.events)} events"
        )
    for (label, f), (_, g) in zip(floors[1:], floors[:-1], strict=True):
        print(f"  price of '{label}' over the weaker: {_price(f, g)}")
    best = floors[-1][1]
    if a.prices:
        print_prices(script, params.window, a.mode, floors[-1][1])
    if a.plan:
        print("the plan (Sakur4's promises):" + ("" if best.plan.exact else " (found, not proven)"))
        for line in describe(script, best.plan):
            print("    " + line)
    row = FIGURES.get((a.size, a.mode))
    if row:
        source, figs = row
        print(f"strategies / floor (Sakur4's promises), figures from {source}:")
        for name, fig in figs.items():
            print(f"  {name:14} {fig.overhead:>9,} {fig.kind:9}  {ratio(fig.overhead, best)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
