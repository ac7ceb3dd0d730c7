"""The one settings object: ``SAKUR4_*`` environment variables, overridden by CLI flags.

Every entry point builds its configuration with :func:`Settings.load`; explicit
arguments win over the environment, the environment over the defaults. A field
that nothing reads is a defect (a test checks each one changes behaviour).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

import platformdirs
from pydantic import AfterValidator, Field, SecretStr, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict

from sakur4.errors import SettingsError
from sakur4.vocabulary import natures_named

ProfileName = Literal["cache-first", "window-first", "balanced", "shift-first"]
# What never folds: natures, comma-separated (checked here, read by the gateway).
KeepText = Annotated[str, AfterValidator(lambda v: ",".join(sorted(natures_named(v))))]
# The harness shapes the gateway knows (sakur4.episodes.natures; "auto": from the request).
HarnessName = Literal["auto", "claude-code", "opencode", "aider", "generic"]

APP = "sakur4"


def _postgresql_url(v: str) -> str:
    if not v.startswith(("postgresql://", "postgres://")):
        raise ValueError("not a postgresql:// URL")
    return v


# A shared PostgreSQL database (issue 39): any other value is a SQLite file's path.
PostgresURL = Annotated[str, AfterValidator(_postgresql_url)]


def default_store() -> Path:
    return Path(platformdirs.user_data_dir(APP)) / "sakur4.db"


def default_cache_dir() -> Path:
    # Must agree with scripts/build-llama-server.sh, which fills it.
    return Path(platformdirs.user_cache_dir(APP))


class Settings(BaseSettings):
    """Sakur4's configuration. Field ``x`` is read from ``SAKUR4_X``."""

    model_config = SettingsConfigDict(
        env_prefix="SAKUR4_", extra="forbid", frozen=True, env_ignore_empty=True
    )

    store: PostgresURL | Path = Field(
        default_factory=default_store,
        union_mode="left_to_right",
        description="the store: a SQLite file, or a postgresql:// URL naming a database "
        "several machines share (messages and `sakur4 doctor` mask its password)",
    )
    cache_dir: Path = Field(
        default_factory=default_cache_dir,
        description="where set-up puts the built llama-server and the assembled model",
    )
    llama_server: Path | None = Field(None, description="llama-server binary (else from cache)")
    model: Path | None = Field(None, description="GGUF model file (else the packaged model)")
    project: Path | None = Field(None, description="project root (else the working directory)")
    backend: str | None = Field(None, description="inference server base URL")
    backend_timeout: float = Field(600.0, gt=0, description="seconds to wait for the backend")
    backend_window: int | None = Field(
        None,
        gt=0,
        description="the context window of a server that does not report one (a generic "
        "OpenAI-compatible server, an Ollama or LM Studio model not loaded yet)",
    )
    routing_headers: str = Field(
        "x-smg-routing-key,x-user-id,x-session-id",
        description="headers that carry each session's routing key, comma-separated, for "
        "a router in front of the server (SGLang Model Gateway reads x-smg-routing-key; "
        "vLLM's production-stack router the header its --session-key names)",
    )
    eviction_profile: ProfileName | None = Field(
        None, description="force an eviction profile instead of the probe's choice"
    )
    cut_tolerance: int = Field(
        4096, ge=0, description="tokens a chosen cut may lie before the requested one"
    )
    checkpoint_min_step: int = Field(
        8192,
        gt=0,
        description="the backend's --checkpoint-min-step (-cms), used when the probe cannot "
        "read it off the server (a llama-server on this machine shows it in its command "
        "line; /props does not say it)",
    )
    slot_parking: Literal["auto", "off"] = Field(
        "auto",
        description="park sessions that outnumber the server's slots in slot files, and "
        "save each answered turn's state for a restart: auto = where the server writes "
        "them (llama-server's --slot-save-path) and a restored state resumes",
    )
    shared_sessions: bool = Field(
        False,
        description="keep each session's planning state in the store, so several gateways "
        "sharing it (a pool behind a load balancer) serve one session turn by turn with "
        "one gateway's plans; each turn then writes the state and holds a lease on it",
    )
    slot_files_cap_mb: int = Field(
        8192,
        gt=0,
        description="MiB of slot files Sakur4 keeps in the server's slot directory (least "
        "recently used out); applied where that directory is on this machine",
    )
    live_results: int = Field(
        1,
        ge=0,
        description="newest answered tool results kept Live (the agent's working memory)",
    )
    tidy_budget: int = Field(
        128,
        ge=0,
        description="cached tokens a fold below the trigger may make the server re-process",
    )
    repair_churn: bool = Field(
        True,
        description="repair known cache churn (Claude Code's billing header, reminders "
        "re-written in the history); other churn is only reported",
    )
    harness: HarnessName = Field(
        "auto",
        description="the harness whose message shapes tell what each part is (instructions, "
        "requests, tool output); 'auto' reads it from the system prompt, 'generic' keeps "
        "every user message whole",
    )
    keep_text: KeepText = Field(
        "instruction,request,unclassified",
        description="what never folds, comma-separated among instruction, request, "
        "tool_output, answer, unclassified",
    )
    gateway_host: str = Field("127.0.0.1", description="gateway bind address")
    gateway_port: int = Field(8741, ge=0, le=65535, description="gateway port")
    http_host: str = Field("127.0.0.1", description="MCP Streamable HTTP bind address")
    http_port: int = Field(8742, ge=0, le=65535, description="MCP Streamable HTTP port")
    http_token: SecretStr | None = Field(
        None, description="bearer token; required when a server binds off loopback"
    )
    max_request_bytes: int = Field(
        16 * 1024 * 1024, gt=0, description="largest request body a server accepts"
    )
    embedder: str = Field(
        "none", description="'none', 'local', or the base URL of a /v1/embeddings server"
    )
    max_index_files: int = Field(50_000, gt=0, description="most source files one index walks")
    max_index_bytes: int = Field(
        512 * 1024 * 1024, gt=0, description="most bytes of source files one index walks"
    )

    @property
    def data_dir(self) -> Path:
        """Where this machine keeps its own files (logs, the demo's output): beside a
        SQLite store, else the platform's user data directory."""
        return self.store.parent if isinstance(self.store, Path) else default_store().parent

    @classmethod
    def load(cls, **overrides: Any) -> Settings:
        """Build settings from the environment; overrides that are not None win."""
        given = {k: v for k, v in overrides.items() if v is not None}
        try:
            return cls(**given)
        except ValidationError as e:
            first = e.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "settings"
            raise SettingsError(
                f"bad setting {where} (SAKUR4_{where.upper()}): {first['msg']}"
            ) from e

    def project_root(self) -> Path:
        """The project the caller works in: the configured root, or the cwd."""
        return (self.project or Path.cwd()).resolve()
