"""The strategies harnesses use today, talking to llama-server directly.

- ``drop-oldest``: when the prompt reaches the trigger, drop the oldest messages
  after the system prompt until it is at or under the target (a tool result
  leaves with its call); dropped messages stay dropped.
- ``summarise``: when the prompt reaches the trigger, ask the same model for a
  summary of the conversation so far (real generation, timed) and replace
  everything but the system prompt and the last user turn by it.
- observation masking (:class:`ObservationMask`): rolling with lag 1, or a window of
  the last 10 turns' results;
- ``none``: send the whole history every time; the server refuses once it no
  longer fits (``exceed_context_size_error``), and those calls count as failed.

Trigger and target are the same fractions of the window Sakur4's profile uses,
and prompt sizes are exact: the server's own template and tokenizer
(:class:`~sakur4.backends.layout.TokenLayouts`).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import httpx

from sakur4.backends.chat import Answer
from sakur4.backends.identify import BackendKind
from sakur4.backends.kinds import open_backend, token_layouts
from sakur4.backends.launcher import RUN_TO_CAP
from sakur4.backends.layout import TokenLayout
from sakur4.backends.seam import Backend, Layouts
from sakur4.demo.agent import OnCall, ScriptedAgent, drive
from sakur4.demo.records import RequestRecord, StrategyRun, SummaryCall
from sakur4.demo.scenario import Request
from sakur4.engine.truncation import oldest_to_drop
from sakur4.errors import ContextOverflow
from sakur4.settings import Settings

Message = dict[str, Any]

SUMMARY_REQUEST = (
    "Summarise the conversation so far for your own later use: the task, the files "
    "and functions examined and what each does, every instruction or correction the "
    "user gave, and what remains to do. Be specific and complete."
)
SUMMARY_PREFIX = "Summary of the conversation so far (earlier messages were compacted):\n\n"


@dataclass(frozen=True, slots=True)
class Budget:
    """When to act and how far down to go, in tokens of the window."""

    window: int
    trigger: float
    target: float

    @property
    def trigger_tokens(self) -> int:
        return int(self.window * self.trigger)

    @property
    def target_tokens(self) -> int:
        return int(self.window * self.target)


def mentions(messages: Sequence[Mapping[str, Any]], text: str) -> bool:
    """True when ``text`` appears verbatim in one of the messages' contents."""
    return any(text in str(m.get("content") or "") for m in messages)


def timing(answer: Mapping[str, Any], key: str) -> float:
    t = answer.get("timings")
    v = t.get(key) if isinstance(t, Mapping) else None
    return float(v) if isinstance(v, int | float) else 0.0


def answer_text(answer: Mapping[str, Any]) -> str:
    choices = answer.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], Mapping):
        message = choices[0].get("message")
        if isinstance(message, Mapping):
            return str(message.get("content") or "")
    return ""


@dataclass
class Turn:
    """What a manager decided for one call: the messages to send and the event, if any."""

    messages: list[Message]
    event: str | None = None


class Manager(Protocol):
    name: str

    async def prepare(self, index: int, history: list[Message], call: Call) -> Turn: ...


@dataclass
class Call:
    """The connection a manager may use before the call (to measure, or to summarise)."""

    client: Backend
    layouts: Layouts
    budget: Budget
    chat: Mapping[str, Any]
    summaries: list[SummaryCall] = field(default_factory=list)

    async def measure(self, messages: list[Message]) -> TokenLayout:
        return await self.layouts.layout({**self.chat, "messages": messages})


class NoManagement:
    name = "none"

    async def prepare(self, index: int, history: list[Message], call: Call) -> Turn:
        return Turn(list(history))


class DropOldest:
    """Drop whole messages from the front (after the system prompt) down to target."""

    name = "drop-oldest"

    def __init__(self) -> None:
        self.start = 1  # the first history message still sent, after the system prompt
        self.dropped = 0

    def view(self, history: list[Message]) -> tuple[list[Message], str | None]:
        """The history as this strategy shows it before any dropping, and the event
        that changed it (None: unchanged)."""
        return history, None

    async def prepare(self, index: int, history: list[Message], call: Call) -> Turn:
        shown, event = self.view(history)
        kept = [shown[0], *shown[self.start :]]
        layout = await call.measure(kept)
        total = len(layout.tokens)
        if total < call.budget.trigger_tokens:
            return Turn(kept, event)
        need = total - call.budget.target_tokens
        sizes = [s.end - s.start for s in layout.spans]
        k = oldest_to_drop(sizes[1:], [m.get("role") for m in kept[1:]], need)
        self.start += k
        self.dropped += k
        dropped = f"dropped {k} messages"
        return Turn([shown[0], *shown[self.start :]], f"{event}; {dropped}" if event else dropped)


PLACEHOLDER = "Old tool output: ({lines} lines omitted)"


class ObservationMask(DropOldest):
    """Observation masking: an older tool result is replaced by a one-line placeholder.

    ``lag``: a result is masked once ``lag`` newer results exist (rolling masking,
    lag 1: only the newest result is shown). ``turns``: the results of the last
    ``turns`` turns are shown, older ones masked (the window of "The Complexity
    Trap", arXiv 2508.21433: M = 10). Calls, the user's words and the answers stay;
    when the masked prompt still reaches the trigger, the oldest messages are dropped
    to the target as drop-oldest does (without that the session would overflow).
    """

    def __init__(self, name: str, *, lag: int | None = None, turns: int | None = None) -> None:
        super().__init__()
        self.name = name
        self.lag = lag
        self.turns = turns
        self.masked: set[int] = set()  # history indices shown as a placeholder

    def view(self, history: list[Message]) -> tuple[list[Message], str | None]:
        tools = [i for i, m in enumerate(history) if m.get("role") == "tool"]
        turn_of, turn = {}, -1
        for i, m in enumerate(history):
            turn += m.get("role") == "user"
            turn_of[i] = turn
        newest = turn
        due = set()
        for rank, i in enumerate(reversed(tools)):
            if self.lag is not None and rank >= self.lag:
                due.add(i)
            if self.turns is not None and turn_of[i] <= newest - self.turns:
                due.add(i)
        new = due - self.masked
        self.masked |= due
        shown = [
            {**m, "content": PLACEHOLDER.format(lines=len(str(m.get("content")).splitlines()))}
            if i in self.masked
            else m
            for i, m in enumerate(history)
        ]
        return shown, (f"masked {len(new)} results" if new else None)

    @property
    def evicted(self) -> int:
        return len(self.masked) + self.dropped


class Summarise:
    """Replace all but the system prompt and the last user turn by a generated summary."""

    name = "summarise"

    def __init__(
        self,
        summary_tokens: int,
        *,
        request: str = SUMMARY_REQUEST,
        bare: bool = False,
        trigger: float | None = None,
    ) -> None:
        self.summary_tokens = summary_tokens
        self.request = request
        self.trigger = trigger  # a fraction of the window (None: the budget's trigger)
        # ``bare``: the summary call goes without the system prompt and the tools, as
        # OpenCode sends its compaction (``system: []``, ``tools: {}``).
        self.bare = bare
        self.summary: Message | None = None
        self.tail_from = 1  # the history index the kept tail starts at
        self.replaced = 0

    def current(self, history: list[Message]) -> list[Message]:
        head = [history[0]] + ([self.summary] if self.summary else [])
        return [*head, *history[self.tail_from :]]

    async def prepare(self, index: int, history: list[Message], call: Call) -> Turn:
        current = self.current(history)
        layout = await call.measure(current)
        trigger = call.budget.trigger_tokens
        if self.trigger is not None:
            trigger = int(call.budget.window * self.trigger)
        if len(layout.tokens) < trigger:
            return Turn(current)
        asked = await self._fitting([*current, {"role": "user", "content": self.request}], call)
        text = await self.summarise(index, asked, call)
        last_user = max(i for i, m in enumerate(history) if m.get("role") == "user")
        self.replaced += last_user - self.tail_from + (1 if self.summary else 0)
        self.summary = {"role": "user", "content": SUMMARY_PREFIX + text}
        self.tail_from = last_user
        return Turn(self.current(history), f"summary of {len(layout.tokens):,} tokens")

    async def summarise(self, index: int, asked: list[Message], call: Call) -> str:
        """Ask the server for a summary of ``asked`` (without its system prompt and the
        tools when ``bare``), record the call, and return the summary's text."""
        body = {
            **self._chat(call),
            "messages": self._sent(asked),
            "max_tokens": self.summary_tokens,
            # A harness asks for a summary of a set length; the small model would
            # otherwise often stop after a sentence and make compaction look free.
            **RUN_TO_CAP,
        }
        started = time.monotonic()
        answer = await call.client.chat(body)
        wall = (time.monotonic() - started) * 1000
        rep = answer.report
        usage = answer.json.get("usage")
        generated = usage.get("completion_tokens", 0) if isinstance(usage, Mapping) else 0
        call.summaries.append(
            SummaryCall(
                before_index=index,
                prompt_tokens=rep.prompt_tokens or 0,
                processed=rep.processed or 0,
                generated=int(generated or 0),
                prompt_ms=timing(answer.json, "prompt_ms"),
                gen_ms=timing(answer.json, "predicted_ms"),
                wall_ms=wall,
            )
        )
        return answer_text(answer.json)

    def _chat(self, call: Call) -> dict[str, Any]:
        return {k: v for k, v in call.chat.items() if not (self.bare and k == "tools")}

    def _sent(self, asked: list[Message]) -> list[Message]:
        """The summary call's messages: without the system prompt when ``bare``."""
        return asked[1:] if self.bare else asked

    async def _fitting(self, asked: list[Message], call: Call) -> list[Message]:
        """The summary request, its oldest summarised messages left out until the request
        and the summary fit the window (one call can add more than the headroom above the
        trigger; a harness then summarises what it can still send). A tool result leaves
        with its call."""
        first = 2 if self.summary else 1  # after the system prompt and any summary
        while len(asked) - first > 2:
            sent = {**self._chat(call), "messages": self._sent(asked)}
            size = len((await call.layouts.layout(sent)).tokens)
            if size + self.summary_tokens <= call.budget.window:
                break
            k = first + 1
            while k < len(asked) - 2 and asked[k].get("role") == "tool":
                k += 1
            asked = [*asked[:first], *asked[k:]]
        return asked


async def run_direct(
    manager: Manager,
    url: str,
    agent: ScriptedAgent,
    *,
    budget: Budget,
    chat: Mapping[str, Any],
    anchor: str,
    backend_timeout: float = 600.0,
    transport: httpx.AsyncBaseTransport | None = None,
    kind: BackendKind = "llama.cpp",
    on_call: OnCall | None = None,
) -> StrategyRun:
    """Replay ``agent``'s session against the server at ``url`` (a server of ``kind``:
    its own client and exact layouts), managed by ``manager``; ``on_call`` is told
    each call's processed tokens."""
    records: list[RequestRecord] = []
    pinned = False
    counted = 0  # summaries already told to on_call
    settings = Settings.load(backend_timeout=backend_timeout)
    client = open_backend(kind, url, settings, transport)
    try:
        call = Call(client, token_layouts(client), budget, chat)

        def told(processed: int) -> None:
            nonlocal counted
            if on_call is not None:
                processed += sum(s.processed for s in call.summaries[counted:])
                on_call(processed)
            counted = len(call.summaries)

        async def send(i: int, req: Request) -> list[Message]:
            nonlocal pinned
            pinned = pinned or req.pin is not None
            turn = await manager.prepare(i, req.messages, call)
            kept = mentions(turn.messages, anchor) if pinned else None
            try:
                answer: Answer | None = await client.chat({**chat, "messages": turn.messages})
            except ContextOverflow as e:
                answer, failed = None, e.what
            if answer is None:
                records.append(RequestRecord.refused(i, req, failed, kept, turn.event))
                told(0)
                return turn.messages
            rep = answer.report
            records.append(
                RequestRecord(
                    index=i,
                    turn=req.turn,
                    step=req.step,
                    prompt_tokens=rep.prompt_tokens or 0,
                    processed=rep.processed or 0,
                    reused=rep.reused or 0,
                    prompt_ms=timing(answer.json, "prompt_ms"),
                    gen_ms=timing(answer.json, "predicted_ms"),
                    anchor=kept,
                    event=turn.event,
                    reread=req.reread,
                )
            )
            told(rep.processed or 0)
            return turn.messages

        await drive(agent, send)
    finally:
        await client.aclose()
    evicted = int(getattr(manager, "evicted", 0) or 0) or (
        getattr(manager, "dropped", 0) + getattr(manager, "replaced", 0)
    )
    return StrategyRun(
        strategy=manager.name,
        window=budget.window,
        records=tuple(records),
        summaries=tuple(call.summaries),
        evicted=evicted,
        recoverable=0,  # dropped, masked or summarised away: only the tool call brings it back
        live_turns=tuple(agent.live_turns()),
    )
