"""llama.cpp's llama-server: identified by ``GET /props`` (``build_info``); exact
layouts (``/apply-template`` + ``/tokenize`` with pieces); its own request fields
(``cache_prompt``, ``id_slot``); read again through ``/props`` and ``/slots`` (its
fingerprint and newest task show a restart); measured by the cache experiment."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sakur4.backends.command_line import PROC, flag_value, listening_process
from sakur4.backends.kinds.base import (
    Asked,
    CheckpointStep,
    Identity,
    Opening,
    ServerKind,
    ServerNow,
    SlotFile,
    SlotFiles,
    as_int,
    fingerprint,
    first_model,
)
from sakur4.backends.layout import TokenLayouts
from sakur4.backends.llamacpp import LlamaCppClient
from sakur4.backends.seam import Backend, Layouts
from sakur4.errors import BackendRefused, BackendUnavailable


async def _identify(ask: Asked) -> Identity | None:
    props = await ask.get("/props")
    if not (isinstance(props, Mapping) and "build_info" in props):
        return None
    gen = props.get("default_generation_settings")
    n_ctx = as_int(gen.get("n_ctx")) if isinstance(gen, Mapping) else None
    meta = (first_model(await ask.get("/v1/models")) or {}).get("meta")
    meta = meta if isinstance(meta, Mapping) else {}
    return Identity(
        "llama.cpp",
        version=str(props["build_info"]),
        model=str(props.get("model_path") or props.get("model_alias") or "") or None,
        n_ctx=n_ctx if n_ctx is not None else as_int(meta.get("n_ctx")),
        n_ctx_train=as_int(meta.get("n_ctx_train")),
        total_slots=as_int(props.get("total_slots")),
        fingerprint=fingerprint(props),
    )


def _open(o: Opening) -> Backend:
    s = o.settings
    return LlamaCppClient(
        o.url, timeout=s.backend_timeout, transport=o.transport, through=o.through
    )


def _layouts(client: Backend) -> Layouts | None:
    return TokenLayouts(client) if isinstance(client, LlamaCppClient) else None


def _fields(slot: int | None) -> dict[str, Any]:
    # llama.cpp's own fields: another kind ignores them, warns or refuses.
    return {"cache_prompt": True} | ({"id_slot": slot} if slot is not None else {})


async def server_now(client: LlamaCppClient, time_limit: float = 10.0) -> ServerNow:
    """Read ``/props`` and ``/slots`` (a few milliseconds, nothing sent into a slot)."""
    props = await client.props(time_limit=time_limit)
    try:
        slots = await client.slots(time_limit=time_limit)
    except BackendRefused:
        slots = ()  # --no-slots
    windows = {s.n_ctx for s in slots if s.n_ctx is not None}
    tasks = [s.id_task for s in slots if s.id_task is not None]
    return ServerNow(
        min(windows) if windows else props.n_ctx,
        fingerprint(props.raw),
        max(tasks) if tasks else None,
    )


async def _reread(client: Backend, time_limit: float) -> ServerNow | None:
    return await server_now(client, time_limit) if isinstance(client, LlamaCppClient) else None


# llama-server's own default (b11434 `llama-server --help`), and where else it is set.
SERVER_MIN_STEP = 8192
MIN_STEP_FLAGS = ("-cms", "--checkpoint-min-step")
MIN_STEP_ENV = "LLAMA_ARG_CHECKPOINT_MIN_SPACING_NT"


def checkpoint_step(url: str, proc: Path = PROC) -> CheckpointStep | None:
    """The -cms a llama-server on this machine was started with: its command line (the
    flag; else the environment variable it reads; else its default). The server shows
    it nowhere else: not in /props, /slots or its start-up log (b11434)."""
    started = listening_process(url, proc)
    if started is None or not started.command:
        return None
    if "llama-server" not in Path(started.command[0]).name:
        return None  # another program on that port (a proxy, a simulator)
    flag = flag_value(started.command, *MIN_STEP_FLAGS)
    given = flag if flag is not None else started.environment.get(MIN_STEP_ENV)
    try:
        step = int(given) if given is not None else SERVER_MIN_STEP
    except ValueError:
        return None
    how = "its -cms" if flag is not None else MIN_STEP_ENV if given is not None else "its default"
    return CheckpointStep(step, f"the server's command line ({how})")


def _slot_client(client: Backend) -> LlamaCppClient:
    if not isinstance(client, LlamaCppClient):
        raise BackendUnavailable(client.url, "slot files are llama-server's alone")
    return client


def _moved(answer: Mapping[str, Any], tokens: str, written: str) -> SlotFile:
    return SlotFile(as_int(answer.get(tokens)) or 0, as_int(answer.get(written)) or 0)


async def _save_slot(
    client: Backend, slot: int, filename: str, headers: Mapping[str, str]
) -> SlotFile:
    answer = await _slot_client(client).slot_action(slot, "save", filename, headers)
    return _moved(answer, "n_saved", "n_written")


async def _restore_slot(
    client: Backend, slot: int, filename: str, headers: Mapping[str, str]
) -> SlotFile:
    answer = await _slot_client(client).slot_action(slot, "restore", filename, headers)
    return _moved(answer, "n_restored", "n_read")


def slot_directory(url: str, proc: Path = PROC) -> Path | None:
    """Where a llama-server on this machine writes slot files: its ``--slot-save-path``
    (b11434 reads it from no environment variable), when given as an absolute path."""
    started = listening_process(url, proc)
    if started is None or not started.command:
        return None
    if "llama-server" not in Path(started.command[0]).name:
        return None
    given = flag_value(started.command, "--slot-save-path")
    if not given or not Path(given).is_absolute():
        return None  # relative to the server's own working directory: not ours to find
    return Path(given)


KIND = ServerKind(
    "llama.cpp",
    order=0,
    identify=_identify,
    open=_open,
    layouts=_layouts,
    layout="exact: /apply-template + /tokenize with pieces",
    probing="experiment",
    request_fields=_fields,
    reread=_reread,
    checkpoint_step=checkpoint_step,
    messages_route=True,
    slot_actions=True,
    slot_files=SlotFiles(_save_slot, _restore_slot, slot_directory),
    lists_model_path=True,
)
