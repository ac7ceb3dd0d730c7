"""The checkpoint step (-cms) the server really uses (issue 38 item 2): read off a
llama-server on this machine (its command line, as /proc shows it; /props, /slots and
its start-up log do not say it), else the setting; the gateway's predictor uses it."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from probe_results import probe_result
from sakur4.backends.command_line import flag_value, listening_process
from sakur4.backends.kinds.llamacpp import checkpoint_step
from sakur4.backends.launcher import LlamaServer
from sakur4.backends.llamacpp import LlamaCppClient
from sakur4.probe import ProbeResult, probe
from sakur4.settings import Settings
from sakur4.store import Store
from sakur4.turns.context import TurnContext
from sakur4.turns.watch import BackendWatch


def _watch(
    settings: Settings, store: Store, client: LlamaCppClient, r: ProbeResult
) -> BackendWatch:
    """What the gateway's pipeline knows of its backend, for the probe result ``r``."""
    return BackendWatch(TurnContext.open(settings, store, client), r)


def test_flag_values_as_the_server_reads_them() -> None:
    command = ("llama-server", "-cms", "512", "-c", "8192", "--checkpoint-min-step=256")
    assert flag_value(command, "-cms", "--checkpoint-min-step") == "256"  # the last wins
    assert flag_value(("llama-server", "-c", "8192"), "-cms") is None
    assert flag_value(("llama-server", "-cms"), "-cms") is None  # no value given


@pytest.mark.backend
def test_a_local_llama_server_says_its_cms_and_its_default(
    llama_ring_cms: LlamaServer, llama_ring: LlamaServer
) -> None:
    step = checkpoint_step(llama_ring_cms.url)
    assert step is not None
    assert (step.tokens, step.source) == (256, "the server's command line (its -cms)")
    default = checkpoint_step(llama_ring.url)
    assert default is not None
    assert (default.tokens, default.source) == (8192, "the server's command line (its default)")


@pytest.mark.backend
def test_the_probe_carries_the_step_and_the_gateway_plans_with_it(
    llama_ring_cms: LlamaServer, store: Store
) -> None:
    settings = Settings.load()  # SAKUR4_CHECKPOINT_MIN_STEP: 8192
    r = asyncio.run(probe(llama_ring_cms.url, settings, experiment=False))
    assert (r.checkpoint_min_step, r.checkpoint_step_from) == (
        256,
        "the server's command line (its -cms)",
    )
    client = LlamaCppClient(llama_ring_cms.url, timeout=5.0)
    assert _watch(settings, store, client, r).rules.min_step == 256
    asyncio.run(client.aclose())


def test_a_server_that_does_not_show_it_leaves_the_setting(store: Store) -> None:
    r = probe_result(checkpoint_source="checkpoint-ring")
    assert r.checkpoint_min_step is None
    client = LlamaCppClient("http://127.0.0.1:9", timeout=1.0)
    assert _watch(Settings.load(), store, client, r).rules.min_step == 8192


def test_no_step_for_another_machine_or_an_empty_port() -> None:
    assert checkpoint_step("http://10.1.2.3:8080") is None
    assert listening_process("http://example.org:8080") is None
    assert checkpoint_step("http://127.0.0.1:9") is None  # nothing listens there


def _fake_proc(root: Path, port: int, command: list[str], env: dict[str, str]) -> Path:
    """A /proc of one process listening on ``port`` (the OS tables, faked)."""
    (root / "net").mkdir(parents=True)
    head = "  sl local_address rem_address st queues tr retrnsmt uid timeout inode\n"
    row = f"   0: 0100007F:{port:04X} 00000000:0000 0A 00000000:00000000 00:00000000 0 0 0 4242\n"
    (root / "net" / "tcp").write_text(head + row)
    pid = root / "77"
    (pid / "fd").mkdir(parents=True)
    os.symlink("socket:[4242]", pid / "fd" / "3")
    (pid / "cmdline").write_bytes(b"\0".join(a.encode() for a in command) + b"\0")
    (pid / "environ").write_bytes(b"\0".join(f"{k}={v}".encode() for k, v in env.items()))
    return root


def test_fake_proc_environment_variable_is_read_when_no_flag(tmp_path: Path) -> None:
    proc = _fake_proc(
        tmp_path,
        8080,
        ["/opt/llama-server", "-m", "m.gguf"],
        {"LLAMA_ARG_CHECKPOINT_MIN_SPACING_NT": "1024"},
    )
    started = listening_process("http://127.0.0.1:8080", proc)
    assert started is not None
    assert started.command == ("/opt/llama-server", "-m", "m.gguf")
    assert started.environment["LLAMA_ARG_CHECKPOINT_MIN_SPACING_NT"] == "1024"
    step = checkpoint_step("http://127.0.0.1:8080", proc)
    assert step is not None
    assert (step.tokens, step.source) == (
        1024,
        "the server's command line (LLAMA_ARG_CHECKPOINT_MIN_SPACING_NT)",
    )
    other = _fake_proc(tmp_path / "other", 8080, ["python", "-m", "http.server"], {})
    assert checkpoint_step("http://127.0.0.1:8080", other) is None  # not a llama-server
