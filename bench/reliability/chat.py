"""A coding agent's conversation as the harnesses drive it through the gateway.

Each :class:`ChatSession` resends its whole history every turn, as harnesses do,
adding a user message or a tool call with its result; its messages carry a marker
unique to the session, so any cross-session contamination shows up as a foreign
marker. A request that got no answer is sent again unchanged next time (a harness
retrying), which is what exercises the gateway's idempotent recording.
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from reliability.invariants import AckedTurn, SentTurn, message_key

MAX_MESSAGES = 24  # then the session starts a new conversation (a new session name)


@dataclass
class TurnResult:
    ok: bool
    status: int | None = None
    receipt: int | None = None
    seconds: float = 0.0
    error: str = ""
    streamed: bool = False


@dataclass
class ChatSession:
    """One conversation; ``name`` goes in ``X-Sakur4-Session``."""

    base: str
    rng: random.Random
    max_tokens: int = 4
    stream_share: float = 0.3
    generation: int = 0
    history: list[dict[str, Any]] = field(default_factory=list)
    pending: list[dict[str, Any]] = field(default_factory=list)  # new messages not yet answered
    last_sent: list[dict[str, Any]] = field(default_factory=list)
    turns: int = 0

    @property
    def name(self) -> str:
        return f"{self.base}-g{self.generation}"

    @property
    def marker(self) -> str:
        """A word only this session's messages contain."""
        return f"MARK{self.base.upper().replace('-', '')}"

    def _next_new(self) -> list[dict[str, Any]]:
        n = self.turns
        if not self.history:
            return [
                {"role": "system", "content": f"You are terse. Session {self.marker}."},
                {"role": "user", "content": f"{self.marker} turn {n}: say ok."},
            ]
        if self.rng.random() < 0.35:
            call = f"call_{self.marker}_{self.generation}_{n}"
            return [
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": call,
                            "type": "function",
                            "function": {
                                "name": "read_file",
                                "arguments": json.dumps({"path": f"{self.marker}/f{n}.py"}),
                            },
                        }
                    ],
                },
                {
                    "role": "tool",
                    "tool_call_id": call,
                    "content": f"def f{n}():  # {self.marker}\n    return {n}\n" * 3,
                },
            ]
        return [{"role": "user", "content": f"{self.marker} turn {n}: say ok again."}]

    def request(self) -> tuple[list[dict[str, Any]], SentTurn]:
        """The messages to send now (a retry resends the same), and what is new in them."""
        if not self.pending:
            if len(self.history) >= MAX_MESSAGES:
                self.generation += 1
                self.history = []
            self.pending = self._next_new()
        messages = self.history + self.pending
        same = 0
        for a, b in zip(self.last_sent, messages, strict=False):
            if a != b:
                break
            same += 1
        self.last_sent = messages
        new = tuple(message_key(i, m) for i, m in enumerate(messages) if i >= same)
        return messages, SentTurn(self.name, new)

    def answered(self, messages: list[dict[str, Any]], reply: str) -> None:
        self.history = [*messages, {"role": "assistant", "content": reply or "ok"}]
        self.pending = []
        self.turns += 1

    def acked(self, messages: list[dict[str, Any]], receipt: int, completed: bool) -> AckedTurn:
        keys = tuple(message_key(i, m) for i, m in enumerate(messages))
        return AckedTurn(self.name, keys, receipt, completed)

    async def turn(
        self, http: httpx.AsyncClient, url: str, sent: list[SentTurn] | None = None
    ) -> tuple[TurnResult, AckedTurn | None]:
        """Send one turn (logged in ``sent`` first); the result and, if answered, the ack."""
        messages, new = self.request()
        if sent is not None:
            sent.append(new)
        streamed = self.rng.random() < self.stream_share
        body: dict[str, Any] = {
            "messages": messages,
            "max_tokens": self.max_tokens,
            "temperature": 0,
        }
        headers = {"X-Sakur4-Session": self.name}
        started = time.perf_counter()
        try:
            if streamed:
                body["stream"] = True
                reply, status, receipt = await _stream(http, url, body, headers)
            else:
                r = await http.post(url + "/v1/chat/completions", json=body, headers=headers)
                status = r.status_code
                if status != 200:
                    return TurnResult(False, status, error=r.text[:300]), None
                receipt = int(r.headers["x-sakur4-receipt"])
                reply = str(r.json()["choices"][0]["message"].get("content") or "")
        except (httpx.HTTPError, KeyError, ValueError) as e:
            return TurnResult(False, error=f"{type(e).__name__}: {e}"), None
        seconds = time.perf_counter() - started
        if status != 200 or receipt is None:
            return TurnResult(False, status, seconds=seconds, error=reply[:300]), None
        acked = self.acked(messages, receipt, completed=not streamed)
        self.answered(messages, reply)
        return TurnResult(True, status, receipt, seconds, streamed=streamed), acked


async def _stream(
    http: httpx.AsyncClient, url: str, body: dict[str, Any], headers: dict[str, str]
) -> tuple[str, int, int | None]:
    """(reply, status, receipt): receipt is None unless the stream ended with [DONE]."""
    text = ""
    async with http.stream("POST", url + "/v1/chat/completions", json=body, headers=headers) as r:
        if r.status_code != 200:
            return (await r.aread()).decode(errors="replace"), r.status_code, None
        receipt = int(r.headers["x-sakur4-receipt"])
        async for line in r.aiter_lines():
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                return text, 200, receipt
            event = json.loads(data)
            if "error" in event:
                return json.dumps(event), 200, None
            for choice in event.get("choices") or []:
                text += (choice.get("delta") or {}).get("content") or ""
    return text, 200, None
