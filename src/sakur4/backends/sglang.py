"""The SGLang client: chat over its OpenAI route, content token counts from its tokenizer.

From SGLang's source (2026): ``/health``; ``/get_server_info`` (``/server_info`` in
newer releases) with ``context_length``; ``POST /v1/tokenize`` takes ``prompt`` (a
string or a list of strings) and ``add_special_tokens`` and answers ``tokens``,
``count`` and ``max_model_len`` (``serving_tokenize.py``: no chat template is applied,
so a message's content is counted exactly and the template around it estimated).
RadixAttention reuses any cached prefix. ``usage.prompt_tokens_details`` carries
``cached_tokens`` only with ``--enable-cache-report``, and even then only when it is
above zero (``usage_processor.py``: ``_details_if_cached``), so a ``null`` means
"not reported" without the flag and 0 with it: the probe finds which
(:attr:`SglangClient.cache_report`), and only then is a ``null`` read as 0.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import httpx

from sakur4.backends.http import HttpBackend
from sakur4.backends.openai_compat import OpenAICompatClient
from sakur4.backends.report import PromptReport, read_report
from sakur4.errors import BackendRefused, BackendUnavailable


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else None


class SglangClient(OpenAICompatClient):
    """One SGLang server. Every failure is a BackendError naming its URL."""

    def __init__(
        self,
        url: str,
        *,
        timeout: float,
        window: int | None = None,
        model: str | None = None,
        cache_report: bool = False,
        transport: httpx.AsyncBaseTransport | None = None,
        through: HttpBackend | None = None,
    ) -> None:
        super().__init__(
            url, timeout=timeout, window=window, model=model, transport=transport, through=through
        )
        # Started with --enable-cache-report (the probe saw cached_tokens): a missing
        # prompt_tokens_details then means nothing was reused.
        self.cache_report = cache_report

    async def health(self, *, time_limit: float | None = None) -> None:
        await self.request_text("GET", "/health", time_limit=time_limit)

    async def context_window(self) -> int | None:
        for path in ("/get_server_info", "/server_info"):
            try:
                info = await self.get_json(path)
            except BackendRefused:
                continue
            window = _int(info.get("context_length")) if isinstance(info, Mapping) else None
            if window is not None:
                return window
        return self.window

    def read_report(self, answer: Mapping[str, Any]) -> PromptReport:
        report = read_report(answer)
        usage = answer.get("usage")
        if (
            self.cache_report
            and report.reused is None
            and report.prompt_tokens is not None
            and isinstance(usage, Mapping)
        ):
            return PromptReport(report.prompt_tokens, report.prompt_tokens, 0, None, "usage")
        return report

    async def count_contents(self, texts: Sequence[str]) -> Sequence[int]:
        """Each text's token count from the server's tokenizer (no template, no specials)."""
        body: dict[str, Any] = {"prompt": list(texts), "add_special_tokens": False}
        if self.model:
            body["model"] = self.model
        answer = await self.post_json("/v1/tokenize", body)
        counts = self._shape("POST /v1/tokenize", answer, "count")
        if not isinstance(counts, list) or len(counts) != len(texts):
            said = f"POST /v1/tokenize counted {str(counts)[:80]} for {len(texts)} texts"
            raise BackendUnavailable(self.url, said)
        return [int(c) for c in counts]
