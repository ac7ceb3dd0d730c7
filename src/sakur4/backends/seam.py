"""The backend seam: what the gateway's pipeline needs from an inference server, and
the client for each kind that offers it.

A :class:`Backend` sends chat requests (plain and SSE) and Anthropic Messages where
the server has that route, answers health and its context window, and gives a
:class:`Layouts` that lays a chat request out in the server's own tokens. llama.cpp
(:class:`~sakur4.backends.llamacpp.LlamaCppClient`: ``/apply-template`` and
``/tokenize`` with pieces) and vLLM (:class:`~sakur4.backends.vllm.VllmClient`:
``/tokenize`` with messages) give exact layouts; SGLang (content counted by its
tokenizer), Ollama, LM Studio, TabbyAPI and any other OpenAI-compatible server give
estimated ones (:mod:`sakur4.backends.estimate`). :func:`open_backend` picks the client
by the kind the probe identified.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol

import httpx

from sakur4.backends.chat import Answer, ChatStream
from sakur4.backends.estimate import EstimatedLayouts
from sakur4.backends.identify import BackendKind
from sakur4.backends.layout import TokenLayout, TokenLayouts
from sakur4.backends.llamacpp import LlamaCppClient
from sakur4.backends.lmstudio import LmStudioClient
from sakur4.backends.ollama import OllamaClient
from sakur4.backends.openai_compat import OpenAICompatClient
from sakur4.backends.routing import Route
from sakur4.backends.sglang import SglangClient
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


def open_backend(
    kind: BackendKind,
    url: str,
    settings: Settings,
    transport: httpx.AsyncBaseTransport | None = None,
    *,
    model: str | None = None,
    cache_report: bool = False,
) -> Backend:
    """The client for a server of ``kind`` (``model``: the one the probe found;
    ``cache_report``: SGLang was seen reporting cached tokens)."""
    timeout, window = settings.backend_timeout, settings.backend_window
    if kind == "llama.cpp":
        return LlamaCppClient(url, timeout=timeout, transport=transport)
    if kind == "vllm":
        return VllmClient(url, timeout=timeout, model=model, transport=transport)
    if kind == "sglang":
        return SglangClient(
            url,
            timeout=timeout,
            window=window,
            model=model,
            cache_report=cache_report,
            transport=transport,
        )
    kinds = {"ollama": OllamaClient, "lmstudio": LmStudioClient}
    client = kinds.get(kind, OpenAICompatClient)
    return client(url, timeout=timeout, window=window, model=model, transport=transport)


def token_layouts(backend: Backend) -> Layouts:
    """The layouts for ``backend``'s kind: exact where the server renders and tokenizes
    chat requests for us, else estimated (calibrated on what the server counts)."""
    if isinstance(backend, VllmClient):
        return VllmLayouts(backend)
    if isinstance(backend, LlamaCppClient):
        return TokenLayouts(backend)
    if isinstance(backend, OpenAICompatClient):
        counter = backend.count_contents if isinstance(backend, SglangClient) else None
        estimated = EstimatedLayouts(counter)
        backend.observer = estimated.observe
        return estimated
    raise SettingsError(f"no token layouts for a {type(backend).__name__} backend")
