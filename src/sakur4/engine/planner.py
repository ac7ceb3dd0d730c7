"""The cut planner: which episodes step down this turn, and where the prompt may change.

Changing the prompt at token position p makes the server re-process everything
after the latest point it can resume from at or before p. So a plan is chosen
by its cut c (a resume point): it changes only messages that start at or after
c, it costs the tokens after c, and once that is paid, stepping down more after
c is almost free — the target is a floor, not a stopping point.

- Pressure ≥ trigger: the requested cut is the latest message start from which
  one-rung steps reclaim down to target; the chosen cut is a resume point at or
  before it — within the cut tolerance, the one cheapest per token reclaimed.
  Every steppable episode after the cut steps one rung; steps whose stub
  outgrows the content are taken oldest first while the prompt stays in the
  window (or at target, once target is reached), so short messages still reach
  Referenced (the seed's deadlock).
- Below the trigger: only answered tool calls and results step, and only when
  the extra re-processing is within the tolerance and no more than the tokens
  reclaimed — bulky material the conversation has moved past, lying late.
- Protected, never stepped: pinned episodes, the harness's leading system
  prompt, the latest user message, whatever the assistant has not answered yet,
  and the ``live_results`` most recent tool results with their calls.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import Literal

from sakur4.engine.anchors import Anchor, AnchorBlock, render_anchor_block
from sakur4.engine.checkpoints import Checkpoints, Layout
from sakur4.engine.episode import Episode, Kind
from sakur4.engine.folds import PREAMBLE, shown_text
from sakur4.engine.messages import (
    block_ids_of,
    group_key,
    head_key,
    riding_key,
    shape_of,
    visible_tiers,
)
from sakur4.engine.profiles import Profile
from sakur4.engine.tiers import Held, Step, Tier, reclaimed, refusal
from sakur4.errors import AnchorBudgetError, InputError

# Template tokens per message (role markers), used only to size messages the
# server has not seen; messages in the cached layout are sized by their spans.
MESSAGE_OVERHEAD = 4

Count = Callable[[str], int]


@dataclass(frozen=True, slots=True)
class Policy:
    """Choices the §11 benchmark ranked (docs/design/eviction.md, simulated runs).

    ``tidy``: below the trigger, step answered tool material while it is nearly
    free (off: act only at the trigger — "batch at trigger"). ``tidy_by``: among
    the cuts whose extra re-processing is within the tolerance and the gain, take
    the one with the largest gain net of that extra (``"net"``), or the largest
    gain (``"gain"``, the first version: it walked the cut back to the head as long
    as the gain covered the re-processing). ``join``: anchors riding at the tail
    join the head block when the plan steps anyway and the tokens joining
    re-processes beyond the plan's own are at most what riding costs over
    ``RIDER_PAYBACK_CALLS`` calls (``"payback"``), or only when the plan
    re-processes from the head anyway (``"head"``, the first version: on a server
    that always keeps the head that is never, and the rider's tokens were
    re-processed on every call).
    """

    tidy: bool = True
    tidy_by: Literal["net", "gain"] = "net"
    join: Literal["payback", "head"] = "payback"


# Read at every plan: bench/eviction.py swaps it to measure the alternatives.
POLICY = Policy()
# A session that pins an anchor goes on for more calls than this (docs/design/eviction.md).
RIDER_PAYBACK_CALLS = 8

_MESSAGE, _CALL, _RESULT = Kind.MESSAGE, Kind.TOOL_CALL, Kind.TOOL_RESULT
_NEXT = {t: Tier(min(t + 1, Tier.DROPPED)) for t in Tier}


class Verdict(StrEnum):
    """What a plan achieved (SPEC §7)."""

    FITS = "fits"
    RECLAIMED = "reclaimed"
    STEPPING = "stepping"
    REFUSED = "refused"


@dataclass(frozen=True, slots=True)
class Plan:
    """One turn's decision: the steps, the cut, the predicted reuse, and why."""

    verdict: Verdict
    profile: Profile
    window: int
    prompt_tokens: int
    new_tokens: int
    target_tokens: int
    steps: tuple[Step, ...]
    held: tuple[Held, ...]
    requested_cut: int | None
    chosen_cut: int | None
    reused: int
    reprefill: int
    block_anchors: tuple[int, ...]
    joined_anchors: tuple[int, ...]
    anchor_budget: int
    reason: str
    moves: Mapping[int, Tier] = field(
        default_factory=lambda: MappingProxyType({}), compare=False, repr=False
    )

    @property
    def pressure(self) -> float:
        """Prompt tokens before the plan, as a fraction of the window."""
        return self.prompt_tokens / self.window

    def tier_of(self, episode: Episode) -> Tier:
        """The tier ``episode`` has after this plan."""
        return self.moves.get(episode.id, episode.tier)


@dataclass(frozen=True, slots=True)
class _Candidate:
    """A prompt-changing step: one episode, or a tool call with its results."""

    pos: int  # where the message it changes starts
    members: tuple[int, ...]
    befores: tuple[int, ...]
    afters: tuple[int, ...]
    tool: bool

    @property
    def delta(self) -> int:
        """Tokens the step saves now; negative when a stub outgrows its content."""
        return sum(self.befores) - sum(self.afters)


class _Scan:
    """Candidates pulled so far, latest first, with their running positive gain."""

    def __init__(self, source: Iterator[_Candidate]) -> None:
        self.source = source
        self.items: list[_Candidate] = []
        self._neg_pos: list[int] = []  # -pos, ascending, for bisect
        self._gains = [0]  # positive gain of items[:k]
        self.exhausted = False

    @property
    def gained(self) -> int:
        return self._gains[-1]

    def pull(self) -> _Candidate | None:
        c = None if self.exhausted else next(self.source, None)
        if c is None:
            self.exhausted = True
            return None
        self.items.append(c)
        self._neg_pos.append(-c.pos)
        self._gains.append(self._gains[-1] + max(c.delta, 0))
        return c

    def until(self, pos: int) -> None:
        """Pull until every candidate at or after ``pos`` is in."""
        while (not self.items or self.items[-1].pos >= pos) and self.pull() is not None:
            pass

    def gain(self, pos: int) -> int:
        """Positive gain of the candidates at or after ``pos`` (after :meth:`until`)."""
        return self._gains[bisect_right(self._neg_pos, -pos)]


def plan_turn(
    episodes: Sequence[Episode],
    *,
    anchors: Sequence[Anchor],
    layout: Layout | None,
    checkpoints: Checkpoints,
    window: int,
    profile: Profile,
    count: Callable[[str], int],
    cut_tolerance: int,
    live_results: int,
) -> Plan:
    """Plan this turn so the prompt fits, changing it only after a point the server resumes from.

    ``layout`` is the prompt the server last received for this session (None if
    it holds nothing); ``count`` sizes stubs. Pure: the same inputs give the same
    plan.
    """
    if window <= 0 or cut_tolerance < 0 or live_results < 0:
        raise InputError("window must be positive, cut_tolerance and live_results not negative")
    target_tokens = int(window * profile.target)
    anchor_budget = target_tokens - count(PREAMBLE)
    planner = _Planner(episodes, count, layout, checkpoints, window, profile, target_tokens)
    # Anchors the cached head does not hold ride at the tail: pinning one must
    # not by itself re-process the head (SPEC §7 Anchors).
    cached = block_ids_of(layout.spans[0].key) if layout and layout.spans else None
    riding = [a.id for a in anchors if a.id not in cached] if cached is not None else []
    try:
        block = render_anchor_block(anchors, anchor_budget, riding)
    except AnchorBudgetError as e:
        planner.measure((), "", "", sum(a.tokens for a in anchors))
        return planner.plan(Verdict.REFUSED, [], [], None, str(e), anchor_budget, block=None)
    planner.measure(
        block.head_ids, block.head, block.riding, count(block.head) if block.head else 0
    )
    return planner.decide(cut_tolerance, live_results, anchor_budget, block)


class _Planner:
    """One plan_turn call's working state; not shared, not kept."""

    def __init__(
        self,
        episodes: Sequence[Episode],
        count: Count,
        layout: Layout | None,
        checkpoints: Checkpoints,
        window: int,
        profile: Profile,
        target_tokens: int,
    ) -> None:
        self.episodes = episodes
        self.shape = shape_of(episodes)
        self.count = count
        self.layout = layout
        self.checkpoints = checkpoints
        self.window = window
        self.profile = profile
        self.target = target_tokens
        self.tiers = [e.tier for e in episodes]
        self.shown = visible_tiers(episodes, self.tiers, self.shape)
        self._sizes: dict[tuple[int, Tier], int] = {}

    def size(self, i: int, tier: Tier) -> int:
        """Estimated tokens episode ``i`` renders to at ``tier``."""
        if tier is Tier.LIVE:
            return self.episodes[i].tokens
        if tier >= Tier.ARCHIVED:
            return 0
        key = (i, tier)
        got = self._sizes.get(key)
        if got is None:
            got = self._sizes[key] = self.count(shown_text(self.episodes[i], tier))
        return got

    def measure(
        self, block_ids: Sequence[int], block_head: str, block_riding: str, anchor_tokens: int
    ) -> None:
        """Lay out the prompt as it is now, against the cached layout.

        Sets ``total`` (prompt tokens with no steps), ``first_change`` (where it
        already differs from the cache: new messages, a moved rider), ``base``
        (where the server would resume with no steps) and each group's start.
        ``anchor_tokens`` sizes the block at the head if the server has not seen it.
        """
        eps, shape, shown = self.episodes, self.shape, self.shown
        keys = [head_key(shape.head, eps, shown, block_ids, block_head)]
        owners = [-1]
        archived = Tier.ARCHIVED
        bounds = [*shape.starts, len(eps)]
        for g in range(len(shape.starts)):
            a, b = bounds[g], bounds[g + 1]
            if b - a == 1 and shown[a] >= archived:
                continue  # most of a long session: nothing shown, no message
            k = group_key(range(a, b), eps, shown)
            if k:
                keys.append(k)
                owners.append(g)
        if block_riding:
            keys.append(riding_key(block_riding))
            owners.append(-2)
        spans = self.layout.spans if self.layout else ()
        m = 0
        while m < len(keys) and m < len(spans) and keys[m] == spans[m].key:
            m += 1
        self.group_start = [-1] * len(shape.starts)
        for j in range(m):
            if owners[j] >= 0:
                self.group_start[owners[j]] = spans[j].start
        pos = spans[m].start if m < len(spans) else (spans[-1].end if spans else 0)
        self.first_change = pos
        known = {s.key: s.end - s.start for s in spans[m:]}
        for j in range(m, len(keys)):
            g = owners[j]
            if g >= 0:
                self.group_start[g] = pos
            size = known.get(keys[j])
            if size is None:
                size = self._estimate(g, anchor_tokens, block_riding)
            pos += size
        self.total = pos
        cached_end = self.layout.end if self.layout else 0
        self.cached_end = cached_end
        self.base = self.checkpoints.latest_at_or_before(min(self.first_change, cached_end))

    def _estimate(self, g: int, anchor_tokens: int, block_riding: str) -> int:
        if g == -2:
            return self.count(block_riding) + MESSAGE_OVERHEAD
        members = self.shape.head if g == -1 else self.shape.members(g)
        size = sum(self.size(i, self.shown[i]) for i in members) + MESSAGE_OVERHEAD
        if g == -1:
            size += self.count(PREAMBLE) + anchor_tokens
        return size

    # -- what may step ---------------------------------------------------

    def protected(self, live_results: int) -> set[int]:
        """Indices that never step, found from the tail back (pinned is checked per step)."""
        eps, shape = self.episodes, self.shape
        keep = set(shape.head)
        last_assistant = last_user = -1
        results: list[int] = []
        for i in range(len(eps) - 1, -1, -1):
            e = eps[i]
            kind = e.kind
            if kind is _CALL or (kind is _MESSAGE and e.role == "assistant"):
                if last_assistant < 0:
                    last_assistant = i
            elif kind is _MESSAGE and e.role == "user":
                if last_user < 0:
                    last_user = i
            elif kind is _RESULT and len(results) < live_results:
                results.append(i)
            if last_assistant >= 0 and last_user >= 0 and len(results) >= live_results:
                break
        if last_user >= 0:
            keep.add(last_user)
        keep.update(range(last_assistant + 1, len(eps)))  # not answered: not read yet
        keep.update(results)
        for i in [i for i in keep if shape.call_of[i] >= 0]:
            keep.add(shape.call_of[i])  # a kept result keeps its call: the pair stays readable
        return keep

    def candidates(self, keep: set[int]) -> Iterator[_Candidate]:
        """Every prompt-changing one-rung step, latest message first.

        Lazy, because most turns only need the candidates near the tail.
        """
        eps, shape, tiers, shown = self.episodes, self.shape, self.tiers, self.shown
        for i in range(len(eps) - 1, -1, -1):
            t = tiers[i]
            if t >= Tier.ARCHIVED or i in keep:
                continue
            e = eps[i]
            if e.pinned or shown[i] is not t:
                continue  # pinned, or rendered otherwise (a repaired pair): leave it
            nxt = _NEXT[t]
            if refusal(nxt, droppable=e.droppable, live_dependent=False) is not None:
                continue
            pos = self.group_start[shape.group_of[i]]
            tool = e.kind is _CALL or e.kind is _RESULT
            if nxt is not Tier.ARCHIVED or not tool:
                yield _Candidate(pos, (i,), (self.size(i, t),), (self.size(i, nxt),), tool)
            elif e.kind is _CALL:
                # A call and its results leave the prompt together, or not at all.
                rest = shape.results_of.get(i, ())
                if all(j not in keep and not eps[j].pinned and tiers[j] >= t for j in rest):
                    unit = (i, *(j for j in rest if tiers[j] is Tier.REFERENCED))
                    befores = tuple(self.size(j, Tier.REFERENCED) for j in unit)
                    yield _Candidate(pos, unit, befores, (0,) * len(unit), True)

    def drops(self, keep: set[int]) -> tuple[list[Step], list[Held]]:
        """Archived → Dropped, behind the final rung's gate; free, the prompt shows neither."""
        eps, tiers = self.episodes, self.tiers
        ready = [
            i
            for i, e in enumerate(eps)
            if e.droppable and tiers[i] is Tier.ARCHIVED and i not in keep and not e.pinned
        ]
        if not ready:
            return [], []
        needed: set[int] = set()
        for i, e in enumerate(eps):
            if tiers[i] is Tier.LIVE:
                needed.update(e.depends_on)
                c = self.shape.call_of[i]
                if c >= 0:
                    needed.add(eps[c].id)
        steps: list[Step] = []
        held: list[Held] = []
        for i in ready:
            e = eps[i]
            why = refusal(Tier.DROPPED, droppable=True, live_dependent=e.id in needed)
            if why is None:
                steps.append(Step(e.id, Tier.ARCHIVED, Tier.DROPPED, 0, 0))
            else:
                held.append(Held(e.id, Tier.ARCHIVED, why))
        return steps, held

    # -- choosing ----------------------------------------------------------

    def resume_points(self, upper: int, scan: _Scan) -> Iterator[int]:
        """Where the server can resume, at or before ``upper``, latest first; 0 last."""
        last = -1
        for p in self._points(upper, scan):
            if p != last:
                yield p
                last = p

    def _points(self, upper: int, scan: _Scan) -> Iterator[int]:
        if self.layout is not None:
            if self.checkpoints.every_boundary:
                yield upper
                k = 0
                while k < len(scan.items) or scan.pull():
                    p = scan.items[k].pos
                    k += 1
                    if p <= upper:
                        yield p
            else:
                ps = self.checkpoints.positions
                for k in range(bisect_right(ps, min(upper, self.cached_end)) - 1, -1, -1):
                    yield ps[k]
        yield 0

    def decide(
        self, tolerance: int, live_results: int, anchor_budget: int, block: AnchorBlock
    ) -> Plan:
        keep = self.protected(live_results)
        drops, held = self.drops(keep)
        pressured = self.total >= self.window * self.profile.trigger
        if pressured:
            taken, requested, note = self._relieve(_Scan(self.candidates(keep)), tolerance)
            if not taken:
                why = note or "nothing outside the protected tail and pinned episodes can step"
                return self.plan(Verdict.REFUSED, [], held, requested, why, anchor_budget, block)
        elif POLICY.tidy:
            tools = (c for c in self.candidates(keep) if c.tool and c.delta > 0)
            taken, requested, note = self._tidy(_Scan(tools), tolerance)
        else:
            taken, requested, note = [], None, ""
        steps = [
            Step(self.episodes[i].id, self.tiers[i], _NEXT[self.tiers[i]], b, a)
            for c in taken
            for i, b, a in zip(c.members, c.befores, c.afters, strict=True)
        ]
        steps.sort(key=lambda s: s.episode_id)
        new_total = self.total - sum(c.delta for c in taken)
        if not pressured:
            verdict = Verdict.FITS
        elif new_total <= self.target:
            verdict = Verdict.RECLAIMED
        else:
            verdict = Verdict.STEPPING
        first = min([self.first_change, *(c.pos for c in taken)])
        return self.plan(
            verdict,
            steps + drops,
            held,
            requested,
            note,
            anchor_budget,
            block,
            first=first,
            new_total=new_total,
            changed=bool(taken),
        )

    def _relieve(self, scan: _Scan, tolerance: int) -> tuple[list[_Candidate], int | None, str]:
        """Pressure: reclaim down to target from the cheapest cut that can."""
        need = self.total - self.target
        requested = None
        while (c := scan.pull()) is not None:
            if scan.gained >= need:
                requested = c.pos  # the latest cut from which one-rung steps reach target
                break
        if not scan.items:
            return [], None, ""
        reachable = requested is not None
        if requested is None:
            requested = scan.items[-1].pos  # out of reach: step everything that can
        upper = min(requested, self.first_change)
        points = self.resume_points(upper, scan)
        cut = next(points)
        if reachable:
            # Within the tolerance, the cut cheapest per token reclaimed: going back a
            # little further can pick up a bulky result for little extra re-processing.
            best: tuple[float, int] | None = None
            p: int | None = cut
            while p is not None and upper - p <= tolerance:
                scan.until(p)
                g = scan.gain(p)
                if g >= need and g > 0:
                    score = (self.total - g - p) / g
                    if best is None or score < best[0]:
                        best = (score, p)
                p = next(points, None)
            if best is not None:
                cut = best[1]
        note = ""
        if upper - cut > tolerance:
            note = (
                f"nearest resume point {cut} lies {upper - cut} tokens before the requested "
                f"cut, beyond the tolerance of {tolerance}"
            )
        scan.until(cut)
        region = [c for c in scan.items if c.pos >= cut]
        taken = [c for c in region if c.delta >= 0]
        running = self.total - sum(c.delta for c in taken)
        if running <= self.target:
            cap = self.target  # growing steps may not undo reaching the target
        else:
            # Target out of reach this turn: invest in stubs that pay back on the
            # next turns, but only into half the headroom — sizes are estimates,
            # and the server needs room to answer.
            floor = max(self.total, int(self.window * self.profile.trigger))
            cap = floor + (self.window - floor) // 2
        for c in sorted((c for c in region if c.delta < 0), key=lambda c: c.pos):
            if running - c.delta <= cap:
                taken.append(c)
                running -= c.delta
        if not taken:
            note = "only steps that grow the prompt remain, and the window has no room for them"
        return taken, requested, note

    def _tidy(self, scan: _Scan, tolerance: int) -> tuple[list[_Candidate], int | None, str]:
        """Below the trigger: step answered tool material while it is nearly free.

        A cut at p re-processes, beyond what this turn pays anyway, the cached
        tokens from p to where the prompt already changes, less what it
        reclaims: ``base - p - gain``. It is taken when that is within the
        tolerance and no more than the gain. The unreclaimed part only grows as
        p moves back, so the scan stops at the first p past the tolerance.
        """
        base = self.base
        best: tuple[int, int] | None = None
        for p in self.resume_points(base, scan):
            scan.until(p)
            g = scan.gain(p)
            extra = base - p - g
            if extra > tolerance:
                break
            if g > 0 and extra <= g:
                # Net: going back further must pay for its own re-processing. (By
                # gain alone, a 40-token stub near the head justified re-processing
                # everything after it whenever a bulky result lay late.)
                score = g - extra if POLICY.tidy_by == "net" else g
                if best is None or score > best[0]:
                    best = (score, p)
        if best is None:
            return [], None, ""
        cut = best[1]
        return [c for c in scan.items if c.pos >= cut], cut, ""

    def plan(
        self,
        verdict: Verdict,
        steps: list[Step],
        held: list[Held],
        requested: int | None,
        note: str,
        anchor_budget: int,
        block: AnchorBlock | None,
        *,
        first: int | None = None,
        new_total: int | None = None,
        changed: bool = False,
    ) -> Plan:
        new_tokens = self.total if new_total is None else new_total
        if verdict is Verdict.REFUSED or self.layout is None:
            reused = 0
        else:
            at = self.first_change if first is None else first
            reused = self.checkpoints.latest_at_or_before(min(at, self.cached_end))
        if (
            POLICY.join == "payback"
            and block
            and block.riding_ids
            and verdict is not Verdict.REFUSED
            and changed
            and 0 < reused <= RIDER_PAYBACK_CALLS * (self.count(block.riding) + MESSAGE_OVERHEAD)
        ):
            # A rider is re-processed on every call (it moves to the end). When this plan
            # changes the prompt anyway and joining the block re-processes no more than
            # riding would cost over the next RIDER_PAYBACK_CALLS calls, it joins, once.
            reused = 0
            changed = True
        # The head is re-processed anyway: anchors riding at the tail join the block now.
        joined = (
            block.riding_ids if block and reused == 0 and verdict is not Verdict.REFUSED else ()
        )
        in_block = tuple(sorted([*block.head_ids, *joined])) if block else ()
        if joined:
            # Visible: a re-prefill from the head must say why (receipts show the reason).
            ids = ", ".join(str(a) for a in joined)
            joining = f"riding anchor {ids} joins the head block"
            note = f"{note}; {joining}" if note else joining
        return Plan(
            verdict=verdict,
            profile=self.profile,
            window=self.window,
            prompt_tokens=self.total,
            new_tokens=new_tokens,
            target_tokens=self.target,
            steps=tuple(steps),
            held=tuple(held),
            requested_cut=requested,
            chosen_cut=reused if changed else None,
            reused=reused,
            reprefill=max(new_tokens - reused, 0),
            block_anchors=in_block,
            joined_anchors=joined,
            anchor_budget=anchor_budget,
            reason=self._reason(verdict, steps, note, requested, reused, changed),
            moves=MappingProxyType({s.episode_id: s.to_tier for s in steps}),
        )

    def _reason(
        self,
        verdict: Verdict,
        steps: list[Step],
        note: str,
        requested: int | None,
        reused: int,
        changed: bool,
    ) -> str:
        p = self.profile
        pressure = self.total / self.window
        rel = "≥" if pressure >= p.trigger else "<"
        head = f"pressure {pressure:.2f} {rel} trigger {p.trigger:.2f} ({p.name})"
        if verdict is Verdict.REFUSED:
            return f"{head}: refused: {note}" if note else f"{head}: refused"
        if not steps:
            return head
        back = sum(s.reclaimed for s in steps)
        grew = sum(reclaimed(s.tokens_after, s.tokens_before) for s in steps)
        text = f"{head}: {len(steps)} steps reclaimed {back} tokens"
        if grew:
            text += f" (stubs grew {grew}, they step on next turn)"
        if changed:
            text += f"; cut at {reused} (requested {requested})"
        return f"{text}; {note}" if note else text
