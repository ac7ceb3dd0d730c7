"""The gateway's per-session state: a conversation's derived id, its own lock, the
prediction of its slot after the prompts it sent, and where the server can resume its cached prompt.

The resume points come from the real checkpoint predictor (``advance``) over
prompts of real length; no server is needed for them.
"""

from __future__ import annotations

import asyncio

from sakur4 import engine
from sakur4.backends.experiment import CheckpointSource
from sakur4.backends.kinds import resume_model
from sakur4.backends.resume import ResumeModel
from sakur4.backends.ring import (
    DEFAULT_RULES,
    FULL_ATTENTION,
    CheckpointRules,
    SentPrompt,
    predict_slot,
)
from sakur4.turns.sessions import SessionState, derive_session, summarises

OPENING = [
    {"role": "system", "content": "You are a coding agent."},
    {"role": "user", "content": "Fix the failing test."},
]


def test_a_conversation_keeps_its_id_as_it_grows() -> None:
    later = [
        *OPENING,
        {"role": "assistant", "content": "Looking."},
        {"role": "user", "content": "And the other one."},
    ]
    sid = derive_session(OPENING)
    assert sid == derive_session(later)
    assert sid.startswith("conv-")
    assert len(sid) == len("conv-") + 16


def test_another_opening_is_another_conversation() -> None:
    other_task = [OPENING[0], {"role": "user", "content": "Write the docs."}]
    other_agent = [{"role": "system", "content": "You review code."}, OPENING[1]]
    ids = {derive_session(m) for m in (OPENING, other_task, other_agent)}
    assert len(ids) == 3


def test_only_role_and_content_identify_the_opening() -> None:
    # A harness that adds a name or cache hints to a message is the same conversation.
    decorated = [{**m, "name": "x", "cache_control": {"type": "ephemeral"}} for m in OPENING]
    assert derive_session(decorated) == derive_session(OPENING)


def state(**kw: object) -> SessionState:
    return SessionState(project_id=1, session="s", slot=0, **kw)  # type: ignore[arg-type]


def test_the_prediction_follows_every_prompt_sent_and_is_forgotten_with_the_server() -> None:
    """Carried forward one prompt at a time (a turn's cost does not grow with the
    session): the same prediction as replaying all of them, however many."""
    s = state()
    sent = [SentPrompt(tokens=tuple(range(n * 40 + 1)), user_starts=(0,)) for n in range(60)]
    for p in sent:
        s.remember_sent(p, DEFAULT_RULES)
    assert s.prediction == predict_slot(sent, DEFAULT_RULES)
    s.forget_server()
    assert s.prediction is None
    assert s.layout is None


def model(source: CheckpointSource) -> ResumeModel:
    return resume_model("llama.cpp", source)


def layout(*ends: int) -> engine.Layout:
    starts = (0, *ends[:-1])
    return engine.Layout(
        tuple(engine.Span(f"m{i}", a, b) for i, (a, b) in enumerate(zip(starts, ends, strict=True)))
    )


def sent_state(
    prompt_len: int, ends: tuple[int, ...], rules: CheckpointRules = DEFAULT_RULES
) -> SessionState:
    s = state(layout=layout(*ends))
    s.remember_sent(SentPrompt(tokens=tuple(range(prompt_len)), user_starts=(0,)), rules)
    return s


def test_nothing_is_resumable_before_a_prompt_was_sent() -> None:
    assert state().checkpoints(model("exact-prefix")) == engine.Checkpoints.none()
    no_history = state(layout=layout(10, 20))
    assert no_history.checkpoints(model("checkpoint-ring")) == engine.Checkpoints.none()


def test_a_full_attention_source_resumes_anywhere() -> None:
    s = sent_state(20, (10, 20))
    for source in ("exact-prefix", "kv-shift"):
        cps = s.checkpoints(model(source))
        assert cps.every_boundary
        assert cps.latest_at_or_before(13) == 13


def test_vllm_resumes_in_whole_blocks_only() -> None:
    """Prefix caching hashes full 128-token blocks: a prompt differing at 1,000 reuses
    896, where any-prefix resume would predict 1,000 (127 tokens optimistic at most)."""
    s = sent_state(1200, (300, 1200))
    cps = s.checkpoints(resume_model("vllm", "exact-prefix"))
    assert not cps.every_boundary
    assert cps.positions == (128, 256, 384, 512, 640, 768, 896, 1024, 1152)
    assert cps.latest_at_or_before(1000) == 896
    assert cps.latest_at_or_before(127) == 0


def test_no_checkpoint_source_resumes_nowhere() -> None:
    s = sent_state(20, (10, 20))
    assert s.checkpoints(model("none")) == engine.Checkpoints.none()


def test_a_ring_resumes_only_where_the_server_kept_state() -> None:
    ends = (100, 4000, 8000)
    s = sent_state(8000, ends)
    # Full attention behind the ring: every message boundary is a resume point.
    full = sent_state(8000, ends, FULL_ATTENTION)
    assert full.checkpoints(model("checkpoint-ring")).positions == (0, 100, 4000, 8000)
    # A sliding window: a cut before the window's reach resumes earlier, never later,
    # and the end of the cached prompt is always a resume point.
    ring = s.checkpoints(model("checkpoint-ring"))
    assert ring.positions[-1] == 8000
    assert 4000 not in ring.positions
    assert ring.latest_at_or_before(4000) < 4000
    # A source the probe was unsure of is predicted the same way, not trusted as exact.
    assert s.checkpoints(model("uncertain")) == ring


def test_each_session_has_its_own_lock() -> None:
    """A session's turns run one at a time; another session's turn is not held up."""
    a, b = state(), state()
    order: list[str] = []

    async def scenario() -> None:
        entered, released = asyncio.Event(), asyncio.Event()

        async def first_turn_of_a() -> None:
            async with a.lock:
                order.append("a1 in")
                entered.set()
                await released.wait()
                order.append("a1 out")

        async def second_turn_of_a() -> None:
            async with a.lock:
                order.append("a2 in")

        holder = asyncio.create_task(first_turn_of_a())
        await entered.wait()
        waiter = asyncio.create_task(second_turn_of_a())
        # Bounded, not slept: with one lock shared by both sessions this would wait forever.
        await asyncio.wait_for(b.lock.acquire(), timeout=10)
        order.append("b in")
        b.lock.release()
        assert not waiter.done()
        released.set()
        await asyncio.gather(holder, waiter)

    asyncio.run(scenario())
    assert order == ["a1 in", "b in", "a1 out", "a2 in"]


AIDER_SYSTEM = (
    "Act as an expert software developer.\nAlways use best practices when coding.\n"
    "- Platform: Linux-6.8\n- Shell: SHELL=/bin/bash\n- Current date/time: {when}\n"
)


def test_a_clock_in_the_opening_is_the_same_conversation() -> None:
    # aider writes the date and time, to the second, into its system prompt on every
    # call: 4 turns landed in 7 sessions (issue 31).
    def call(when: str, question: str) -> list[dict[str, str]]:
        return [
            {"role": "system", "content": AIDER_SYSTEM.format(when=when)},
            {"role": "user", "content": "Change get_factorial() to use math.factorial"},
            {"role": "assistant", "content": "Ok."},
            {"role": "user", "content": question},
        ]

    first = derive_session(call("2026-12-03T14:05:33+0000", "Add a docstring."))
    assert first == derive_session(call("2026-12-03T14:06:10+0000", "Now a test."))
    assert first == derive_session(call("2026-12-04 09:00", "And the README."))
    assert first != derive_session(call("2026-12-03T14:05:33+0000 on Mars", "Add a docstring."))


AIDER_CONVERSATION = [
    {"role": "system", "content": AIDER_SYSTEM.format(when="2026-12-03T14:05:33+0000")},
    {"role": "user", "content": "Add a --verbose flag to the command-line parser."},
    {"role": "assistant", "content": "I added the flag to cli.py and wired it to the logger."},
    {"role": "user", "content": "Now make it print the config file it read."},
]


def test_a_summary_quoting_the_conversation_belongs_to_it() -> None:
    # aider's history summary: its own system prompt, and the history as one user message.
    transcript = "".join(
        f"# {m['role'].upper()}\n{m['content']}\n" for m in AIDER_CONVERSATION[1:3]
    )
    summary = [
        {"role": "system", "content": "*Briefly* summarize this partial conversation."},
        {"role": "user", "content": transcript},
    ]
    assert summarises(summary, AIDER_CONVERSATION)
    # Quoting only what the user said, or a one-word answer, is not a transcript.
    only_user = [summary[0], {"role": "user", "content": transcript.split("# ASSISTANT")[0]}]
    assert not summarises(only_user, AIDER_CONVERSATION)
    short = [*AIDER_CONVERSATION[:2], {"role": "assistant", "content": "Ok."}]
    quoting = f"# USER\n{short[1]['content']}\n# ASSISTANT\nOk.\n"
    assert not summarises([summary[0], {"role": "user", "content": quoting}], short)
    # A new conversation (more than a system prompt and one message) is not a summary.
    assert not summarises([*summary, {"role": "assistant", "content": "x"}], AIDER_CONVERSATION)
