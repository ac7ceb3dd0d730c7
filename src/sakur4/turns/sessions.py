"""Per-session state the gateway keeps: the server slot, and what the server holds.

The server does not expose its cached tokens, so the gateway remembers the exact
prompts it sent for each session (their token layout) and predicts the server's
resume points from them; what the server then reports corrects the prediction.
The prediction is carried forward one request at a time (never replayed from the
first request), so a turn costs the same at the 5th request as at the 500th.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sakur4 import engine
from sakur4.backends.resume import ResumeModel
from sakur4.backends.ring import (
    CheckpointRules,
    SentPrompt,
    SlotPrediction,
    advance,
    empty_slot,
)
from sakur4.backends.routing import Route, session_route
from sakur4.episodes import Episode
from sakur4.episodes.messages import text_of
from sakur4.errors import InputError
from sakur4.turns.adapter import EngineView
from sakur4.turns.carried import Classified
from sakur4.turns.slots import SlotBook
from sakur4.vocabulary import estimate_tokens

# A clock reading in the opening: aider writes the date and time (to the second) into
# its system prompt on every call, which made nearly every call a new session.
_CLOCK = re.compile(
    r"\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?"
    r"|\b\d{1,2}:\d{2}(?::\d{2})?\b"
)
# The shortest message whose verbatim copy is taken as evidence of a transcript.
_QUOTED_CHARS = 16


class HarnessSession(str):
    """A session id the harness itself sent (Claude Code's ``X-Claude-Code-Session-Id``,
    with its subagent's id where one sent it): shared by an agent's conversation and
    its side calls (a title, a topic: requests without tools)."""


# A session named after its parent's: a harness's subagent or side call.
_CHILD = re.compile(r"(.+)/(?:agent|conv)-[^/]+")


def tool_names(tools: Any) -> list[str]:
    """The names of a request's tools (OpenAI's shape or Anthropic's)."""
    names = []
    for t in tools if isinstance(tools, list) else ():
        if isinstance(t, Mapping):
            fn = t.get("function")
            name = fn.get("name") if isinstance(fn, Mapping) else t.get("name")
            if isinstance(name, str):
                names.append(name)
    return names


def offers_open_fold(tools: Any) -> bool:
    """Whether a request's tools include Sakur4's ``open_fold``, as each harness names
    an MCP tool (Claude Code ``mcp__sakur4__open_fold``, OpenCode ``sakur4_open_fold``)."""
    return any(name.endswith("open_fold") for name in tool_names(tools))


def parent_of(session: str) -> str | None:
    """The session a subagent or side call named after its harness's session belongs
    to (None: it is a conversation of its own)."""
    child = _CHILD.fullmatch(session)
    return child.group(1) if child else None


def _opening_text(content: Any) -> str:
    """A message's content as the opening is identified by: its text (a string, or its
    text parts joined as :func:`text_of` joins them) with clock readings left out, and
    any other part (an image) as canonical JSON without cache hints. Claude Code sends
    one message as a list of blocks on one request and as a string on the next, and
    moves its cache marks from request to request."""
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, Mapping) and isinstance(part.get("text"), str):
                parts.append(part["text"])
            elif isinstance(part, Mapping):
                kept = {k: v for k, v in part.items() if k != "cache_control"}
                parts.append(json.dumps(kept, sort_keys=True, default=str))
        content = "\n".join(parts)
    elif not isinstance(content, str):
        content = json.dumps(content, sort_keys=True, default=str)
    return _CLOCK.sub("<clock>", content)


def derive_session(messages: Sequence[Mapping[str, Any]]) -> str:
    """A stable id for a conversation that did not name its session: its opening,
    every message before the first assistant message.

    Later turns resend those messages unchanged — but for a clock reading (a date, a
    time), which is left out. Every message before the first answer counts, not only
    the first user message: OpenCode's title requests all open with "Generate a title
    for this conversation:" and carry the conversation's first message next (issue 41:
    every title request of a project was one session).
    """
    opening = []
    for m in messages:
        if m.get("role") == "assistant":
            break
        opening.append({"role": m.get("role"), "content": _opening_text(m.get("content"))})
    digest = hashlib.sha256(json.dumps(opening, sort_keys=True, default=str).encode())
    return "conv-" + digest.hexdigest()[:16]


def _said(m: Mapping[str, Any]) -> str:
    return _opening_text(m.get("content")).strip()


def continues(
    messages: Sequence[Mapping[str, Any]], last: Sequence[Mapping[str, Any]], answered: bool
) -> bool:
    """Whether ``messages`` carry on the conversation whose last request was ``last``
    (``answered``: that request got its answer).

    What was last said to the model there (its last user or tool message) is here,
    followed by an answer; or it is said again (a retry); or, when it got no answer,
    anywhere. aider appends its reminder to the newest user message only, so a copy
    may be a shorter beginning of it. Two aider chats of one project open alike (its
    examples, repo map and files come before the chat), and two clients can both open
    with "hi": the answer is what tells them apart.
    """
    if not last or list(messages) == list(last):
        return True
    tail = next((m for m in reversed(last) if m.get("role") in ("user", "tool")), None)
    if tail is None:
        return True
    said = _said(tail)
    newest = max(
        (i for i, m in enumerate(messages) if m.get("role") in ("user", "tool")), default=-1
    )
    for i in range(len(messages) - 1, -1, -1):
        m = messages[i]
        if m.get("role") != tail.get("role"):
            continue
        mine = _said(m)
        if mine != said and not (len(mine) >= _QUOTED_CHARS and said.startswith(mine)):
            continue
        if not answered or i == newest:
            return True
        if i + 1 < len(messages) and messages[i + 1].get("role") == "assistant":
            return True
    return False


def summarises(
    messages: Sequence[Mapping[str, Any]], conversation: Sequence[Mapping[str, Any]]
) -> bool:
    """Whether a request is a summary of ``conversation`` (a session's last messages):
    one system prompt and one user message quoting at least one of the conversation's
    user messages and one of its assistant messages verbatim. aider summarises its
    history this way ("# USER" / "# ASSISTANT" and each message's text), under its
    own system prompt: a call that belongs to the conversation it quotes.
    """
    if len(messages) != 2 or [m.get("role") for m in messages] != ["system", "user"]:
        return False
    text = text_of(messages[1])
    quoted = {"user": False, "assistant": False}
    for m in conversation:
        role = m.get("role")
        if role in quoted and not quoted[role]:
            said = text_of(m).strip()
            quoted[role] = len(said) >= _QUOTED_CHARS and said in text
    return all(quoted.values())


@dataclass(frozen=True)
class FailedTurn:
    """The session's last turn, which closed without an answer: a request repeating its
    messages is that turn retried (OpenCode retries a call that timed out)."""

    receipt: int | None
    messages: tuple[Mapping[str, Any], ...]


@dataclass
class SessionState:
    """What the gateway knows about one session's slot on the server."""

    project_id: int
    session: str
    slot: int | None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    turn: int = 0
    # The turn number was read from the store once (after a restart it goes on).
    resumed: bool = False
    # The version of the session's stored state this one is (None: not read from the
    # store, or stale): a replica holding an older one rebuilds it (turns.shared).
    version: int | None = None
    layout: engine.Layout | None = None
    # The slot after every prompt this session sent (None: nothing sent, or forgotten).
    prediction: SlotPrediction | None = None
    # Exact prompt tokens per estimated token, from the last prompt sent: sizes
    # stubs and new messages between exact measurements.
    ratio: float = 1.0
    # The messages of the last turn sent, after repairs: cache churn is found against them.
    harness: list[dict[str, Any]] = field(default_factory=list)
    # And its tools (a harness's compaction is served with them: sakur4.harnesses.compaction).
    tools: Any = None
    # What that turn recorded (its messages, split by nature where they mix) and their
    # ids: an entry equal to the one at its place there is stored under ``ids``' id.
    recorded: list[dict[str, Any]] = field(default_factory=list)
    ids: list[int] = field(default_factory=list)
    # The stored episodes the last turn read: a turn reads again only what changed.
    episodes: dict[int, Episode] = field(default_factory=dict)
    # The engine's view of the last turn: its pieces are lent to the next.
    view: EngineView | None = None
    # The last turn, if it closed without an answer.
    failed: FailedTurn | None = None
    # Each message's parts and each message the engine rendered, as the last turn had
    # them: a turn classifies and renders again only what changed (issue 27).
    classified: Classified = field(default_factory=Classified)
    rendered: engine.RenderMemo = field(default_factory=engine.RenderMemo)
    # The session's routing key (and a router's affinity) on every request it sends.
    route: Route | None = None

    def checkpoints(self, model: ResumeModel) -> engine.Checkpoints:
        """Where the server can resume this session's cached prompt from (the ring by
        the rules the prompts were remembered with)."""
        if self.layout is None or self.prediction is None:
            return engine.Checkpoints.none()
        candidates = [s.start for s in self.layout.spans] + [self.layout.end]
        at = model.positions(candidates, self.layout.end, self.prediction)
        return engine.Checkpoints.every() if at is None else engine.Checkpoints.at(at)

    def counter(self) -> Callable[[str], int]:
        """Estimated tokens of a text, scaled by this session's measured ratio (as it is now)."""
        ratio = self.ratio

        def count(text: str) -> int:
            return math.ceil(estimate_tokens(text) * ratio)

        return count

    def known_ids(self, messages: Sequence[Mapping[str, Any]]) -> list[int | None]:
        """The stored id of each message that is the last sent turn's message at its place."""
        last, ids = self.recorded, self.ids
        n = min(len(last), len(ids), len(messages))
        return [ids[i] if messages[i] == last[i] else None for i in range(n)]

    def remember_sent(self, sent: SentPrompt, rules: CheckpointRules) -> SlotPrediction:
        self.prediction = advance(self.prediction or empty_slot(rules), sent)
        return self.prediction

    def forget_server(self) -> None:
        """The server's state is unknown (a failed request, a restart): predict nothing."""
        self.layout = None
        self.prediction = None


class SessionBook:
    """Every session the pipeline serves, by project and name, each pinned to a slot."""

    def __init__(self, routing_headers: str) -> None:
        """``routing_headers``: the headers that carry each session's routing key
        (``SAKUR4_ROUTING_HEADERS``)."""
        self._states: dict[tuple[int, str], SessionState] = {}
        # Each session's last request before a summary call of it (aider's history).
        self._summarised: dict[tuple[int, str], list[dict[str, Any]]] = {}
        self.slots = SlotBook()
        self._routing_headers = routing_headers

    def session_of(
        self,
        project_id: int,
        messages: Sequence[Mapping[str, Any]],
        header: str | None,
        tools: Any = None,
    ) -> str:
        """The session a request names, else the one its opening derives, else (a
        summary of a conversation under its own system prompt, as aider's history
        summary) the conversation it quotes.

        A harness's own session id (:class:`HarnessSession`) names an agent's
        conversation; a side call under it (no tools: a title) is a session of its own,
        named after it (its parent). Conversations that open alike are
        told apart by their answers (:func:`continues`): a new one is the opening's
        next session (``conv-…-2``)."""
        if header is not None:
            name = header.strip()
            if not name or len(name) > 200:
                raise InputError("X-Sakur4-Session must be 1 to 200 characters")
            if isinstance(header, HarnessSession) and not tool_names(tools):
                return f"{name}/{derive_session(messages)}"
            return name
        derived = derive_session(messages)
        family = [
            (name, state)
            for (pid, name), state in self._states.items()
            if pid == project_id and (name == derived or name.startswith(derived + "-"))
        ]
        if family:
            for name, state in reversed(family):  # the newest first
                answered = state.failed is None
                summarised = self._summarised.get((project_id, name), [])
                if continues(messages, state.harness, answered) or (
                    summarised and continues(messages, summarised, answered)
                ):
                    return name
            return f"{derived}-{len(family) + 1}"
        for (pid, name), state in reversed(self._states.items()):  # the newest first
            if pid == project_id and summarises(messages, state.harness):
                # The summary call becomes the session's last request: the
                # conversation's next turn carries on from what it summarised.
                self._summarised[(pid, name)] = list(state.harness)
                return name
        return derived

    def last_requests(self, project_id: int) -> list[tuple[str, list[dict[str, Any]], Any]]:
        """Each of the project's sessions, the newest first: its name, and its last
        request's messages and tools."""
        mine = [(n, s.harness, s.tools) for (i, n), s in self._states.items() if i == project_id]
        return mine[::-1]

    def state(self, project_id: int, session: str, total_slots: int | None) -> SessionState:
        """The session's state, made (and given a slot) on its first turn."""
        key = (project_id, session)
        state = self._states.get(key)
        if state is None:
            route = session_route(self._routing_headers, project_id, session)
            state = SessionState(project_id, session, self.slots.assign(total_slots), route=route)
            self._states[key] = state
        return state

    def known(self, project_id: int, session: str) -> SessionState | None:
        """The session's state, if it has sent a turn since the gateway started."""
        return self._states.get((project_id, session))

    def forget_server(self) -> None:
        """The server's cache is gone (a restart, another window): no session predicts it."""
        for state in self._states.values():
            state.forget_server()

    def reassign(self, total_slots: int | None) -> None:
        """The server has another number of slots: every session gets one again."""
        self.slots.unassign_all()
        for state in self._states.values():
            state.slot = self.slots.assign(total_slots)
