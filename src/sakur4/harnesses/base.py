"""What a coding-agent harness declares, in one object (:class:`Harness`), and what the
harnesses' files share: the run ``sakur4 wrap`` describes (:class:`Wrap`,
:class:`Target`, :class:`Launch`), the shapes of a compaction request, a volatile line
and a session header, and the reminder block's one pattern.

A harness is one file in this package defining ``HARNESS``; the registry
(:mod:`sakur4.harnesses`) finds them, so a new harness touches no other file. Its one
id (``name``: ``claude-code``) is what the setting, the natures, the receipts and the
compaction rewrite say; ``Wrap.name`` is the word ``sakur4 wrap`` takes (``claude``,
its executable) and ``display`` what a person reads on the screens (``Claude Code``).

Nothing here imports the episodes or the turns: they ask the registry, and a harness's
file needs only the vocabulary and this module.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from sakur4.vocabulary import Nature

# The harness whose messages no known harness claims: every user message kept whole and
# Unclassified (never guessed).
GENERIC = "generic"

# A harness's reminder block inside a message (Claude Code's ``<system-reminder>``,
# OpenCode's reminder parts): the one pattern for it, in the natures and in the churn
# repair (turns/churn.py).
REMINDER = re.compile(r"<system-reminder>.*?</system-reminder>", re.S)
REMINDER_OPEN, REMINDER_CLOSE = "<system-reminder>", "</system-reminder>"

# The window every harness is told: large enough that none of them compacts or refuses
# by itself, so the gateway alone decides what the server sees. Chosen from
# bench/harness_window.py (each harness's ``window_why``, printed by ``wrap``; figures in
# docs/harnesses.md): told the server's window, OpenCode never compacted and processed
# 6% more, and Claude Code refused every turn itself (it reserves 13,000 tokens plus the
# answer's cap below the window). aider is told the server's window less the output cap
# (sakur4.harnesses.aider).
TOLD_WINDOW = 1_000_000

# The gateway's key for a harness that must send one; the gateway on loopback needs none.
LOCAL_KEY = "sk-local"

# How a harness names the project its requests belong to (a reused gateway files the
# receipts under it, not under its own working directory).
PROJECT_HEADER = "X-Sakur4-Project"

# The churn repairs turns/churn.py carries out, by name (a harness lists the ones its
# requests need; a new mechanism is code there).
Repair = Literal["billing-header", "system-reminder"]

# A user message's text as slices that concatenate to it, each with its nature.
Slices = list[tuple[str, Nature]]


def message_text(message: Mapping[str, Any]) -> str | None:
    """A message's content when it is one string (None: parts, or nothing)."""
    content = message.get("content")
    return content if isinstance(content, str) else None


def joined_text(message: Mapping[str, Any]) -> str | None:
    """A message's text parts joined by newlines (None: its content is not a list)."""
    content = message.get("content")
    if not isinstance(content, list):
        return None
    return "\n".join(str(p.get("text") or "") for p in content if isinstance(p, Mapping))


def is_reminder(text: str) -> bool:
    """Whether ``text`` is one reminder block, whitespace aside."""
    stripped = text.strip()
    return stripped.startswith(REMINDER_OPEN) and stripped.endswith(REMINDER_CLOSE)


@dataclass(frozen=True, slots=True)
class SessionIds:
    """The headers a harness names its own session by: the session is
    ``<prefix><id>``, a subagent's ``…/agent-<its id>`` (each a session of its own,
    named after its parent's)."""

    header: str
    prefix: str
    agent_header: str | None = None

    def named(self, headers: Mapping[str, str]) -> str | None:
        """The session ``headers`` name (None: the harness sent no id)."""
        own = (headers.get(self.header) or "").strip()
        if not own:
            return None
        name = f"{self.prefix}{own[:120]}"
        agent = (headers.get(self.agent_header) or "").strip() if self.agent_header else ""
        if agent:
            name += f"/agent-{agent[:60]}"
        return name


@dataclass(frozen=True, slots=True)
class VolatileLine:
    """A line a harness opens its system prompt with that changes on every request and
    means nothing to a local model: dropped (turns/churn.py), named ``repair`` in the
    receipt. ``marker`` starts it, ``changing`` is the field that changes, ``line``
    matches it whole."""

    repair: Repair
    marker: str
    changing: str
    line: re.Pattern[str]


@dataclass(frozen=True, slots=True)
class QuotesConversation:
    """A compaction request that quotes the conversation as text: no tools, a system
    prompt and one user message opening with ``opening``, the conversation between
    ``open_tag`` and ``close_tag``, each entry opening with a bracketed role (``answer``:
    an answer's). Rewritten onto the session's cached prompt (harnesses/compaction.py),
    its instruction after ``preface``, which says that the conversation above is the one
    its words refer to."""

    opening: str
    open_tag: str
    close_tag: str
    answer: str
    preface: str


@dataclass(frozen=True, slots=True)
class ExtendsConversation:
    """A compaction request that extends the conversation as it stands: its tools and
    messages, with the summariser's ``task`` in the last user message's text. Served as
    the session's next turn, nothing rewritten."""

    task: str


Compacts = QuotesConversation | ExtendsConversation


@dataclass(frozen=True, slots=True)
class McpCommand:
    """How a harness starts ``sakur4 serve`` over stdio."""

    command: str
    args: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Target:
    """What a run points the harness at."""

    gateway: str  # base URL without /v1, e.g. http://127.0.0.1:8741
    model: str  # the name the server serves
    max_output: int  # tokens one answer may take
    project: Path | None  # None: no project header (a saved config serves any project)
    mcp: McpCommand | None
    token: str | None = None  # SAKUR4_HTTP_TOKEN, when the gateway requires one
    window: int | None = None  # the window the harness is told (None: the harness's choice)
    server_window: int | None = None  # the server's real window, when it reports one

    @property
    def openai_base(self) -> str:
        return f"{self.gateway}/v1"

    @property
    def key(self) -> str:
        return self.token or LOCAL_KEY

    def project_headers(self) -> dict[str, dict[str, str]]:
        """``{"headers": {project header: the project}}``, or nothing without a project."""
        project = self.project
        return {"headers": {PROJECT_HEADER: str(project)}} if project is not None else {}


@dataclass(frozen=True, slots=True)
class Launch:
    """One run of a harness: its command line, the environment added for it, and the
    files (name -> text) written into the run's temporary directory first."""

    argv: tuple[str, ...]
    env: Mapping[str, str]
    files: Mapping[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    mcp: bool = False  # whether the run registers ``sakur4 serve`` with the harness
    window: int | None = None  # the window the harness was told (None: not told one)


@dataclass(frozen=True, slots=True)
class Edit:
    """One configuration file and the keys to set in it (a top-level key -> value; a
    mapping value is merged one level down, so other servers and providers stay)."""

    path: Path
    keys: Mapping[str, Any]


Recipe = Callable[[Target, Sequence[str], Path], Launch]
# The files ``wrap --save`` writes a run (without a project header) into, given the
# environment (HOME, the harness's own config variables).
Saver = Callable[[Launch, Mapping[str, str]], list[Edit]]


def home_of(environ: Mapping[str, str]) -> Path:
    """The user's home in ``environ`` (the process's when it names none)."""
    return Path(environ.get("HOME") or Path.home())


@dataclass(frozen=True, slots=True)
class Wrap:
    """How ``sakur4 wrap`` runs the harness: ``name`` is the word it takes (``claude``),
    ``executable`` the command (None: the user's, ``--openai``), ``recipe`` the run
    (None: not supported, ``refusal`` says why), ``window_why`` why it is told the
    window it is (one line, printed), ``saved`` the files ``--save`` writes (None:
    ``save_refusal`` says why not)."""

    name: str
    describe: str
    executable: str | None
    recipe: Recipe | None
    refusal: str = ""
    window_why: str = ""
    saved: Saver | None = None
    save_refusal: str = ""


@dataclass(frozen=True, slots=True)
class Harness:
    """Everything Sakur4 does differently for one harness, declared once.

    - On the wire (gateway/harnesses.py, gateway/anthropic.py): ``agents``, its
      User-Agent product names (lower case); ``openings``, words its own system prompt
      opens with (for clients whose User-Agent is their HTTP library's); ``session``,
      the headers naming its own session.
    - In its messages (episodes/natures.py): ``sent``, whether it sent these messages
      (the system prompts' text, the messages); ``slices``, a user message cut by
      nature (None: kept whole, Unclassified); ``file_messages``, the openings of its
      messages that carry files whole (their large fenced blocks are attachments).
    - Its cache churn (turns/churn.py): the ``repairs`` its requests need, and the
      ``volatile`` line it opens its system prompt with.
    - Its own compaction request (harnesses/compaction.py).
    - Its run under ``sakur4 wrap`` (harnesses/recipes.py, harnesses/save.py).

    ``order``: where the registry asks it, the most particular first."""

    name: str
    display: str
    order: int
    agents: tuple[str, ...] = ()
    openings: tuple[str, ...] = ()
    session: SessionIds | None = None
    sent: Callable[[str, Sequence[Mapping[str, Any]]], bool] | None = None
    slices: Callable[[Mapping[str, Any]], Slices] | None = None
    file_messages: tuple[str, ...] = ()
    repairs: tuple[Repair, ...] = ()
    volatile: VolatileLine | None = None
    compaction: Compacts | None = None
    wrap: Wrap | None = None
