"""The LM Studio client: its OpenAI route for chat, its REST API for the window.

From LM Studio's documentation (2026): ``GET /api/v1/models`` (0.4+) lists models with
``loaded_instances[].config.context_length``, the window each loaded instance has
(``max_context_length`` is what the model supports, not what is loaded). LM Studio
reuses cached prefix and non-prefix chunks but never reports cached tokens in the
API (lmstudio-bug-tracker #778, #2390, #2419: ``usage`` carries only the totals), so
reuse there is unverifiable, and layouts are estimated (no tokenize endpoint).
"""

from __future__ import annotations

from collections.abc import Mapping

from sakur4.backends.openai_compat import OpenAICompatClient
from sakur4.errors import BackendRefused


class LmStudioClient(OpenAICompatClient):
    """One LM Studio server. Every failure is a BackendError naming its URL."""

    async def context_window(self) -> int | None:
        """The loaded instance's ``context_length`` (ours by key, else the first loaded),
        else ``SAKUR4_BACKEND_WINDOW``."""
        try:
            listed = await self.get_json("/api/v1/models")
        except BackendRefused:
            return self.window  # before 0.4: no v1 REST API
        models = listed.get("models") if isinstance(listed, Mapping) else None
        windows: list[tuple[bool, int]] = []
        for m in models or ():
            if not isinstance(m, Mapping):
                continue
            for instance in m.get("loaded_instances") or ():
                config = instance.get("config") if isinstance(instance, Mapping) else None
                n = config.get("context_length") if isinstance(config, Mapping) else None
                if isinstance(n, int) and not isinstance(n, bool) and n > 0:
                    windows.append((m.get("key") == self.model, n))
        windows.sort(key=lambda w: not w[0])
        return windows[0][1] if windows else self.window
