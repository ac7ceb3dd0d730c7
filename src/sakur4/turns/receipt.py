"""A turn's receipt, assembled: opened before the turn is sent (its id goes in the
response headers), completed with what the server reported, or marked failed.

What a receipt holds and how it is stored is :mod:`sakur4.receipts`; this is where a
turn's plan, repairs and the server's figures become one.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from sakur4 import engine
from sakur4.backends.report import PromptReport
from sakur4.backends.resume import ResumeModel
from sakur4.backends.ring import common_prefix
from sakur4.receipts import Receipt, cache_verdict
from sakur4.store.projects import Project
from sakur4.turns.sessions import SessionState, parent_of
from sakur4.turns.slots import SlotBook
from sakur4.turns.turn import Prepared
from sakur4.vocabulary import Kind


def new_prompt(messages: Sequence[Mapping[str, Any]]) -> bool:
    """Whether a request carries a new prompt of the user's: its newest message (system
    ones aside) is the user's, not a tool's result (the agent going on with its loop).
    The screens count prompts apart from requests (issue 41: "68 turns" for 16 prompts)."""
    for m in reversed(messages):
        if m.get("role") != "system":
            return bool(m.get("role") == "user")
    return False


def overflow_why(episodes: Sequence[engine.Episode], anchors: Sequence[engine.Anchor]) -> str:
    """What a refused turn could not fold, in figures (the gateway's counts): the
    messages since the last answer, the system prompts, the pinned anchors."""
    answered = max((i for i, e in enumerate(episodes) if e.role == "assistant"), default=-1)
    system = sum(e.tokens for e in episodes if e.role == "system")
    turn = sum(e.tokens for e in episodes[answered + 1 :] if e.role != "system")
    pinned = sum(a.tokens for a in anchors)
    said = f"with everything older folded: this turn's messages are ~{turn:,} tokens"
    said += f", the system prompts ~{system:,}"
    return said + (f", pinned anchors ~{pinned:,}" if pinned else "")


def refusal(
    project: Project,
    state: SessionState,
    plan: engine.Plan,
    window: int,
    backend: str,
    needed: int,
    prompt: bool,
) -> Receipt:
    """The receipt of a turn refused before it was sent (what stood in the way):
    ``needed``, the prompt it could not make smaller, as its refusal says."""
    return Receipt(
        project_id=project.id,
        session=state.session,
        turn=state.turn,
        context_window=window,
        prompt_tokens=needed,
        profile=plan.profile.name,
        profile_reason=plan.profile.reason,
        verdict=plan.verdict.value,
        cache_verdict="unverifiable",
        backend=backend,
        detail={
            "reason": plan.reason,
            "planned_prompt_tokens": plan.prompt_tokens,
            "prompt": prompt,
            **({"parent": parent} if (parent := parent_of(state.session)) else {}),
        },
    )


def opened(p: Prepared, window: int, backend: str, slots: SlotBook, model: ResumeModel) -> Receipt:
    """The receipt of a prepared turn, before it is sent (``model``: how the server
    resumes, which the repairs' figures are predicted by)."""
    plan = p.plan
    # Each step names the stored episode and its size as stored (what the session's
    # episodes show); a step from Live gives that size as its "before" (issue 41: the
    # two differed). An assistant message with tool calls steps as pieces (its text,
    # each call's arguments): such a step says so, and gives the piece's own sizes.
    owner = p.view.store_id
    pieces = Counter(owner.values())
    steps = []
    for s in plan.steps:
        sid = owner.get(s.episode_id, s.episode_id)
        stored = p.state.episodes.get(sid)
        piece = pieces[sid] > 1 or (stored is not None and stored.kind is Kind.TOOL_CALL)
        steps.append(
            {
                "episode": sid,
                "from": s.from_tier.label,
                "to": s.to_tier.label,
                "tokens": stored.tokens if stored is not None else None,
                "tokens_before": s.tokens_before,
                "tokens_after": s.tokens_after,
                "reclaimed": s.reclaimed,
                **({"piece": True} if piece else {}),
            }
        )
    return Receipt(
        project_id=p.project.id,
        session=p.state.session,
        turn=p.state.turn,
        context_window=window,
        prompt_tokens=len(p.layout.tokens),
        profile=plan.profile.name,
        profile_reason=plan.profile.reason,
        verdict=plan.verdict.value,
        cache_verdict="unverifiable",
        steps=steps,
        backend=backend,
        requested_cut=plan.requested_cut,
        chosen_cut=plan.chosen_cut,
        predicted_reuse=plan.reused,
        divergence=p.divergence,
        detail={
            "reason": plan.reason,
            "planned_prompt_tokens": plan.prompt_tokens,
            "held": [h.episode_id for h in plan.held],
            "slot": p.state.slot,
            "repairs": _repairs(p, slots, model),
            "churn": [c.as_dict() for c in p.changes if not c.repaired],
            # 0: the prompt was built from pieces earlier renders proved (issue 17).
            "layout_renders": p.layout.renders,
            # "estimated": the server could not lay the prompt out (issue 29).
            "layout": p.layout.method,
            "harness_shape": p.shape,
            # Whether there was a cached prompt to compare with: a divergence left empty
            # means "extends it" only then (issue 41: every receipt of a fresh gateway's
            # run read as empty).
            "compared": p.state.layout is not None,
            # The user's prompt, not the agent's loop (nor a retry of a failed request).
            "prompt": p.retry is None and new_prompt(p.harness),
            **({"retry_of": p.retry.receipt} if p.retry is not None else {}),
            **({"compaction": p.served} if p.served is not None else {}),
            # A subagent's or side call's session names the harness session it runs under.
            **({"parent": parent} if (parent := parent_of(p.state.session)) else {}),
        },
    )


def answered(r: Receipt, rep: PromptReport, extra: dict[str, Any]) -> Receipt:
    """The receipt completed with what the server reported (``extra``: more detail)."""
    # Confirmed: the part of the predicted saving the server's reuse bears out (what it
    # reused beyond what it would have without the repair); unknown when it did not say.
    repairs = [
        {
            **x,
            "saved_confirmed": None
            if rep.reused is None
            else min(x["saved_predicted"], max(0, rep.reused - x["reuse_without"])),
        }
        for x in r.detail.get("repairs", [])
    ]
    return replace(
        r,
        server_cached=rep.reused,
        server_processed=rep.processed,
        prefill_ms=rep.prompt_ms,
        cache_verdict=cache_verdict(rep.reused, rep.processed),
        detail={**r.detail, "repairs": repairs, **_shifted(r.divergence, rep.reused), **extra},
    )


def _shifted(divergence: int | None, reused: int | None) -> dict[str, int]:
    """``shifted``: the tokens the server reused past where the prompt first differed
    from the cached one. Only a server that shifts kept text into place
    (``--cache-reuse``) reuses there: a removal it served without re-processing what
    followed (issue 40). Absent when it reused no more than the common prefix."""
    if divergence is None or reused is None or reused <= divergence:
        return {}
    return {"shifted": reused - divergence}


def failed(r: Receipt, extra: dict[str, Any] | None = None) -> Receipt:
    """The receipt of a turn that closed without an answer (``extra``: more detail)."""
    return replace(r, detail={**r.detail, "failed": True, **(extra or {})})


def _before(p: Prepared, message: int, offset: int) -> int:
    """Tokens before a change at ``offset`` of harness ``message``, from the layout: the
    rendered message that holds it starts at an exact span; within it, the estimate."""
    count = p.state.counter()
    text = str(p.harness[message].get("content") or "") if message < len(p.harness) else ""
    j = 0
    for i, m in enumerate(p.rendered.messages):
        if text and isinstance(m.get("content"), str) and text[:offset] in m["content"]:
            j = i
            if i > 0:
                break
    start = p.layout.spans[j].start if j < len(p.layout.spans) else 0
    return start + (count(text[:offset]) if offset else 0)


def _repairs(p: Prepared, slots: SlotBook, model: ResumeModel) -> list[dict[str, Any]]:
    """Each repair with the re-processing it spares, predicted from the layout.

    ``before``: the token where the prompt would first differ without the repair;
    ``reuse_without``/``saved_predicted``: what the server would reuse without it, and
    how much more it reuses with it, by the same model the plan uses."""
    out: list[dict[str, Any]] = []
    if p.header is None and not any(c.repaired for c in p.changes):
        return out  # nothing repaired: the prompts are not compared (O(prompt) a turn)
    slot = p.state.slot
    sent = slots.sent(slot)
    last = sent.last.tokens if sent is not None else ()
    with_repair = slots.reuse_at(slot, common_prefix(last, p.layout.tokens), model)
    if p.header is not None:
        previous = sent.header if sent is not None else None
        if previous is not None and previous != p.header:
            offset = common_prefix(previous, p.header)
            start = p.layout.spans[0].start if p.layout.spans else 0
            before = start + p.state.counter()(p.header[:offset])
        else:
            # The same header as the slot's last prompt: it changed nothing this turn.
            before = len(last)
        without = slots.reuse_at(slot, before, model)
        out.append(
            {
                "kind": "billing-header",
                "message": 0,
                "text": p.header[:120],
                "before": before,
                "reuse_without": without,
                "saved_predicted": max(0, with_repair - without),
            }
        )
    for c in p.changes:
        if not c.repaired:
            continue
        before = _before(p, c.message, c.offset)
        without = slots.reuse_at(slot, before, model)
        out.append(
            {
                **c.as_dict(),
                "before": before,
                "reuse_without": without,
                "saved_predicted": max(0, with_repair - without),
            }
        )
    return out
