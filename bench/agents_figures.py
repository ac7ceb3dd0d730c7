"""bench/agents.py's records and figures: each call as the server counted it, per agent
its prompt tokens, reused, processed and reuse %, what a restart made it process again,
the table and issue 37's goals, each met or missed with its figure."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Call:
    """One call as the server counted it (``failed``: why it got no answer)."""

    agent: int
    index: int  # overall, in the interleaved order
    turn: int
    step: int
    prompt_tokens: int
    reused: int
    processed: int
    failed: str | None = None
    session: str | None = None  # the receipt's session (Sakur4)


@dataclass
class RunSpec:
    model: str
    mode: str
    np_: int
    strategy: str
    window: int
    cram: int
    restart_at: int | None


@dataclass
class Run:
    spec: RunSpec
    agents: list[str]
    calls: list[Call]
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class AgentFigures:
    prompt: int
    reused: int
    processed: int
    failed: int

    @property
    def reuse(self) -> float:
        return self.reused / self.prompt if self.prompt else 0.0


def per_agent(run: Run) -> list[AgentFigures]:
    out = []
    for i in range(len(run.agents)):
        mine = [c for c in run.calls if c.agent == i]
        out.append(
            AgentFigures(
                sum(c.prompt_tokens for c in mine),
                sum(c.reused for c in mine),
                sum(c.processed for c in mine),
                sum(c.failed is not None for c in mine),
            )
        )
    return out


def summed(figures: Sequence[AgentFigures]) -> AgentFigures:
    return AgentFigures(
        *(sum(getattr(x, f) for x in figures) for f in AgentFigures.__dataclass_fields__)
    )


def total(run: Run) -> AgentFigures:
    return summed(per_agent(run))


@dataclass(frozen=True)
class Resume:
    """An agent's first call after a restart: what the server held for it before (its
    last prompt), what that call re-processed of it (new tokens aside)."""

    agent: int
    held: int
    reprocessed: int

    @property
    def share(self) -> float:
        return self.reprocessed / self.held if self.held else 0.0


def resumes(run: Run) -> list[Resume]:
    at = run.spec.restart_at
    if at is None:
        return []
    out = []
    for i in range(len(run.agents)):
        before = [c for c in run.calls if c.agent == i and c.index < at and not c.failed]
        after = [c for c in run.calls if c.agent == i and c.index >= at and not c.failed]
        if not before or not after:
            continue
        held, first = before[-1].prompt_tokens, after[0]
        new = max(0, first.prompt_tokens - held)
        out.append(Resume(i, held, min(held, max(0, first.processed - new))))
    return out


def wrong_sessions(run: Run) -> list[Call]:
    """Sakur4's answers whose receipt names another session than the agent's."""
    if run.spec.strategy != "sakur4":
        return []
    return [c for c in run.calls if c.session != run.agents[c.agent]]


def ceiling(run: Run) -> list[AgentFigures]:
    """Per agent, the most any cache could give on an unmanaged (straight) run: every call
    reusing all of its agent's previous prompt, so only the first prompt and each call's
    new tokens are processed."""
    out = []
    for i in range(len(run.agents)):
        sizes = [c.prompt_tokens for c in run.calls if c.agent == i and not c.failed]
        least = sizes[0] + sum(max(0, b - a) for a, b in itertools.pairwise(sizes)) if sizes else 0
        out.append(AgentFigures(sum(sizes), sum(sizes) - least, least, 0))
    return out


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def table(runs: Sequence[Run]) -> str:
    """One markdown table: a row per run, each agent's reuse % by the server's counts."""
    k = max(len(r.agents) for r in runs)
    head = ["model", "mode", "-np", "-cram MiB", "strategy"]
    head += [f"a{i + 1} reuse" for i in range(k)]
    head += ["prompt", "reused", "processed", "reuse", "processed / straight", "failed"]
    head += ["restart: re-processed / held"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    straight = {
        (r.spec.model, r.spec.mode, r.spec.np_, r.spec.restart_at): total(r).processed
        for r in runs
        if r.spec.strategy == "straight"
    }
    for r in runs:
        s, t = r.spec, total(r)
        base = straight.get((s.model, s.mode, s.np_, s.restart_at))
        ratio = f"{t.processed / base:.2f}x" if base else "-"
        if s.strategy == "straight" and base:  # the ceiling beside the runs it bounds
            c = ceiling(r)
            best = summed(c)
            cells = [s.model, s.mode, str(s.np_), str(s.cram), "(ceiling)"]
            cells += [f"{a.reuse:.1%}" for a in c] + ["-"] * (k - len(r.agents))
            cells += [f"{best.prompt:,}", f"{best.reused:,}", f"{best.processed:,}"]
            cells += [f"{best.reuse:.1%}", f"{best.processed / base:.2f}x", "-", "-"]
            lines.append(_row(cells))
        res = resumes(r)
        back = (
            f"{sum(x.reprocessed for x in res):,} / {sum(x.held for x in res):,} "
            f"({sum(x.reprocessed for x in res) / max(1, sum(x.held for x in res)):.1%})"
            if res
            else "-"
        )
        cells = [s.model, s.mode, str(s.np_), str(s.cram), s.strategy]
        cells += [f"{a.reuse:.1%}" for a in per_agent(r)] + ["-"] * (k - len(r.agents))
        cells += [f"{t.prompt:,}", f"{t.reused:,}", f"{t.processed:,}", f"{t.reuse:.1%}"]
        cells += [ratio, str(t.failed), back]
        lines.append(_row(cells))
    return "\n".join(lines)


def goals(runs: Sequence[Run]) -> list[str]:
    """Issue 37's goals, each met or missed with its figure, on the runs there are."""
    out = []
    by = {
        (r.spec.model, r.spec.mode, r.spec.np_, r.spec.strategy, r.spec.restart_at): r for r in runs
    }
    for (model, mode, np_, strategy, at), r in sorted(by.items(), key=str):
        if model != "full" or mode != "default" or at is not None:
            continue
        low = min(a.reuse for a in per_agent(r))
        st = by.get((model, mode, np_, "straight", at))
        best = f" (ceiling {min(a.reuse for a in ceiling(st)):.1%})" if st is not None else ""
        out.append(
            f"full attention, -np {np_}, -cram scaled, {strategy}: every agent reuses >= 90%: "
            f"lowest {low:.1%}{best} -> {'met' if low >= 0.9 else 'MISSED'}"
        )
        if strategy == "sakur4" and st is not None and total(st).processed:
            q = total(r).processed / total(st).processed
            out.append(
                f"full attention, -np {np_}, -cram scaled: Sakur4 processes <= 0.3x straight: "
                f"{total(r).processed:,} / {total(st).processed:,} = {q:.2f}x -> "
                f"{'met' if q <= 0.3 else 'MISSED'}"
            )
        hr = by.get((model, mode, np_, "hearth", at))
        if strategy == "sakur4" and hr is not None:
            ok = total(r).processed <= total(hr).processed
            out.append(
                f"full attention, -np {np_}, -cram scaled: Sakur4 <= hearth's processed: "
                f"{total(r).processed:,} vs {total(hr).processed:,} -> "
                f"{'met' if ok else 'MISSED'}"
            )
    for r in runs:
        res = resumes(r)
        if r.spec.model == "full" and res:
            held = sum(x.held for x in res)
            again = sum(x.reprocessed for x in res)
            out.append(
                f"full attention, {r.spec.mode}, -np {r.spec.np_}, {r.spec.strategy}, restart "
                f"before call {r.spec.restart_at}: re-processed <= 1% of what was held: "
                f"{again:,} of {held:,} = {again / max(1, held):.1%} -> "
                f"{'met' if again <= 0.01 * held else 'MISSED'}"
            )
    failed = sum(total(r).failed for r in runs)
    out.append(f"zero failed turns: {failed} failed -> {'met' if not failed else 'MISSED'}")
    wrong = sum(len(wrong_sessions(r)) for r in runs)
    checked = sum(len(r.calls) for r in runs if r.spec.strategy == "sakur4")
    out.append(
        f"every Sakur4 answer's receipt names its agent's session: {wrong} of {checked} did not "
        f"-> {'met' if not wrong else 'MISSED'}"
    )
    return out
