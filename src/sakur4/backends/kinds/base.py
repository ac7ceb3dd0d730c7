"""What a server kind declares, in one object (:class:`ServerKind`), and what every
kind's identification shares: the :class:`Identity` it answers with and the memo of
the GETs asked so far (:class:`Asked`: each endpoint asked once across all kinds).

A kind is one file in this package defining ``KIND``; the registry
(:mod:`sakur4.backends.kinds`) finds them, so a new kind touches no other file.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import httpx

from sakur4.backends.estimate import MARGIN, EstimatedLayouts
from sakur4.backends.experiment import CheckpointSource
from sakur4.backends.http import HttpBackend
from sakur4.backends.openai_compat import OpenAICompatClient
from sakur4.backends.resume import Resumes, resumes
from sakur4.backends.seam import Backend, Layouts
from sakur4.errors import BackendRefused, BackendUnavailable
from sakur4.settings import Settings

# A kind's name as the probe stores it ("llama.cpp", "vllm", …; "unknown" when no kind
# matched). A plain string: the registry, not a Literal, says which names exist.
BackendKind = str
UNKNOWN: BackendKind = "unknown"

# Where a Sakur4 gateway says what it is (it serves no /props of its own).
GATEWAY_IDENTITY = "/sakur4/gateway"

# Identification answers are small; a server that takes longer is not healthy.
IDENTIFY_TIME_LIMIT = 10.0

# How the probe measures a kind's cache: llama.cpp's cache experiment, vLLM's resend
# held against whole blocks, any other kind's resend, or nothing (a gateway).
Probing = Literal["experiment", "blocks", "resend", "none"]

ESTIMATED = (
    f"estimated from bytes (~3 a token), calibrated on the server's usage.prompt_tokens, "
    f"+{MARGIN:.0%} margin"
)


@dataclass(frozen=True, slots=True)
class Identity:
    """What kind of server answered, and what it says about itself."""

    kind: BackendKind
    version: str | None = None
    model: str | None = None
    n_ctx: int | None = None
    n_ctx_train: int | None = None
    total_slots: int | None = None
    # What the server shows of how it was started (llama.cpp: build, model, window,
    # slots, chat template): a stored probe is reused only for the same fingerprint.
    fingerprint: str | None = None
    # A Sakur4 gateway: the backend it is in front of.
    upstream: str | None = None


def fingerprint(props: Mapping[str, Any]) -> str:
    """A digest of what ``/props`` shows of a llama-server's start-up. Flags it does not
    show (``--swa-full``, ``-cms``, ``--cache-reuse``) are not in it."""
    gen = props.get("default_generation_settings")
    seen = [
        props.get("build_info"),
        props.get("model_path"),
        gen.get("n_ctx") if isinstance(gen, Mapping) else None,
        props.get("total_slots"),
        props.get("chat_template"),
    ]
    return hashlib.sha256(json.dumps(seen).encode()).hexdigest()[:16]


def as_int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def first_model(models: Any) -> Mapping[str, Any] | None:
    """The first card of a ``/v1/models`` listing."""
    if isinstance(models, Mapping):
        data = models.get("data")
        if isinstance(data, list) and data and isinstance(data[0], Mapping):
            return data[0]
    return None


@dataclass(slots=True)
class Asked:
    """The GETs identification has asked so far: each endpoint once, whichever kind asks."""

    http: HttpBackend
    time_limit: float
    _seen: dict[str, Any] = field(default_factory=dict)

    async def get(self, path: str) -> Any:
        """The JSON at ``path``, or None when the server says it has no such endpoint."""
        if path not in self._seen:
            self._seen[path] = await self._get(path)
        return self._seen[path]

    async def _get(self, path: str) -> Any:
        try:
            return await self.http.get_json(path, time_limit=self.time_limit)
        except BackendRefused:
            return None  # 404/405/401…: not this kind (or not allowed to tell)
        except BackendUnavailable as e:
            if e.status is not None and e.status != 503:
                return None  # e.g. a 500 from an endpoint another kind of server lacks
            raise


@dataclass(frozen=True, slots=True)
class Opening:
    """What a kind's client is opened with."""

    url: str
    settings: Settings
    transport: httpx.AsyncBaseTransport | None = None
    model: str | None = None
    # SGLang was seen reporting cached tokens (--enable-cache-report).
    cache_report: bool = False
    # The server's one client, whose connection the kind's client speaks through.
    through: HttpBackend | None = None


def openai_api_opener(client: type[OpenAICompatClient]) -> Callable[[Opening], Backend]:
    """How a kind spoken to over the OpenAI API alone opens its client: the settings'
    timeout and window (``SAKUR4_BACKEND_WINDOW``), the model asked for."""

    def open_client(o: Opening) -> Backend:
        s = o.settings
        return client(
            o.url,
            timeout=s.backend_timeout,
            window=s.backend_window,
            model=o.model,
            transport=o.transport,
            through=o.through,
        )

    return open_client


def no_fields(slot: int | None) -> dict[str, Any]:
    return {}


def no_window_advice(n_ctx: int | None) -> tuple[str, ...]:
    return ()


def several_sequences(agents: int, window: int | None) -> tuple[str, ...]:
    """Several agents on a kind that names no setting of its own for them."""
    need = f"{agents} × {window:,} = {agents * window:,}" if window else f"{agents} windows'"
    return (
        f"for {agents} agents: each keeps its prompt cached only while the server holds "
        f"{agents} sequences at once, {need} tokens of KV cache; with fewer, an agent's "
        "turn after another's may re-process its whole prompt",
    )


def unreported_window(n_ctx: int | None) -> tuple[str, ...]:
    """The advice for a kind whose server may not report its window."""
    if n_ctx is None:
        return ("the server does not report its context window: set SAKUR4_BACKEND_WINDOW",)
    return ()


def estimated_layouts(
    client: Backend, counter: Callable[..., Any] | None = None
) -> EstimatedLayouts | None:
    """Estimated layouts for an OpenAI-compatible client, calibrated on what it counts."""
    if not isinstance(client, OpenAICompatClient):
        return None
    estimated = EstimatedLayouts(counter)
    client.observer = estimated.observe
    return estimated


@dataclass(frozen=True, slots=True)
class ServerNow:
    """What a running server shows of itself, read again to notice it changed."""

    window: int | None
    fingerprint: str
    # The newest task any slot served (None: none since the server started): task ids
    # only grow within one server process, so a smaller one means it restarted.
    last_task: int | None


async def not_reread(client: Backend, time_limit: float) -> ServerNow | None:
    """A kind that shows nothing of how it was started: only its window is read again."""
    return None


@dataclass(frozen=True, slots=True)
class CheckpointStep:
    """The checkpoint step (-cms) a server uses, and where it was read."""

    tokens: int
    source: str


def no_checkpoint_step(url: str) -> CheckpointStep | None:
    return None


@dataclass(frozen=True, slots=True)
class SlotFile:
    """What a slot save or restore moved: the state's tokens and the file's bytes."""

    tokens: int
    bytes: int


@dataclass(frozen=True, slots=True)
class SlotFiles:
    """How a kind parks a slot's state in a file the server writes, and brings it back
    (issue 37): ``save`` and ``restore`` a slot to or from a file name, with the
    session's routing headers (a router sends them where the session is; a refusal
    raises :class:`~sakur4.errors.BackendError`), and the directory the server at a URL
    writes them in, where it is on this machine (None: elsewhere, or not shown)."""

    save: Callable[[Backend, int, str, Mapping[str, str]], Awaitable[SlotFile]]
    restore: Callable[[Backend, int, str, Mapping[str, str]], Awaitable[SlotFile]]
    directory: Callable[[str], Path | None]


@dataclass(frozen=True, slots=True)
class ServerKind:
    """One kind of inference server, everything Sakur4 does differently for it.

    ``identify`` answers the kind's :class:`Identity` from the server's own endpoints
    (None: not this kind), asked in ``order``; ``open`` gives its client and
    ``layouts`` that client's token layouts (None: a client of another kind);
    ``layout`` says in a line whether those are exact; ``request_fields`` are the
    kind's own fields on a chat request for a pinned ``slot``; ``reread`` reads what
    the server shows of itself now (None: it shows nothing, only the window is read
    again); ``checkpoint_step`` where it shows its checkpoint step; ``prefix_block``
    is the granularity of its prefix cache; ``probing`` how the probe measures it;
    ``reuse_flag`` what to switch on so that it reports reused tokens;
    ``window_advice`` how to give it the window Sakur4 needs; ``agents_advice`` how
    to start it for several agents (subagents count), for a kind without slot actions
    (a kind with them is advised from its slots and what the probe measured:
    :mod:`sakur4.backends.agents_advice`)."""

    name: BackendKind
    order: int
    identify: Callable[[Asked], Awaitable[Identity | None]]
    open: Callable[[Opening], Backend]
    layouts: Callable[[Backend], Layouts | None]
    layout: str
    probing: Probing = "resend"
    request_fields: Callable[[int | None], dict[str, Any]] = no_fields
    reread: Callable[[Backend, float], Awaitable[ServerNow | None]] = not_reread
    prefix_block: int = 1
    reuse_flag: str | None = None
    # The checkpoint step the server at a URL really uses, where it shows it.
    checkpoint_step: Callable[[str], CheckpointStep | None] = no_checkpoint_step
    window_advice: Callable[[int | None], tuple[str, ...]] = no_window_advice
    # (agents, the server's window) -> lines, for 2 agents or more.
    agents_advice: Callable[[int, int | None], tuple[str, ...]] = several_sequences
    # The server may serve the Anthropic Messages API itself (the probe asks it).
    messages_route: bool = False
    # Slot save/restore exists on this kind (the probe asks whether it is on), and how
    # the gateway parks a session's slot state with it.
    slot_actions: bool = False
    slot_files: SlotFiles | None = None
    # The model listing names the model by its file's path (shown by its stem).
    lists_model_path: bool = False
    # A Sakur4 gateway: never what a gateway plans for.
    is_gateway: bool = False

    def resumes(
        self,
        source: CheckpointSource,
        *,
        recurrent: bool = False,
        block: int | None = None,
        window: int = 0,
    ) -> Resumes:
        """Where this server resumes, its profile input and checkpoint rules, for the
        checkpoint source its probe found (``block``, ``window``: the prefix cache's block
        and the sliding-window blocks a hit needs, where the probe measured them; else
        the kind's block): one answer (:func:`~sakur4.backends.resume.resumes`)."""
        return resumes(source, block=block or self.prefix_block, recurrent=recurrent, window=window)
