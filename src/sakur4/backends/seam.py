"""The backend seam: what the gateway's pipeline needs from an inference server.

A :class:`Backend` sends chat requests (plain and SSE) and Anthropic Messages where
the server has that route, answers health and its context window; a :class:`Layouts`
lays a chat request out in the server's own tokens. Each kind of server says which
client and which layouts it has (:mod:`sakur4.backends.kinds`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol

from sakur4.backends.chat import Answer, ChatStream
from sakur4.backends.layout import TokenLayout
from sakur4.backends.routing import Route


class Layouts(Protocol):
    """Token layouts of chat requests, as one server renders and tokenizes them."""

    async def layout(self, body: Mapping[str, Any]) -> TokenLayout: ...

    def distrust(self, layout: TokenLayout) -> None: ...


class Backend(Protocol):
    """One inference server, as the gateway's pipeline uses it."""

    @property
    def url(self) -> str: ...

    async def health(self, *, time_limit: float | None = None) -> None: ...

    async def context_window(self) -> int | None: ...

    async def models(self) -> Mapping[str, Any]: ...

    async def chat(self, body: Mapping[str, Any], route: Route | None = None) -> Answer: ...

    def chat_stream(
        self, body: Mapping[str, Any], route: Route | None = None
    ) -> AbstractAsyncContextManager[ChatStream]: ...

    async def messages(
        self, body: Mapping[str, Any], route: Route | None = None
    ) -> Mapping[str, Any]: ...

    def messages_stream(
        self, body: Mapping[str, Any], route: Route | None = None
    ) -> AbstractAsyncContextManager[AsyncIterator[str]]: ...

    async def aclose(self) -> None: ...
