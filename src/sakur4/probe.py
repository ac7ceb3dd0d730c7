"""The capability probe: what an inference server can do for Sakur4, measured.

Nobody configures this by hand (SPEC §8). :func:`probe` identifies the server,
checks slot actions and exact tokenization, and — on llama.cpp — runs the cache
experiment (:mod:`sakur4.backends.experiment`) to classify the checkpoint source.
The result is a frozen :class:`ProbeResult`; the gateway feeds
:attr:`ProbeResult.source_class` to the engine's profile choice (detected →
CacheFirst, none → WindowFirst, uncertain → Balanced, shifting → ShiftFirst) and,
for a checkpoint ring, :meth:`ProbeResult.checkpoint_rules` to the checkpoint
predictor. Results are kept
per backend URL in the ``backend_probe`` table, newest last.
"""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, Protocol

import httpx

from sakur4.backends.agents_advice import SUBAGENTS, for_agents
from sakur4.backends.blocking import run_blocking
from sakur4.backends.experiment import (
    CheckpointSource,
    ExperimentStep,
    classify,
    run_cache_experiment,
)
from sakur4.backends.http import HttpBackend, normalize_url
from sakur4.backends.kinds import identify, kind_named, open_backend, server_kind
from sakur4.backends.kinds.base import BackendKind, Identity, ServerKind
from sakur4.backends.launcher import PACKAGED_TEMPLATE
from sakur4.backends.llamacpp import LlamaCppClient, SlotState
from sakur4.backends.report import read_report
from sakur4.backends.resume import ResumeModel, Resumes, SourceClass
from sakur4.backends.ring import DEFAULT_RULES, CheckpointRules
from sakur4.backends.routing import probe_route
from sakur4.backends.seam import Backend
from sakur4.backends.vllm import BLOCK_TOKENS, CACHE_COUNTERS, VllmClient, block_reuse
from sakur4.backends.vllm_experiment import measure_block_cache
from sakur4.errors import (
    BackendError,
    BackendRefused,
    BackendUnavailable,
    Sakur4Error,
    SlotBusy,
    StoreError,
)
from sakur4.settings import Settings
from sakur4.store import Store
from sakur4.store.db import DriverError, connect

SlotActions = Literal["supported", "unsupported", "unknown"]
# Slot save with a filename the server must refuse: 501 when slot actions are off,
# 400 (invalid filename) when they are on. Nothing is written either way.
_BAD_SLOT_FILE = "../sakur4-probe-check"


@dataclass(frozen=True, slots=True)
class ProbeResult:
    """What the probe found at ``url`` (see the module docstring)."""

    url: str
    probed_at: str
    kind: BackendKind
    version: str | None
    model: str | None
    n_ctx: int | None
    n_ctx_train: int | None
    total_slots: int | None
    slot_actions: SlotActions
    exact_tokenization: bool
    reuse_verifiable: bool
    reuse_field: str | None
    checkpoint_source: CheckpointSource
    sources: tuple[CheckpointSource, ...]
    reason: str
    experiment: tuple[ExperimentStep, ...]
    prefill_tokens_per_s: float | None
    advice: tuple[str, ...]
    # The server answers the Anthropic Messages API itself (POST /v1/messages/count_tokens
    # answered): the gateway forwards /v1/messages there instead of translating.
    messages_api: bool = False
    # What the server shows of how it was started (identify.fingerprint): a stored
    # result is reused only for the same one.
    fingerprint: str | None = None
    # A Sakur4 gateway: the backend it is in front of.
    upstream: str | None = None
    # How prompts are laid out in tokens for this kind: exact (the server renders and
    # tokenizes) or estimated, with its margin (ServerKind.layout).
    layout: str = ""
    # The checkpoint ring of a hybrid/recurrent model (the experiment fitted the
    # recurrent-memory rules): it resumes at a checkpoint or its state's exact end only.
    recurrent_memory: bool = False
    # llama.cpp: what the chat template check found (template_check), and whether the
    # server renders with a template that is not its model's (a fallback).
    chat_template: str = ""
    template_fallback: bool = False
    # The checkpoint step (-cms) the server really uses, where it shows it
    # (ServerKind.checkpoint_step: a llama-server's command line), and where that was
    # read; None: it does not show it, and SAKUR4_CHECKPOINT_MIN_STEP says it.
    checkpoint_min_step: int | None = None
    checkpoint_step_from: str = ""
    # How many agents the advice is for (``sakur4 probe --agents N``; subagents count).
    agents: int = 1
    # vLLM (vllm_experiment.py): the prefix cache's block, and the blocks a sliding-window
    # model's layers need kept before a hit (0: every full block is kept), measured.
    prefix_block: int | None = None
    window_blocks: int = 0

    @property
    def server(self) -> ServerKind:
        """The kind of server this is (everything done differently for it)."""
        return server_kind(self.kind)

    @property
    def resumes(self) -> Resumes:
        """Where this server resumes, the profile input and the checkpoint rules: one
        answer from the kind for the source found (:func:`sakur4.backends.resume.resumes`)."""
        return self.server.resumes(
            self.checkpoint_source,
            recurrent=self.recurrent_memory,
            block=self.prefix_block,
            window=self.window_blocks,
        )

    @property
    def source_class(self) -> SourceClass:
        """detected / none / uncertain / shifting: what the engine's profile choice takes."""
        return self.resumes.profile_input

    @property
    def resume_model(self) -> ResumeModel:
        """Where this server resumes a cached prompt (any prefix, vLLM's whole blocks,
        the checkpoint ring, nowhere): what the planner and predictions ask."""
        return self.resumes.model

    def checkpoint_rules(self) -> CheckpointRules | None:
        """Rules for predicting resume points: the ring's (llama.cpp defaults — a
        larger ``-cms`` than the server's predicts fewer checkpoints, never more; a
        recurrent model's memory), full attention for any prefix, None when there is
        nothing to predict."""
        return self.resumes.rules

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["source_class"] = self.source_class
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ProbeResult:
        fields = {k: v for k, v in d.items() if k in cls.__dataclass_fields__}
        fields["sources"] = tuple(fields.get("sources", ()))
        fields["advice"] = tuple(fields.get("advice", ()))
        fields["experiment"] = tuple(ExperimentStep(**s) for s in fields.get("experiment", ()))
        return cls(**fields)


async def _slot_actions(client: LlamaCppClient) -> SlotActions:
    try:
        await client.slot_action(0, "save", _BAD_SLOT_FILE)
    except BackendRefused as e:
        if e.status == 501:
            return "unsupported"
        if e.status == 400:
            return "supported"
        return "unknown"
    except BackendUnavailable:
        return "unknown"
    return "supported"  # pragma: no cover - a server that accepted that name


async def _messages_api(client: HttpBackend, model: str | None) -> bool:
    """Whether the server serves ``/v1/messages``: its token count answers, nothing is generated."""
    body = {"model": model or "local", "messages": [{"role": "user", "content": "hi"}]}
    try:
        answer = await client.post_json("/v1/messages/count_tokens", body, time_limit=10.0)
    except BackendError:
        return False
    return isinstance(answer, Mapping) and isinstance(answer.get("input_tokens"), int)


async def _exact_tokenization(client: LlamaCppClient) -> bool:
    try:
        rendered = await client.apply_template({"messages": [{"role": "user", "content": "hi"}]})
        return bool(rendered) and bool(await client.tokenize(rendered, add_special=True))
    except BackendError:
        return False


# The markers a chat template writes around each turn, as ChatML, Gemma, Llama 3, Phi
# and most others spell them (<|im_start|>, <start_of_turn>, <|eot_id|>, <s>): each is
# one special token of the model the template was written for.
_MARKER = re.compile(r"<\|[A-Za-z0-9_]{1,40}\|>|<[A-Za-z/][A-Za-z0-9_]{0,40}>")
# What llama-server renders with when the model file carries no template and none was
# given (b11434, common/chat.cpp CHATML_TEMPLATE_SRC), as /props shows it.
LLAMA_FALLBACK_TEMPLATE = (
    "{%- for message in messages -%}\n"
    "  {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>\n' -}}\n"
    "{%- endfor -%}\n"
    "{%- if add_generation_prompt -%}\n"
    "  {{- '<|im_start|>assistant\n' -}}\n"
    "{%- endif -%}"
)
TEMPLATE_ADVICE = "chat template "


def template_fix() -> str:
    """The flags that give a llama-server its model's template, for the warning."""
    packaged = PACKAGED_TEMPLATE.shell()
    return (
        "start llama-server with `--jinja --chat-template-file PATH` naming the model's "
        f"template; for the packaged Gemma 3 270M: `{packaged}` (what `sakur4 demo` and "
        "`sakur4 probe --local` start)"
    )


@dataclass(frozen=True, slots=True)
class TemplateCheck:
    """What the server's chat template is: ``fallback`` when it is llama-server's own
    ChatML fallback (the model file carries no template and none was given)."""

    verdict: str
    fallback: bool


async def template_check(client: LlamaCppClient) -> TemplateCheck | None:
    """Which chat template the server renders with, and whether its turn markers are
    tokens of its model.

    The fallback is told by its source, which /props shows. Its markers are then
    checked against the server's own tokenizer: a marker it splits into several tokens
    is text to this model, which was not trained to end its turn with it. Issue 41:
    the packaged Gemma 3 270M writes ``<|im_end|>`` as text there and nothing stops
    it, so every answer ran to the output cap, and tool calls were neither rendered nor
    parsed. A template of the user's own whose markers are text is reported, not
    warned about: answers end where the server is started to stop at its end marker
    (``-r``), which /props does not show. None when the server does not say."""
    try:
        source = (await client.props()).chat_template
        rendered = await client.apply_template(
            {"messages": [{"role": "user", "content": "hi"}], "add_generation_prompt": True}
        )
        markers = list(dict.fromkeys(_MARKER.findall(rendered)))
        text = [m for m in markers if len(await client.tokenize(m)) != 1]
    except BackendError:
        return None
    shown = ", ".join(text)
    if source == LLAMA_FALLBACK_TEMPLATE:
        why = (
            f"{shown} {'is' if len(text) == 1 else 'are'} text to this model, which then "
            "never ends an answer by itself (each runs to the output cap, the markers "
            "printed as text), and "
            if text
            else ""
        )
        return TemplateCheck(
            "llama-server's ChatML fallback (the model file carries no chat template and "
            f"none was given): {why}tool calls are neither rendered nor parsed; " + template_fix(),
            True,
        )
    if not markers:
        return TemplateCheck("not the fallback (no turn markers to check)", False)
    if text:
        return TemplateCheck(
            f"not the fallback; its turn markers are text to this model ({shown}): "
            "answers end where the server is started to stop at them (-r), which it "
            "does not show",
            False,
        )
    return TemplateCheck(
        f"not the fallback; its turn markers are tokens ({', '.join(markers)})", False
    )


async def _exact_chat_tokenization(client: VllmClient) -> bool:
    """vLLM: ``/tokenize`` applies the chat template to messages (exact layouts)."""
    try:
        answer = await client.tokenize_chat({"messages": [{"role": "user", "content": "hi"}]})
    except BackendError:
        return False
    return bool(answer.tokens)


async def _vllm_resend(
    settings: Settings, c: HttpBackend, model: str | None
) -> tuple[CheckpointSource, str]:
    """vLLM: resend one ~300-token prompt; the second send must reuse it in whole blocks,
    as ``cached_tokens`` and the ``/metrics`` counters both say (a nonce keeps anything
    cached before out of it)."""
    body = _probe_body(model)
    async with VllmClient.from_settings(settings, c.url, through=c) as v:
        await v.chat(body)
        before = await v.cache_counters()
        again = (await v.chat(body)).report
        after = await v.cache_counters()
    n = again.prompt_tokens or 0
    expected = block_reuse(n, n)
    counted = {name: int(after[name] - before[name]) for name in CACHE_COUNTERS}
    said = (
        f"an exact resend of {n} tokens reused {again.reused} (whole {BLOCK_TOKENS}-token "
        f"blocks predict {expected}); /metrics counted {counted}"
    )
    if again.reused is None:
        return "exact-prefix", f"vLLM automatic prefix caching, reuse not reported: {said}"
    if again.reused == expected and all(c == expected for c in counted.values()):
        return "exact-prefix", (
            f"vLLM automatic prefix caching: any prefix resumes in whole {BLOCK_TOKENS}-token "
            f"blocks (the last token is always computed): {said}"
        )
    return "uncertain", f"vLLM reused other than whole {BLOCK_TOKENS}-token blocks: {said}"


async def _tiny_chat(http: HttpBackend, model: str | None) -> tuple[bool, str | None]:
    """One 1-token chat request: does the server report reuse, and in which field?"""
    body: dict[str, Any] = {
        "messages": [{"role": "user", "content": "Say ok."}],
        "max_tokens": 1,
        "stream": False,
    }
    if model:
        body["model"] = model
    try:
        answer = await http.post_json("/v1/chat/completions", body)
    except BackendRefused:
        return False, None
    report = read_report(answer) if isinstance(answer, Mapping) else None
    if report is None or not report.verifiable:
        return False, None
    field = "timings.cache_n" if report.source == "timings" else "usage.prompt_tokens_details"
    return True, field + (".cached_tokens" if report.source == "usage" else "")


def _advice(
    result_kind: BackendKind,
    source: CheckpointSource,
    slots: SlotActions,
    verifiable: bool,
    tokens_per_s: float | None,
    recurrent: bool = False,
    agents: int = 1,
) -> tuple[str, ...]:
    """The advice from what the probe found; for several ``agents`` the slot and RAM
    cache lines are :func:`sakur4.backends.agents_advice.for_agents`'s instead."""
    out: list[str] = []
    if not verifiable:
        flag = server_kind(result_kind).reuse_flag
        out.append(
            "the server does not report reused tokens: receipts count every turn as a "
            "full re-prefill (unverifiable)" + (f"; {flag}" if flag else "")
        )
    speed = f" at ~{tokens_per_s:.0f} tokens/s" if tokens_per_s else ""
    if source == "checkpoint-ring" and recurrent:
        out.append(
            "hybrid/recurrent model: a cut resumes only at a checkpoint (the state cannot "
            "be rolled back; `--swa-full` does not change that). Start llama-server with "
            "`-cms 512` (checkpoints at user messages at least 512 tokens apart; default "
            "8192) so a cut lands near where it is asked for; a missed checkpoint "
            f"re-prefills{speed}"
        )
    elif source == "checkpoint-ring" and agents > 1:
        out.append(
            "sliding-window model: cuts resume only at checkpoints. Start llama-server with "
            "`-cms 512` (checkpoints at user messages at least 512 tokens apart; default "
            "8192) so a cut lands near where it is asked for; a missed checkpoint "
            f"re-prefills{speed}"
        )
    elif source == "checkpoint-ring":
        out.append(
            "sliding-window model: cuts resume only at checkpoints. Start llama-server with "
            "`-cms 512` (checkpoints at user messages at least 512 tokens apart; default "
            "8192) so a cut lands near where it is asked for, or with `--swa-full -cram 0` "
            "(any prefix reusable, full-size SWA cache; the RAM prompt cache off, since it "
            "swaps in saved prompts a sliding-window state cannot resume from: "
            f"bench/swa_prompt_cache.py); a missed checkpoint re-prefills{speed}. This is "
            f"for one agent alone: {SUBAGENTS}, and on one slot with the RAM cache off "
            "each switch re-processes the whole prompt: `sakur4 probe --agents N`"
        )
    elif source == "none":
        out.append(
            "no checkpoint source: every eviction re-processes the whole prompt, so the "
            "WindowFirst profile cuts deep and rarely"
        )
    if slots == "unsupported" and agents == 1:  # asked only where the kind has slot actions
        out.append(
            "slot save/restore is off (start with `--slot-save-path DIR`)"
            + (
                "; not a loss here: a restored sliding-window state does not resume"
                if source == "checkpoint-ring" and not recurrent
                else ""
            )
        )
    return tuple(out)


async def _resend(
    backend: Backend, kind: BackendKind, model: str | None
) -> tuple[CheckpointSource, bool, str]:
    """Send one ~300-token prompt twice (a nonce keeps anything cached before out of
    it): the second send says whether the server reports reuse and whether a prefix is
    reused. Returns (source, verifiable, reason)."""
    body = _probe_body(model)
    try:
        await backend.chat(body)
        again = (await backend.chat(body)).report
    except BackendRefused as e:
        return "uncertain", False, f"{kind}: the probe's chat request was refused ({e.what})"
    n = again.prompt_tokens
    said = f"an exact resend of {n if n is not None else '?'} tokens"
    if again.reused is None:
        return (
            "none",
            False,
            (
                f"{kind}: {said} reported no reused tokens; reuse cannot be predicted or "
                "verified, so the plan assumes none (WindowFirst: cut deep and rarely)"
            ),
        )
    if n and again.reused * 2 >= n:
        return (
            "exact-prefix",
            True,
            (
                f"{kind}: {said} reused {again.reused} (usage.prompt_tokens_details."
                "cached_tokens): a cached prefix resumes"
            ),
        )
    return (
        "none",
        True,
        (f"{kind}: {said} reused {again.reused}: no prefix cache to plan with (WindowFirst)"),
    )


async def probe(
    url: str,
    settings: Settings,
    *,
    experiment: bool = True,
    slot: int = 0,
    transport: httpx.AsyncBaseTransport | None = None,
) -> ProbeResult:
    """Probe the server at ``url``. Raises BackendUnavailable if it cannot be reached,
    BackendRefused if what answers is not an inference server.

    ``experiment`` runs the cache experiment on ``slot`` (llama.cpp only; it replaces
    what that slot has cached), only while the slot serves nothing else (SlotBusy).
    Without it the checkpoint source is "uncertain".
    """
    async with HttpBackend(url, timeout=settings.backend_timeout, transport=transport) as c:
        return await probe_with(c, settings, experiment=experiment, slot=slot)


async def slot_state(client: LlamaCppClient, slot: int, time_limit: float) -> SlotState | None:
    """What ``GET /slots`` says of ``slot`` (None: the server does not say, --no-slots)."""
    try:
        slots = await client.slots(time_limit=time_limit)
    except BackendRefused:
        return None
    return next((s for s in slots if s.id == slot), None)


async def _idle(client: LlamaCppClient, slot: int, time_limit: float) -> None:
    """Refuse to send the experiment's next request into a slot serving someone else's."""
    state = await slot_state(client, slot, time_limit)
    if state is not None and state.is_processing:
        raise SlotBusy(
            client.url,
            f"slot {slot} is serving a request: the cache experiment waits for an idle slot "
            "(run `sakur4 probe` when the server is quiet, or pick another --slot)",
        )


def _gateway_result(url: str, ident: Identity) -> ProbeResult:
    upstream = ident.upstream or "its backend"
    return ProbeResult(
        url=normalize_url(url),
        probed_at=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        kind=ident.kind,
        version=ident.version,
        model=None,
        n_ctx=None,
        n_ctx_train=None,
        total_slots=None,
        slot_actions="unknown",
        exact_tokenization=False,
        reuse_verifiable=False,
        reuse_field=None,
        checkpoint_source="uncertain",
        sources=(),
        reason=f"this is a Sakur4 gateway in front of {upstream}",
        experiment=(),
        prefill_tokens_per_s=None,
        advice=(f"probe the inference server itself: sakur4 probe {upstream}",),
        upstream=ident.upstream,
    )


async def probe_with(
    c: HttpBackend, settings: Settings, *, experiment: bool = True, slot: int = 0
) -> ProbeResult:
    """:func:`probe` with an open client (the gateway's link keeps one): any kind is
    identified through it, and the kind's own clients (llama.cpp's for the cache
    experiment) speak through its connection."""
    time_limit = min(settings.backend_timeout, 10.0)
    ident = await identify(c, time_limit=time_limit)
    kind = kind_named(ident.kind)
    if kind is None:
        raise BackendRefused(
            c.url,
            "answers HTTP but is not an inference server (no llama.cpp /props, no "
            "OpenAI-style /v1/models, no vLLM, SGLang, Ollama or TabbyAPI endpoint)",
        )
    if kind.is_gateway:
        return _gateway_result(c.url, ident)
    if kind.probing != "experiment":
        return await _measured(c, None, ident, kind, settings, experiment, slot)
    route = probe_route(settings.routing_headers)
    async with LlamaCppClient(
        c.url, timeout=settings.backend_timeout, headers=route, through=c
    ) as llama:
        return await _measured(c, llama, ident, kind, settings, experiment, slot)


async def _measured(
    c: HttpBackend,
    llama: LlamaCppClient | None,
    ident: Identity,
    kind: ServerKind,
    settings: Settings,
    experiment: bool,
    slot: int,
) -> ProbeResult:
    """What the probe measures of an identified server (``llama``: its llama.cpp client,
    for a kind the cache experiment measures)."""
    time_limit = min(settings.backend_timeout, 10.0)
    url = c.url
    slots: SlotActions = "unknown"
    exact = False
    messages_api = False
    steps: tuple[ExperimentStep, ...] = ()
    tokens_per_s = None
    recurrent = False
    block: int | None = None
    window_blocks = 0
    field: str | None
    template: TemplateCheck | None = None
    if kind.slot_actions and llama is not None:
        slots = await _slot_actions(llama)
    if llama is not None:
        exact = await _exact_tokenization(llama)
        template = await template_check(llama)
    if kind.probing == "blocks":
        async with VllmClient.from_settings(settings, url, through=c) as v:
            v.model = ident.model
            exact = await _exact_chat_tokenization(v)
    if kind.messages_route:
        messages_api = await _messages_api(c, ident.model)
    if llama is not None:
        ident = replace(ident, n_ctx=await llama.context_window() or ident.n_ctx)
    if llama is not None and experiment:
        await _idle(llama, slot, time_limit)
        steps = await run_cache_experiment(
            llama,
            slot=slot,
            restore=slots == "supported",
            rules=DEFAULT_RULES,
            before_each=lambda: _idle(llama, slot, time_limit),
        )
        verdict = classify(steps)
        verifiable, field = verdict.reuse_verifiable, "timings.cache_n"
        source, sources, reason = verdict.source, verdict.sources, verdict.reason
        recurrent = verdict.recurrent
        extend = next((s for s in steps if s.name == "extend"), None)
        if extend and extend.processed and extend.prompt_ms:
            tokens_per_s = round(extend.processed / extend.prompt_ms * 1000, 1)
    elif kind.probing == "blocks":
        # Automatic prefix caching: any cached prefix resumes, in whole blocks. It is
        # on by default (V1 engine); the tiny chat shows whether it is reported.
        verifiable, field = await _tiny_chat(c, ident.model)
        source, reason = await _vllm_resend(settings, c, ident.model)
        if source == "exact-prefix" and verifiable:
            # Where a change in the middle resumes: a sliding-window model keeps less.
            try:
                async with VllmClient.from_settings(settings, url, through=c) as v:
                    v.model = ident.model
                    found_blocks = await measure_block_cache(v)
            except BackendError as e:
                reason = f"{reason}; a change in the middle not measured ({e.what})"
            else:
                steps, block = found_blocks.steps, found_blocks.block
                window_blocks = found_blocks.window_blocks
                if found_blocks.fits:
                    reason = f"{reason}; measured: {found_blocks.reason}"
                else:
                    source = "uncertain"
                    reason = f"vLLM resumed where no block model predicts: {found_blocks.reason}"
        sources = (source,) if source != "uncertain" else ()
    elif llama is not None:
        # Every llama-server answer carries timings.cache_n (BACKEND-FACTS): no
        # request is sent into a slot a harness may be using just to see it.
        verifiable, field = True, "timings.cache_n"
        source, sources, reason = "uncertain", (), "the cache experiment was not run"
    else:
        # Every other kind through its own client (its reading of the report: SGLang's
        # null), the resend loading the model first (Ollama shows the window it loaded).
        kind_client = open_backend(ident.kind, url, settings, model=ident.model, through=c)
        try:
            source, verifiable, reason = await _resend(kind_client, ident.kind, ident.model)
            window = await kind_client.context_window()
        finally:
            await kind_client.aclose()
        field = "usage.prompt_tokens_details.cached_tokens"
        sources = (source,) if source not in ("uncertain", "none") else ()
        ident = replace(ident, n_ctx=window or ident.n_ctx)
    if not verifiable:
        field = None
    step = await asyncio.to_thread(kind.checkpoint_step, url)
    found = ProbeResult(
        url=normalize_url(c.url),
        probed_at=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        kind=ident.kind,
        version=ident.version,
        model=ident.model,
        n_ctx=ident.n_ctx,
        n_ctx_train=ident.n_ctx_train,
        total_slots=ident.total_slots,
        slot_actions=slots,
        exact_tokenization=exact,
        reuse_verifiable=verifiable,
        reuse_field=field,
        checkpoint_source=source,
        sources=sources,
        reason=reason,
        experiment=steps,
        prefill_tokens_per_s=tokens_per_s,
        advice=(),
        messages_api=messages_api,
        fingerprint=ident.fingerprint,
        layout=kind.layout,
        recurrent_memory=recurrent,
        chat_template=template.verdict if template else "",
        template_fallback=template.fallback if template else False,
        checkpoint_min_step=step.tokens if step else None,
        checkpoint_step_from=step.source if step else "",
        prefix_block=block,
        window_blocks=window_blocks,
    )
    return with_advice(found)


def with_advice(r: ProbeResult, agents: int = 1) -> ProbeResult:
    """``r`` advised for ``agents`` agents on its server (1: one agent alone): the
    template's warning, what the probe found, the window, and how many slots and which
    cache flags several agents need (:mod:`sakur4.backends.agents_advice`). A gateway's result
    keeps its own line."""
    if r.server.is_gateway:
        return r
    r = replace(r, agents=agents)
    found = _advice(
        r.kind,
        r.checkpoint_source,
        r.slot_actions,
        r.reuse_verifiable,
        r.prefill_tokens_per_s,
        r.recurrent_memory,
        agents,
    )
    advice = _template_advice(_template_of(r)) + found + r.server.window_advice(r.n_ctx)
    return replace(r, advice=advice + for_agents(r))


def _template_advice(template: TemplateCheck | None) -> tuple[str, ...]:
    """The chat template's warning, first: with it every answer runs to its cap."""
    return (f"{TEMPLATE_ADVICE}{template.verdict}",) if template and template.fallback else ()


Recall = Callable[[str, str], Awaitable["ProbeResult | None"]]
Keep = Callable[["ProbeResult"], Awaitable[None]]


async def recall_or_measure(
    c: HttpBackend,
    settings: Settings,
    recall: Recall,
    keep: Keep,
    *,
    changed: bool = False,
    slot: int = 0,
) -> tuple[ProbeResult, str]:
    """The probe result a gateway plans with, and how it was had (a line to say).

    The cache experiment replaces what its slot caches and, on the live server of
    issue 31, once crashed it; so it runs only where nothing is at stake or nothing is
    known: on a slot that has served nothing since the server started (or ``changed``:
    a server that restarted since the gateway last looked), else the result stored for
    this server's fingerprint is used, else it runs on the slot if that is idle; a busy
    slot leaves the source uncertain. ``recall(url, fingerprint)`` finds a stored
    result, ``keep`` stores a measured one.
    """
    time_limit = min(settings.backend_timeout, 10.0)
    quick = await probe_with(c, settings, experiment=False)
    if quick.server.probing != "experiment" or quick.fingerprint is None:
        return quick, f"{quick.kind}: the cache experiment needs llama.cpp"
    async with LlamaCppClient.from_settings(settings, c.url, through=c) as llama:
        state = await slot_state(llama, slot, time_limit)
    untouched = changed or (state is not None and state.id_task is None)
    stored = await recall(quick.url, quick.fingerprint)
    if stored is not None and not untouched:
        return _with_stored(quick, stored), f"stored probe of {stored.probed_at}"
    if state is None or state.is_processing:
        why = "slot busy" if state is not None else "GET /slots is off"
        if stored is not None:
            return _with_stored(quick, stored), f"stored probe of {stored.probed_at} ({why})"
        return quick, (
            f"not measured ({why}): planned as uncertain; run `sakur4 probe {quick.url}` "
            "when the server is quiet"
        )
    try:
        measured = await probe_with(c, settings, experiment=True, slot=slot)
    except SlotBusy as e:
        return (_with_stored(quick, stored) if stored else quick), f"not measured: {e.what}"
    await keep(measured)
    return measured, "measured now" + (" (nothing cached on the slot)" if untouched else "")


def _with_stored(quick: ProbeResult, stored: ProbeResult) -> ProbeResult:
    """What the server says now, with the checkpoint source a stored experiment found."""
    merged = replace(
        quick,
        probed_at=stored.probed_at,
        checkpoint_source=stored.checkpoint_source,
        sources=stored.sources,
        reason=stored.reason,
        experiment=stored.experiment,
        prefill_tokens_per_s=stored.prefill_tokens_per_s,
        recurrent_memory=stored.recurrent_memory,
    )
    return with_advice(merged, quick.agents)


def _template_of(result: ProbeResult) -> TemplateCheck | None:
    return TemplateCheck(result.chat_template, result.template_fallback)


def save_probe(store: Store, result: ProbeResult) -> None:
    """Record a probe result for its URL (history is kept; the newest row wins)."""
    with store.tx() as conn:
        conn.execute(
            "INSERT INTO backend_probe (url, probed_at, result) VALUES (?, ?, ?)",
            (result.url, result.probed_at, json.dumps(result.as_dict())),
        )


def stored_probe(store: Store, url: str, fingerprint: str) -> ProbeResult | None:
    """The newest measured result for ``url`` whose server showed ``fingerprint``."""
    rows = store.query(
        "SELECT result FROM backend_probe WHERE url = ? ORDER BY id DESC LIMIT 100",
        (normalize_url(url),),
    )
    for (raw,) in rows:
        try:
            found = ProbeResult.from_dict(json.loads(raw))
        except (ValueError, TypeError):
            continue  # a row an older version wrote differently
        if found.fingerprint == fingerprint and found.experiment:
            return found
    return None


def latest_probe(store: Store, url: str) -> ProbeResult | None:
    """The newest stored probe result for ``url``, or None if it was never probed."""
    rows = store.query(
        "SELECT result FROM backend_probe WHERE url = ? ORDER BY id DESC LIMIT 1",
        (normalize_url(url),),
    )
    if not rows:
        return None
    try:
        return ProbeResult.from_dict(json.loads(rows[0][0]))
    except (ValueError, TypeError) as e:
        raise StoreError(f"stored probe result for {url} cannot be read: {e}") from e


# -- doctor ---------------------------------------------------------------------------

DOCTOR_TIME_LIMIT = 5.0


class _Reports(Protocol):
    def add(self, name: str, level: Literal["ok", "warn", "fail"], detail: str) -> None: ...


def last_stored(store_path: Path | str, url: str) -> ProbeResult | None:
    """The last full probe of ``url`` from the store, read-only (doctor and wrap never
    create it): a SQLite file, or a PostgreSQL URL."""
    if isinstance(store_path, Path) and not store_path.is_file():
        return None
    try:
        conn = connect(store_path, readonly=True)
    except StoreError:
        return None
    try:
        row = conn.execute(
            "SELECT result FROM backend_probe WHERE url = ? ORDER BY id DESC LIMIT 1", (url,)
        ).fetchone()
        return ProbeResult.from_dict(json.loads(row[0])) if row else None
    except (DriverError, ValueError, TypeError):
        return None  # no such table yet, or a row this version cannot read
    finally:
        conn.close()


def backend(report: _Reports, settings: Settings) -> None:
    """doctor: a quick probe of ``SAKUR4_BACKEND`` (no cache experiment, a few seconds at
    most) and the checkpoint source its last full probe found."""
    if not settings.backend:
        report.add("backend", "warn", "SAKUR4_BACKEND not set: the gateway needs a server URL")
        return
    quick = settings.model_copy(
        update={"backend_timeout": min(settings.backend_timeout, DOCTOR_TIME_LIMIT)}
    )
    try:
        found = run_blocking(probe(settings.backend, quick, experiment=False))
    except Sakur4Error as e:
        report.add("backend", "fail", str(e))
        return
    reuse = (
        f"reuse verifiable ({found.reuse_field})"
        if found.reuse_verifiable
        else ("reuse unverifiable: receipts will count full re-prefills")
    )
    report.add(
        "backend",
        "ok" if found.reuse_verifiable else "warn",
        f"{found.kind} {found.version or ''} at {found.url}: n_ctx {found.n_ctx}, "
        f"slots {found.total_slots}, slot actions {found.slot_actions}, "
        f"exact tokenization {'yes' if found.exact_tokenization else 'no'}, {reuse}",
    )
    if found.chat_template:
        level: Literal["ok", "warn"] = "warn" if found.template_fallback else "ok"
        report.add("chat template", level, found.chat_template)
    last = last_stored(settings.store, found.url)
    if last is None:
        report.add("checkpoints", "warn", f"not measured yet: run `sakur4 probe {found.url}`")
        return
    report.add(
        "checkpoints",
        "ok" if last.source_class in ("detected", "shifting") else "warn",
        f"{last.checkpoint_source} ({last.source_class}; probed {last.probed_at}): {last.reason}",
    )
    for line in last.advice:
        if not line.startswith(TEMPLATE_ADVICE):  # the row above says it as of now
            report.add("advice", "warn", line)


def _probe_body(model: str | None) -> dict[str, Any]:
    """A ~300-token prompt sent twice by the reuse probes; the nonce keeps anything
    cached before out of it."""
    words = " ".join(f"item {i} of the probe list," for i in range(60))
    body: dict[str, Any] = {
        "messages": [{"role": "user", "content": f"Probe {uuid.uuid4()}: {words}"}],
        "max_tokens": 1,
    }
    if model:
        body["model"] = model
    return body
