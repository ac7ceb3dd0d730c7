"""The probe against a real llama-server serving a hybrid (recurrent + attention) model:
the tiny random-weight LFM2 that scripts/build-recurrent-model.py writes (set-up does,
into the cache). Built here when missing, with the gguf package of vLLM's environment;
skipped, saying why, when no Python with gguf is there to build it."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path
from typing import Any

import pytest

from fixtures_llama import REAL_SETTINGS, locate_backend
from sakur4.backends.launcher import LlamaServer, ServerFlags
from sakur4.backends.ring import RECURRENT
from sakur4.probe import ProbeResult, probe
from sakur4.settings import Settings

SCRIPT = Path(__file__).parents[2] / "scripts" / "build-recurrent-model.py"
MODEL_FILE = "lfm2-tiny-random.gguf"


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def _python_with_gguf(cache_dir: Path) -> Path | None:
    for python in sorted((cache_dir / "vllm").glob("*/bin/python")):
        if subprocess.run([python, "-c", "import gguf"], capture_output=True).returncode == 0:
            return python
    return None


def recurrent_backend(require: bool) -> tuple[Path, Path]:
    """The set-up's llama-server and the recurrent model (built now if missing)."""
    binary, gemma = locate_backend(REAL_SETTINGS, require=require)
    assert REAL_SETTINGS is not None  # locate_backend skipped otherwise
    target = REAL_SETTINGS.cache_dir / "models" / MODEL_FILE
    if not target.is_file():
        python = _python_with_gguf(REAL_SETTINGS.cache_dir)
        if python is None:
            pytest.skip(
                f"recurrent model not built ({target} missing) and no Python with the gguf "
                "package to build it (scripts/install-vllm.sh, then scripts/setup-tests)"
            )
        subprocess.run([python, SCRIPT, gemma, target], check=True, timeout=600)
    return binary, target


@pytest.mark.backend
def test_probe_of_a_hybrid_recurrent_model_finds_its_checkpoint_ring(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    binary, model = recurrent_backend(bool(request.config.getoption("--require-backend")))
    flags = ServerFlags(slot_save_path=tmp_path / "slots", verbosity=4)
    (tmp_path / "slots").mkdir()
    with LlamaServer(
        binary, model, flags, log_path=tmp_path / "server.log", die_with_parent=True
    ) as server:
        r: ProbeResult = run(probe(server.url, Settings.load()))
        log = server.log_text()
    assert "llama_memory_recurrent" in log  # the server holds a recurrent state for it
    assert "restored context checkpoint" in log  # and resumed from checkpoints (-lv 4)
    assert r.checkpoint_source == "checkpoint-ring"
    assert r.recurrent_memory, r.reason
    assert r.checkpoint_rules() == RECURRENT
    steps = [s for s in r.experiment if s.name != "restore"]
    assert [s.reused for s in steps] == [s.recurrent_predicted for s in steps]
    extend = next(s for s in steps if s.name == "extend")
    assert extend.reused == extend.divergence  # the state's exact end resumes
    assert not any("--swa-full` (any prefix" in a for a in r.advice)
    # Unlike a sliding-window state, a saved recurrent state is whole: restored, it resumes.
    assert r.sources == ("checkpoint-ring", "slot-restore")
