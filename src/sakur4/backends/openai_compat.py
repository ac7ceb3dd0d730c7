"""A client for any OpenAI-compatible server that offers nothing beyond the OpenAI API
(``/v1/models``, ``/v1/chat/completions``): the kind every other client here builds on.

Such a server says neither how it renders and tokenizes a request nor, usually, what
it reused: its layouts are estimated (:mod:`sakur4.backends.estimate`), its reuse is
what ``usage.prompt_tokens_details.cached_tokens`` says where it says it, else
unverifiable, and its context window is the one ``SAKUR4_BACKEND_WINDOW`` names
unless the kind's own endpoint tells it.
"""

from __future__ import annotations

import httpx

from sakur4.backends.chat import ChatClient
from sakur4.backends.http import HttpBackend


class OpenAICompatClient(ChatClient):
    """One OpenAI-compatible server. Every failure is a BackendError naming its URL."""

    def __init__(
        self,
        url: str,
        *,
        timeout: float,
        window: int | None = None,
        model: str | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        through: HttpBackend | None = None,
    ) -> None:
        super().__init__(url, timeout=timeout, transport=transport, through=through)
        # SAKUR4_BACKEND_WINDOW: the window of a server that does not report one.
        self.window = window
        # The model the probe found (the kinds that describe one model ask by name).
        self.model = model

    async def health(self, *, time_limit: float | None = None) -> None:
        """Return when ``/v1/models`` answers (the one endpoint every such server has)."""
        await self.get_json("/v1/models", time_limit=time_limit)

    async def context_window(self) -> int | None:
        """The window ``SAKUR4_BACKEND_WINDOW`` names: the OpenAI API does not report one."""
        return self.window
