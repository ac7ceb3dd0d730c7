"""The llama.cpp ``llama-server`` client (async, httpx).

Endpoints as observed on build b11434 (BACKEND-FACTS.md): ``/health``, ``/props``,
``/slots``, ``/v1/models``, ``/tokenize``, ``/apply-template``,
``/completion``, ``/v1/chat/completions`` (plain and SSE), and slot actions
(``POST /slots/{id}?action=save|restore|erase``, 501 without ``--slot-save-path``).
Request bodies are passed through untouched, so every field the server knows
works; answers come back as the decoded JSON plus a :class:`PromptReport`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from sakur4.backends.chat import Answer, ChatClient
from sakur4.backends.report import read_report
from sakur4.errors import BackendRefused, BackendUnavailable

SlotAction = Literal["save", "restore", "erase"]


@dataclass(frozen=True, slots=True)
class ServerProps:
    """The parts of ``GET /props`` Sakur4 uses (``raw`` keeps the rest)."""

    n_ctx: int | None
    total_slots: int | None
    build: str | None
    model_path: str | None
    chat_template: str | None
    endpoint_slots: bool
    endpoint_metrics: bool
    raw: Mapping[str, Any] = field(repr=False, compare=False)


@dataclass(frozen=True, slots=True)
class SlotState:
    """One entry of ``GET /slots``. The prompt's tokens are *not* exposed by the server."""

    id: int
    n_ctx: int | None
    is_processing: bool
    n_prompt_tokens: int | None
    n_prompt_tokens_processed: int | None
    n_prompt_tokens_cache: int | None
    # The last task the slot served; None on a slot that has served nothing since the
    # server started. Task ids only grow within one server process.
    id_task: int | None = None


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


class LlamaCppClient(ChatClient):
    """A client for one llama-server. Every failure is a BackendError naming its URL."""

    async def health(self, *, time_limit: float | None = None) -> None:
        """Return when the server answers ``/health`` with ok (503 while loading raises).
        A 200 that is not JSON is a router in front of llama-servers: vllm-router answers
        "All servers healthy" (it proxies the rest of llama-server's API)."""
        text = await self.request_text("GET", "/health", time_limit=time_limit)
        try:
            answer = json.loads(text)
        except ValueError:
            return
        status = answer.get("status") if isinstance(answer, Mapping) else None
        if status != "ok":
            raise BackendUnavailable(self.url, f"GET /health answered {answer!r}")

    async def props(self, *, time_limit: float | None = None) -> ServerProps:
        raw = await self.get_json("/props", time_limit=time_limit)
        if not isinstance(raw, Mapping):
            raise BackendUnavailable(self.url, f"GET /props answered {str(raw)[:80]!r}")
        gen = raw.get("default_generation_settings")
        n_ctx = _int(gen.get("n_ctx")) if isinstance(gen, Mapping) else None
        return ServerProps(
            n_ctx=n_ctx,
            total_slots=_int(raw.get("total_slots")),
            build=str(raw["build_info"]) if "build_info" in raw else None,
            model_path=str(raw["model_path"]) if "model_path" in raw else None,
            chat_template=str(raw["chat_template"]) if "chat_template" in raw else None,
            endpoint_slots=bool(raw.get("endpoint_slots", False)),
            endpoint_metrics=bool(raw.get("endpoint_metrics", False)),
            raw=raw,
        )

    async def context_window(self) -> int | None:
        """The window one conversation gets now: the slot's n_ctx (the context is split
        between slots when -np > 1), else what /props says; None when neither says."""
        props = await self.props(time_limit=10.0)
        try:
            slots = await self.slots()
        except BackendRefused:
            return props.n_ctx  # --no-slots
        windows = {s.n_ctx for s in slots if s.n_ctx is not None}
        return min(windows) if windows else props.n_ctx

    async def slots(self, *, time_limit: float | None = None) -> tuple[SlotState, ...]:
        raw = await self.get_json("/slots", time_limit=time_limit)
        if not isinstance(raw, list):
            raise BackendUnavailable(self.url, f"GET /slots answered {str(raw)[:80]!r}")
        return tuple(
            SlotState(
                id=int(s.get("id", i)),
                n_ctx=_int(s.get("n_ctx")),
                is_processing=bool(s.get("is_processing", False)),
                n_prompt_tokens=_int(s.get("n_prompt_tokens")),
                n_prompt_tokens_processed=_int(s.get("n_prompt_tokens_processed")),
                n_prompt_tokens_cache=_int(s.get("n_prompt_tokens_cache")),
                id_task=_int(s.get("id_task")),
            )
            for i, s in enumerate(raw)
            if isinstance(s, Mapping)
        )

    async def tokenize(self, text: str, *, add_special: bool = False) -> list[int]:
        """The server's own tokens for ``text`` (``add_special`` adds BOS as a prompt gets)."""
        answer = await self.post_json(
            "/tokenize", {"content": text, "add_special": add_special, "with_pieces": False}
        )
        tokens = self._shape("POST /tokenize", answer, "tokens")
        return [int(t) for t in tokens]

    async def tokenize_pieces(
        self, text: str, *, add_special: bool = False
    ) -> list[tuple[int, bytes]]:
        """Tokens with the bytes each one stands for (pieces that are not valid UTF-8
        come back from the server as byte lists)."""
        return await self._with_pieces(text, add_special)

    async def pieces_of(self, tokens: Sequence[int]) -> list[tuple[int, bytes]]:
        """The bytes of each token id in ``tokens``: ``/tokenize`` takes a list of ids as
        its content and answers each with its piece as for text (bytes, where not valid
        UTF-8, as byte lists; ``/detokenize`` would replace those with U+FFFD). The ids
        come back as the server answered them: a server that read the list another way
        answers other ids, which the caller must check."""
        return await self._with_pieces(list(tokens), False)

    async def _with_pieces(
        self, content: str | list[int], add_special: bool
    ) -> list[tuple[int, bytes]]:
        answer = await self.post_json(
            "/tokenize", {"content": content, "add_special": add_special, "with_pieces": True}
        )
        tokens = self._shape("POST /tokenize", answer, "tokens")
        try:
            return _pieces(tokens)
        except _BAD_PIECE:
            bad = next(t for t in tokens if not _is_piece(t))
            raise BackendUnavailable(self.url, f"POST /tokenize: bad token entry {bad!r}") from None

    async def apply_template(self, body: Mapping[str, Any]) -> str:
        """The prompt the server renders for a chat request body (messages, tools, kwargs)."""
        answer = await self.post_json("/apply-template", dict(body))
        return str(self._shape("POST /apply-template", answer, "prompt"))

    async def completion(self, body: Mapping[str, Any]) -> Answer:
        """``POST /completion`` (prompt as text or token ids); fields pass through."""
        answer = await self.post_json("/completion", {**body, "stream": False})
        if not isinstance(answer, Mapping):
            raise BackendUnavailable(self.url, f"POST /completion answered {str(answer)[:80]!r}")
        return Answer(answer, read_report(answer))

    async def slot_action(
        self,
        slot: int,
        action: SlotAction,
        filename: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> Mapping[str, Any]:
        """Save, restore or erase a slot's KV state (501 without ``--slot-save-path``);
        ``headers``: the session's routing headers, so a router sends it to the server
        that holds the session."""
        body = {"filename": filename} if filename is not None else {}
        answer = await self.post_json(
            f"/slots/{slot}", body, params={"action": action}, headers=headers
        )
        if not isinstance(answer, Mapping):
            raise BackendUnavailable(self.url, f"slot {action} answered {str(answer)[:80]!r}")
        return answer


# What a malformed token entry raises in :func:`_pieces`.
_BAD_PIECE = (TypeError, KeyError, AttributeError, ValueError)


def _pieces(tokens: Any) -> list[tuple[int, bytes]]:
    """``/tokenize`` entries with pieces as (id, bytes): one comprehension, a bad entry
    found by what it raises (a checked loop was 127 ms of a 110k-token first sight,
    this 53 ms). A piece is text, or a list of bytes where it is not valid UTF-8."""
    return [
        (
            int(t["id"]),
            p.encode("utf-8") if type(p := t.get("piece", "")) is str else bytes(list(p)),
        )
        for t in tokens
    ]


def _is_piece(entry: Any) -> bool:
    try:
        _pieces([entry])
    except _BAD_PIECE:
        return False
    return True
