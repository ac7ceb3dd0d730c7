"""Plan time per turn for long sessions: 1k, 10k and 100k episodes, 200k-token windows.

    .venv/bin/python bench/planner.py [--repeat N]

Each session is a coding-agent transcript (a user message every few tool
rounds) whose older episodes already sit down the ladder by age — Live, Masked,
Referenced, then Archived — sized so the prompt is at 80% of the window, above
the CacheFirst trigger: the planner takes the pressure path. The same turn is
also planned in a window twice as large ("fits": the below-trigger path, the
one most turns take).
The server's cache is the prompt as rendered, with checkpoints every 8,192
tokens and at its end (a checkpoint ring). Prints the median plan time per turn,
per episode, and the median render time. The token counter is the cheap
four-characters-a-token estimate, so the figures are the engine's own cost.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from dataclasses import replace
from itertools import accumulate
from types import MappingProxyType

from sakur4.engine import (
    Checkpoints,
    Episode,
    Kind,
    Layout,
    Plan,
    PlanSettings,
    Policy,
    Span,
    Tier,
    choose_profile,
    plan_turn,
    render_messages,
)

WINDOW = 200_000
FILL = 0.80
# Age bands, newest first: how many episodes sit at each tier.
BANDS = ((Tier.LIVE, 240), (Tier.MASKED, 900), (Tier.REFERENCED, 2400))


def count(text: str) -> int:
    return (len(text) + 3) // 4


def transcript(n: int, result_tokens: int) -> list[Episode]:
    eps: list[Episode] = [Episode(0, "system", Kind.MESSAGE, "You are a coding agent. " * 40, 240)]
    i = 1
    while len(eps) < n:
        if i % 13 == 1:
            text = f"please look at module {i} and fix the failing test"
            eps.append(Episode(i, "user", Kind.MESSAGE, text, count(text)))
            i += 1
            continue
        args = json.dumps({"path": f"src/module_{i}.py"})
        eps.append(
            Episode(
                i,
                "assistant",
                Kind.TOOL_CALL,
                args,
                count(args),
                tool_name="read_file",
                tool_call_id=f"call_{i}",
            )
        )
        body = f"def f{i}(x):\n    return x + {i}\n" * (result_tokens // 8 + 1)
        body = body[: result_tokens * 4]
        eps.append(
            Episode(
                i + 1,
                "tool",
                Kind.TOOL_RESULT,
                body,
                count(body),
                tool_name="read_file",
                tool_call_id=f"call_{i}",
                depends_on=(i,),
            )
        )
        text = f"module {i} reads fine; next I will check its caller"
        eps.append(Episode(i + 2, "assistant", Kind.MESSAGE, text, count(text)))
        i += 3
    eps = eps[:n]
    # Age bands: the newest episodes Live, older ones further down the ladder; a
    # call shares its result's tier so pairs stay consistent, as the planner keeps them.
    tiers = [Tier.ARCHIVED] * n
    k = n
    for tier, width in BANDS:
        for j in range(max(1, k - width), k):
            tiers[j] = tier
        k = max(1, k - width)
    tiers[0] = Tier.LIVE
    for j, e in enumerate(eps):
        if e.kind == Kind.TOOL_CALL and j + 1 < n:
            tiers[j] = tiers[j + 1]
    return [replace(e, tier=t) for e, t in zip(eps, tiers, strict=True)]


def session(n: int) -> tuple[list[Episode], Layout, Checkpoints]:
    """A session of ``n`` episodes whose cached prompt is at FILL of the window."""
    # The prompt grows linearly with the Live results' size: solve from two samples.
    a = _cached(transcript(n, 100))[1].end
    b = _cached(transcript(n, 1100))[1].end
    size = 100 + int((WINDOW * FILL - a) * 1000 / (b - a))
    eps, layout = _cached(transcript(n, size))
    ring = Checkpoints.at([*range(0, layout.end, 8192), layout.end])
    return eps, layout, ring


def _cached(eps: list[Episode]) -> tuple[list[Episode], Layout]:
    plan = _plan(eps, None, Checkpoints.every())
    still = replace(plan, steps=(), moves=MappingProxyType({}), joined_anchors=())
    prompt = render_messages(eps, [], still)
    sizes = [
        4
        + count(m["content"] or "")
        + sum(count(c["function"]["arguments"]) for c in m.get("tool_calls", ()))
        for m in prompt.messages
    ]
    ends = list(accumulate(sizes))  # the messages laid end to end
    spans = (Span(k, e - n, e) for k, n, e in zip(prompt.keys, sizes, ends, strict=True))
    return eps, Layout(tuple(spans))


def _plan(
    eps: list[Episode], layout: Layout | None, cps: Checkpoints, window: int = WINDOW
) -> Plan:
    settings = PlanSettings(
        window, choose_profile("detected"), Policy(cut_tolerance=4096, live_results=2)
    )
    return plan_turn(eps, settings, anchors=[], layout=layout, checkpoints=cps, count=count)


def median_ms(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def machine_ms() -> float:
    """A fixed pure-Python loop, to read the figures against this machine's speed."""

    def loop() -> int:
        x = 0
        for i in range(1_000_000):
            x += i
        return x

    return median_ms(loop, 3)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=9)
    args = ap.parse_args()
    print(f"window {WINDOW:,} tokens, CacheFirst, checkpoint ring every 8,192 tokens")
    print(f"this machine: a 1M-step Python loop takes {machine_ms():.0f} ms")
    print(
        f"{'episodes':>9} {'turn':>10} {'prompt':>8} {'verdict':>10} {'steps':>6} "
        f"{'plan ms':>8} {'µs/episode':>10} {'render ms':>9}"
    )
    for n in (1_000, 10_000, 100_000):
        eps, layout, ring = session(n)
        new = Episode(n, "user", Kind.MESSAGE, "and now the other test, please", 8)
        turn = [*eps, new]
        for label, window in (("pressured", WINDOW), ("fits", WINDOW * 2)):
            plan = _plan(turn, layout, ring, window)
            ms = median_ms(
                lambda t=turn, w=window, lay=layout, r=ring: _plan(t, lay, r, w), args.repeat
            )
            render = median_ms(lambda t=turn, p=plan: render_messages(t, [], p), args.repeat)
            print(
                f"{n:>9,} {label:>10} {layout.end:>8,} {plan.verdict:>10} "
                f"{len(plan.steps):>6} {ms:>8.1f} {ms * 1000 / n:>10.2f} {render:>9.1f}"
            )


if __name__ == "__main__":
    main()
