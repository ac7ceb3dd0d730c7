"""``sakur4 probe``: what the inference server can do, measured and recorded."""

from __future__ import annotations

import click

from sakur4.backends.blocking import run_blocking
from sakur4.backends.launcher import LlamaServer, ServerFlags
from sakur4.bounds import AGENTS, SLOT
from sakur4.cli.common import bounded, emit_json, opened, settings, table
from sakur4.errors import SettingsError
from sakur4.probe import ProbeResult, probe, save_probe, with_advice


def _show(r: ProbeResult) -> None:
    if r.server.is_gateway:
        click.echo(f"{r.url}: {r.reason} (Sakur4 {r.version})")
        for line in r.advice:
            click.echo(f"  advice: {line}")
        return
    click.echo(f"{r.url}: {r.kind} {r.version or ''}".rstrip())
    click.echo(f"  model           {r.model or '?'}")
    train = f" (trained {r.n_ctx_train})" if r.n_ctx_train else ""
    click.echo(f"  context window  {r.n_ctx if r.n_ctx is not None else '?'} tokens{train}")
    click.echo(f"  slots           {r.total_slots if r.total_slots is not None else '?'}")
    click.echo(f"  slot actions    {r.slot_actions}")
    click.echo(f"  exact tokens    {'yes' if r.exact_tokenization else 'no'}")
    if r.layout:
        click.echo(f"  layout          {r.layout}")
    if r.chat_template and not r.template_fallback:  # a fallback is the first advice
        click.echo(f"  chat template   {r.chat_template}")
    if not r.messages_api:
        api = "not served: the gateway translates /v1/messages to chat completions"
    elif (r.total_slots or 1) > 1:
        api = "served, but the gateway translates (several slots; id_slot is dropped there)"
    else:
        api = "served: the gateway forwards /v1/messages"
    click.echo(f"  messages API    {api}")
    verifiable = (
        f"yes, verified ({r.reuse_field})"
        if r.reuse_verifiable
        else "no: receipts say unverifiable"
    )
    click.echo(f"  reuse reported  {verifiable}")
    memory = " (hybrid/recurrent memory)" if r.recurrent_memory else ""
    click.echo(
        f"  checkpoints     {r.checkpoint_source}{memory} -> profile input: {r.source_class}"
    )
    click.echo(f"                  {r.reason}")
    if r.checkpoint_min_step is not None:
        step = f"{r.checkpoint_min_step} tokens, from {r.checkpoint_step_from}"
        click.echo(f"  checkpoint step {step}")
    if r.prefix_block is not None:
        kept = (
            f"a sliding window's hit needs its {r.window_blocks} blocks before it kept"
            if r.window_blocks
            else "every full block kept"
        )
        click.echo(f"  prefix blocks   {r.prefix_block} tokens, {kept} (measured)")
    if r.experiment:
        rows = [
            {
                "step": s.name,
                "prompt": s.prompt_tokens,
                "prefix": s.divergence,
                "reused": s.reused,
                "processed": s.processed,
                "ms": f"{s.prompt_ms:.0f}" if s.prompt_ms is not None else "",
                "ring model": s.ring_predicted if s.ring_predicted is not None else "",
                "recurrent model": (
                    s.recurrent_predicted if s.recurrent_predicted is not None else ""
                ),
                "block model": s.block_predicted if s.block_predicted is not None else "",
            }
            for s in r.experiment
        ]
        cols = ["step", "prompt", "prefix", "reused", "processed", "ms", "ring model"]
        if r.prefix_block is not None:  # vLLM's experiment: its block model, no ring
            cols = ["step", "prompt", "prefix", "reused", "processed", "block model"]
        if r.recurrent_memory:
            cols.append("recurrent model")
        for line in table(rows, cols).splitlines():
            click.echo(f"    {line}")
    if r.prefill_tokens_per_s:
        click.echo(f"  prefill         ~{r.prefill_tokens_per_s:.0f} tokens/s")
    for line in r.advice:
        click.echo(f"  advice: {line}")


@click.command("probe")
@click.argument("url", required=False)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option(
    "--quick",
    is_flag=True,
    help="Skip the cache experiment (no prefill); the checkpoint source stays uncertain.",
)
@click.option(
    "--slot",
    default=0,
    show_default=True,
    type=bounded(SLOT),
    help="Slot the cache experiment runs on (what it has cached is replaced).",
)
@click.option(
    "--local",
    is_flag=True,
    help="Start the set-up's llama-server and model on loopback, probe it, stop it.",
)
@click.option("--swa-full", is_flag=True, help="With --local: start it with --swa-full.")
@click.option(
    "--agents",
    default=1,
    show_default=True,
    type=bounded(AGENTS),
    help="How many agents share the server (subagents and every other terminal count): "
    "the advice says how many slots and which cache flags they need.",
)
@click.pass_context
def probe_cmd(
    ctx: click.Context,
    url: str | None,
    as_json: bool,
    quick: bool,
    slot: int,
    local: bool,
    swa_full: bool,
    agents: int,
) -> None:
    """Identify the server at URL [SAKUR4_BACKEND], measure how it reuses its cache
    (a few seconds of prefill, on an idle slot), and record the result for the gateway.
    Fails when nothing answers or what answers is not an inference server; names a
    Sakur4 gateway and the server it is in front of."""
    s = settings(ctx)
    if local:
        if url:
            raise SettingsError("give a URL or --local, not both")
        flags = ServerFlags(swa_full=swa_full)
        with LlamaServer.from_settings(s, flags, die_with_parent=True) as server:
            result = run_blocking(probe(server.url, s, experiment=not quick, slot=slot))
        result = with_advice(result, agents)
    else:
        target = url or s.backend
        if not target:
            raise SettingsError("no backend URL: pass one or set SAKUR4_BACKEND")
        result = with_advice(
            run_blocking(probe(target, s, experiment=not quick, slot=slot)), agents
        )
        if not result.server.is_gateway:  # a gateway is not what the gateway plans for
            with opened(s) as store:
                save_probe(store, result)
    if as_json:
        emit_json(result.as_dict())
    else:
        _show(result)
