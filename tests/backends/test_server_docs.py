"""docs/harnesses.md's server start lines are the ones Sakur4 runs (issue 41: the
documented vLLM line lacked what ``VllmServer`` sets, and vLLM refused to start).

Shown failing: docs/verification/startup.md.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

from sakur4.backends.vllm_server import VllmServer
from script_loader import load_script


def generator() -> ModuleType:
    return load_script("gen_server_docs")


def test_the_documented_start_lines_are_the_ones_run() -> None:
    gen = generator()
    text = gen.DOC.read_text(encoding="utf-8")
    assert gen.render(text) == text, (
        f"docs/harnesses.md's start lines differ from the servers': run {gen.REGENERATE}"
    )


def test_the_vllm_line_sets_what_vllm_needs_here(tmp_path: Path) -> None:
    # What the documented line lacked (the start failed on memory), as the fixture's
    # server runs it: its environment and flags, paths and port aside.
    server = VllmServer(tmp_path / "bin" / "python", tmp_path / "model")
    server.port = 8000
    line = server.command_line()
    for needed in ("HF_HUB_OFFLINE=1", "VLLM_CPU_KVCACHE_SPACE=1", "--enforce-eager"):
        assert needed in line
    assert server.environment()["VLLM_CPU_KVCACHE_SPACE"] == "1"
    words = line.replace("\\\n", " ").split()
    assert words[2:] == [str(server.python), *server.command()[1:]]
