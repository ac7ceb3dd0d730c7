"""The floor (bench/floor.py, bench/floor_model.py): the solver against brute force on
generated tiny scripts, the relaxation below it, and the floor below every strategy's
figure. No server: the sizes are the committed measurement (bench/floor_sizes/)."""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from itertools import combinations

import floor
import floor_model as fm
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sakur4.demo.script import generate, preset

# ---------------------------------------------------------------------------
# Brute force: every removal set at every call, no pruning, no shortcut


def brute_force(script: fm.FloorScript, window: int, promises: Sequence[str]) -> int | None:
    """The cheapest plan by exhaustive search over every subset of the removable old
    items at every call (memoised on what is present: the same plans, enumerated)."""
    items = script.items
    room = window - script.head - script.gen
    keep_at = fm.kept_at(script, promises)
    slots = script.slots

    @cache
    def best(si: int, present: frozenset[int], pending: bool) -> int | None:
        if si == len(slots):
            return 0
        slot = slots[si]
        if slot.reread and not pending:
            return best(si + 1, present, False)
        removable = sorted(i for i in present if not keep_at[si][i])
        found: int | None = None
        for n in range(len(removable) + 1):
            for gone in combinations(removable, n):
                now = (present - set(gone)) | set(slot.arrivals)
                if sum(items[i].tokens for i in now) > room:
                    continue
                cost = 0
                if gone:
                    cut = gone[0]
                    cost = sum(items[i].tokens for i in present - set(gone) if i > cut)
                if slot.reread:
                    cost += sum(items[i].tokens for i in slot.arrivals)
                unmet = slot.need is not None and not any(slot.need in items[i].holds for i in now)
                rest = best(si + 1, frozenset(now), unmet)
                if rest is not None and (found is None or cost + rest < found):
                    found = cost + rest
        return found

    return best(0, frozenset(), False)


@st.composite
def tiny_scripts(draw: st.DrawFn) -> tuple[fm.FloorScript, int, tuple[str, ...]]:
    """3-4 turns, 2-4 tool results in all, a need or two on an earlier read (small
    enough for the brute force: a few seconds at most)."""
    turns = draw(st.integers(3, 4))
    steps = [0] * turns
    for _ in range(draw(st.integers(2, 4))):
        steps[draw(st.integers(0, turns - 1))] += 1
    size = st.integers(8, 40)
    items: list[fm.Item] = []
    slots: list[fm.Slot] = []
    results: list[tuple[int, int]] = []  # (turn, item id) of every result so far
    needs: dict[int, int] = {}  # need turn -> the result it asks about

    def add(kind: str, turn: int, pin: bool = False) -> int:
        items.append(fm.Item(len(items), kind, turn, draw(size), pin=pin))
        return len(items) - 1

    for t in range(turns):
        arriving = ([add(fm.ANSWER, t - 1)] if t else []) + [add(fm.REQUEST, t, pin=t == 1)]
        earlier = [r for tt, r in results if tt < t]
        need = None
        if earlier and draw(st.booleans()):
            need = t
            needs[t] = draw(st.sampled_from(earlier))
        slots.append(fm.Slot(t, 0, tuple(arriving), need))
        if need is not None:
            pair = (add(fm.REREAD_CALL, t), add(fm.REREAD_RESULT, t))
            slots.append(fm.Slot(t, -1, pair, None, reread=True))
        for k in range(steps[t]):
            pair = (add(fm.CALL, t), add(fm.RESULT, t))
            results.append((t, pair[1]))
            slots.append(fm.Slot(t, k + 1, pair))
    # A re-read holds what it re-read; a result holds the needs asking about it.
    held: dict[int, set[int]] = {}
    for n, r in needs.items():
        held.setdefault(r, set()).add(n)
    for it in items:
        if it.kind == fm.REREAD_RESULT:
            asked = needs[it.turn]
            held.setdefault(it.id, set()).update(n for n, r in needs.items() if r == asked)
    sized = tuple(
        fm.Item(it.id, it.kind, it.turn, it.tokens, frozenset(held.get(it.id, ())), it.pin)
        for it in items
    )
    script = fm.FloorScript("tiny", draw(st.integers(0, 20)), 1, sized, tuple(slots))
    window = draw(st.integers(60, 120))
    promises = draw(st.sampled_from([(), ("pin",), fm.PROMISES, fm.KNOWN]))
    return script, window, promises


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tiny_scripts())
def test_the_floor_is_what_brute_force_finds(
    case: tuple[fm.FloorScript, int, tuple[str, ...]],
) -> None:
    script, window, promises = case
    truth = brute_force(script, window, promises)
    if truth is None:
        with pytest.raises(fm.Infeasible):
            fm.solve(script, window, promises)
        return
    plan = fm.solve(script, window, promises)
    assert plan.exact
    assert plan.overhead == truth
    assert plan.reprocessed + plan.reread_tokens == plan.overhead
    # The relaxation is a bound: never above the floor, with every removal free even
    # less (the re-reads alone), and a beam's plan never below it.
    assert fm.lower_bound(script, window, promises) <= truth
    assert fm.lower_bound(script, window, promises, free_events=True) <= truth
    assert fm.solve(script, window, promises, beam=2).overhead >= truth


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tiny_scripts())
def test_each_promise_can_only_raise_the_floor(
    case: tuple[fm.FloorScript, int, tuple[str, ...]],
) -> None:
    script, window, _ = case
    floors = []
    for promises in [(), ("pin",), fm.PROMISES, fm.KNOWN]:
        try:
            floors.append(fm.solve(script, window, promises).overhead)
        except fm.Infeasible:
            floors.append(None)
    known = [f for f in floors if f is not None]
    assert known == sorted(known)
    assert floors[: len(known)] == known  # infeasible only with the stronger promises


# ---------------------------------------------------------------------------
# The real scripts: measured sizes, the baseline, every strategy's figure above


def _script(size: str) -> tuple[fm.FloorScript, int]:
    params = preset(size)
    session = generate(params)
    sizes = floor.load_sizes(params.key, session, "measured")
    return floor.build(params.name, session, sizes), params.window


@pytest.mark.parametrize(("size", "baseline"), [("demo", 8311), ("S8", 62303), ("S16", 170118)])
def test_the_measured_sizes_make_the_benchs_baseline(size: str, baseline: int) -> None:
    # The simulator's no-management baseline of the same script (bench/eviction.py
    # --simulate, every token once): the floor's items add up to it exactly.
    script, _ = _script(size)
    assert script.baseline() == baseline


@pytest.mark.parametrize("size", ["demo", "S8", "S16"])
def test_no_strategy_is_below_the_floor(size: str) -> None:
    """A plan the beam finds is at or above the floor; it is at or below every
    strategy's figure in every mode whose floor is at most the ``--swa-full`` one
    (--swa-full, the ring, the default flags), so the floor is too; with KV shifting
    the relaxation (the floor is at least it) is below every figure."""
    script, window = _script(size)
    found = fm.solve(script, window, fm.PROMISES, beam=5)
    low = fm.lower_bound(script, window, fm.PROMISES)
    free = fm.lower_bound(script, window, fm.PROMISES, free_events=True)
    assert free <= low <= found.overhead
    rows = [(m, figs) for (s, m), (_, figs) in floor.FIGURES.items() if s == size]
    assert rows, f"no recorded figures for {size}"
    for mode, figs in rows:
        for name, fig in figs.items():
            if mode == "cache-reuse":
                assert free <= fig.overhead, (mode, name)
            else:
                assert found.overhead <= fig.overhead, (mode, name, found.overhead)


def test_the_dial_keeps_the_newest_answered_result_and_its_call() -> None:
    # Turn 0: request, call a + result a, call b + result b; turn 1: answer, request.
    kinds = [fm.REQUEST, fm.CALL, fm.RESULT, fm.CALL, fm.RESULT, fm.ANSWER, fm.REQUEST]
    turns = [0, 0, 0, 0, 0, 0, 1]
    items = tuple(fm.Item(i, k, t, 10) for i, (k, t) in enumerate(zip(kinds, turns, strict=True)))
    slots = (
        fm.Slot(0, 0, (0,)),
        fm.Slot(0, 1, (1, 2)),
        fm.Slot(0, 2, (3, 4)),
        fm.Slot(1, 0, (5, 6)),
    )
    script = fm.FloorScript("dial", 0, 1, items, slots)
    kept = [{i for i, k in enumerate(keep) if k} for keep in fm.kept_at(script, ("live",))]
    # Nothing answered yet; then result a (just arrived: unanswered) is not yet kept;
    # at call 2 a was answered (kept with its call); at turn 1 b replaced it.
    assert kept == [set(), set(), {1, 2}, {3, 4}]
    assert fm.kept_at(script, ()) == [[False] * 7] * 4
