"""The Ollama client: its OpenAI route for chat, its native API for the window.

From Ollama's documentation and source (2026): ``GET /api/version``; ``GET /api/ps``
lists the loaded models with the ``context_length`` each was loaded with (the window
in force, docs/api/ps); ``POST /api/show`` describes a model (``parameters`` holds a
Modelfile's ``num_ctx N``; ``model_info`` its trained ``<arch>.context_length``). The
window is ``num_ctx``: a Modelfile's, else ``OLLAMA_CONTEXT_LENGTH``, else a default by
VRAM (docs/context-length: under 24 GiB 4k, 24-48 GiB 32k, more 256k), and a longer
prompt is cut silently. ``/v1/chat/completions`` maps ``prompt_eval_count`` (cached
plus new tokens) to ``usage.prompt_tokens`` and ``prompt_eval_cached_count`` to
``usage.prompt_tokens_details.cached_tokens`` (ollama PR #17943, merged 2026-08;
earlier versions report no reuse). There is no tokenize endpoint (PR #16820 open), so
layouts are estimated.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from sakur4.backends.openai_compat import OpenAICompatClient
from sakur4.errors import BackendRefused

_NUM_CTX = re.compile(r"^\s*num_ctx\s+(\d+)\s*$", re.MULTILINE)


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else None


class OllamaClient(OpenAICompatClient):
    """One Ollama server. Every failure is a BackendError naming its URL."""

    async def health(self, *, time_limit: float | None = None) -> None:
        await self.get_json("/api/version", time_limit=time_limit)

    async def loaded_window(self) -> int | None:
        """``context_length`` of the loaded model (ours by name, else the only one)."""
        try:
            ps = await self.get_json("/api/ps")
        except BackendRefused:
            return None
        models = ps.get("models") if isinstance(ps, Mapping) else None
        loaded = [m for m in models or () if isinstance(m, Mapping)]
        ours = [m for m in loaded if self.model in (m.get("name"), m.get("model"))]
        chosen = ours or (loaded if len(loaded) == 1 else [])
        return _int(chosen[0].get("context_length")) if chosen else None

    async def modelfile_window(self) -> int | None:
        """A Modelfile's ``num_ctx`` for the model (``/api/show`` parameters)."""
        if not self.model:
            return None
        try:
            show = await self.post_json("/api/show", {"model": self.model})
        except BackendRefused:
            return None
        params = show.get("parameters") if isinstance(show, Mapping) else None
        found = _NUM_CTX.search(params) if isinstance(params, str) else None
        return int(found.group(1)) if found else None

    async def context_window(self) -> int | None:
        """The window in force: the loaded model's, else its Modelfile's ``num_ctx``, else
        ``SAKUR4_BACKEND_WINDOW`` (``OLLAMA_CONTEXT_LENGTH`` is not visible from outside)."""
        return await self.loaded_window() or await self.modelfile_window() or self.window
