"""Fixtures that start a real llama-server: one process per variant per session.

Each variant starts on first use (~2 s), listens on 127.0.0.1 with a free port, is
small (-c 8192, -np 1, -t 2, --metrics) and is stopped by its own pid at the end of
the session. Every variant but two runs the chat template Sakur4 ships for the
packaged model and its stops (``launcher.PACKAGED_TEMPLATE``, which :class:`LlamaServer`
passes by itself), as the servers Sakur4 starts for users do. The binary and model
come from the project's set-up (the cache directory ``scripts/setup`` fills, or
SAKUR4_LLAMA_SERVER / SAKUR4_MODEL), read before the tests isolate the environment.
Missing → the test is skipped, or fails under ``--require-backend`` (CI).

Variants:
- ``llama_ring``: server defaults — checkpoint ring (Gemma 3 is sliding-window),
  ``-cms 8192``, no slot actions. ``-lv 4`` so the log shows checkpoints.
- ``llama_ring_cms``: ring with ``-cms 256``, ``--slot-save-path`` (so a test can
  erase the slot to an empty state) and ``-cram 0`` (no RAM prompt cache swapping
  states in): the predictable ring the checkpoint predictor is held against.
- ``llama_swa_full``: ``--swa-full`` — any prefix is reusable — with
  ``--slot-save-path``, where a restored slot state does resume.
- ``llama_slots``: ring with ``--slot-save-path`` — slot save/restore enabled.
- ``llama_gemma``: ring with Gemma 3's own chat template
  (``scripts/templates/gemma3-it.jinja``, as Google ships it with the instruct
  models): the system prompt folded into the first user turn, contents trimmed,
  roles that must alternate.
- ``llama_fallback``: ring with no template flag: the packaged model file carries
  none, so llama-server renders its ChatML fallback, without tool calls and with
  nothing that stops an answer (issue 41; the probe's warning is held against it).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from sakur4.backends.launcher import (
    ChatTemplate,
    LlamaServer,
    ServerFlags,
    ensure_model,
    find_llama_server,
)
from sakur4.backends.llamacpp import LlamaCppClient
from sakur4.errors import Sakur4Error
from sakur4.settings import Settings


async def detokenize(client: LlamaCppClient, tokens: Sequence[int]) -> str:
    """The text of ``tokens`` (only tests need it: they check token spans with it)."""
    return str((await client.post_json("/detokenize", {"tokens": list(tokens)}))["content"])


def _real_settings() -> Settings | None:
    try:
        return Settings.load()
    except Sakur4Error:
        return None


# Read at import, before the autouse fixture clears SAKUR4_* and moves HOME.
REAL_SETTINGS = _real_settings()


def locate_backend(settings: Settings | None, *, require: bool) -> tuple[Path, Path]:
    """The set-up's llama-server and model; skip (or fail if required) when missing."""
    try:
        if settings is None:
            raise Sakur4Error("SAKUR4_* settings could not be read")
        return find_llama_server(settings), ensure_model(settings)
    except Sakur4Error as e:
        message = f"real llama-server unavailable: {e}"
        if require:
            pytest.fail(message + " (--require-backend)", pytrace=False)
        pytest.skip(message)


def _start(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    name: str,
    flags: ServerFlags,
) -> Iterator[LlamaServer]:
    binary, model = locate_backend(
        REAL_SETTINGS, require=bool(request.config.getoption("--require-backend"))
    )
    logs = tmp_path_factory.mktemp(f"llama-{name}")
    # die_with_parent: a test run killed by a timeout must not leave servers behind.
    server = LlamaServer(binary, model, flags, log_path=logs / "server.log", die_with_parent=True)
    with server:
        yield server


@pytest.fixture(scope="session")
def llama_ring(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LlamaServer]:
    yield from _start(request, tmp_path_factory, "ring", ServerFlags(verbosity=4))


@pytest.fixture(scope="session")
def llama_ring_cms(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LlamaServer]:
    slots = tmp_path_factory.mktemp("slots-cms")
    flags = ServerFlags(checkpoint_min_step=256, slot_save_path=slots, cache_ram=0, verbosity=4)
    yield from _start(request, tmp_path_factory, "ring-cms", flags)


@pytest.fixture(scope="session")
def llama_swa_full(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LlamaServer]:
    slots = tmp_path_factory.mktemp("slots-swa")
    flags = ServerFlags(swa_full=True, slot_save_path=slots)
    yield from _start(request, tmp_path_factory, "swa-full", flags)


@pytest.fixture(scope="session")
def llama_slots(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LlamaServer]:
    slots = tmp_path_factory.mktemp("slots")
    yield from _start(request, tmp_path_factory, "slots", ServerFlags(slot_save_path=slots))


GEMMA_TEMPLATE = Path(__file__).parents[1] / "scripts" / "templates" / "gemma3-it.jinja"


@pytest.fixture(scope="session")
def llama_gemma(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LlamaServer]:
    flags = ServerFlags(chat_template=ChatTemplate(GEMMA_TEMPLATE))
    yield from _start(request, tmp_path_factory, "gemma", flags)


@pytest.fixture(scope="session")
def llama_fallback(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LlamaServer]:
    flags = ServerFlags(server_template=True)
    yield from _start(request, tmp_path_factory, "fallback", flags)
