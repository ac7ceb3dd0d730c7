"""The backend seam: what the gateway's pipeline needs from an inference server, and
the client for each kind that offers it.

A :class:`Backend` sends chat requests (plain and SSE) and Anthropic Messages where
the server has that route, answers health and its context window, and gives a
:class:`Layouts` that lays a chat request out in the server's own tokens. llama.cpp
(:class:`~sakur4.backends.llamacpp.LlamaCppClient`: ``/apply-template`` and
``/tokenize`` with pieces) and vLLM (:class:`~sakur4.backends.vllm.VllmClient`:
``/tokenize`` with messages) implement it; :func:`open_backend` picks one by the kind
the probe identified.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol

import httpx

from sakur4.backends.chat import Answer, ChatStream
from sakur4.backends.identify import BackendKind
from sakur4.backends.layout import TokenLayout, TokenLayouts
from sakur4.backends.llamacpp import LlamaCppClient
from sakur4.backends.vllm import VllmClient
from sakur4.backends.vllm_layout import VllmLayouts
from sakur4.errors import SettingsError
from sakur4.settings import Settings


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

    async def chat(self, body: Mapping[str, Any]) -> Answer: ...

    def chat_stream(self, body: Mapping[str, Any]) -> AbstractAsyncContextManager[ChatStream]: ...

    async def messages(self, body: Mapping[str, Any]) -> Mapping[str, Any]: ...

    def messages_stream(
        self, body: Mapping[str, Any]
    ) -> AbstractAsyncContextManager[AsyncIterator[str]]: ...

    async def aclose(self) -> None: ...


def open_backend(
    kind: BackendKind,
    url: str,
    settings: Settings,
    transport: httpx.AsyncBaseTransport | None = None,
) -> Backend:
    """The client for a server of ``kind`` (llama.cpp's for every kind without its own)."""
    if kind == "vllm":
        return VllmClient(url, timeout=settings.backend_timeout, transport=transport)
    return LlamaCppClient(url, timeout=settings.backend_timeout, transport=transport)


def token_layouts(backend: Backend) -> Layouts:
    """The layouts for ``backend``'s kind."""
    if isinstance(backend, VllmClient):
        return VllmLayouts(backend)
    if isinstance(backend, LlamaCppClient):
        return TokenLayouts(backend)
    raise SettingsError(f"no token layouts for a {type(backend).__name__} backend")
