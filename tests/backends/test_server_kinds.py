"""One home per server kind (issue 38): each kind is one object in one file, found by
the registry; where a server resumes, its profile input and its checkpoint rules come
from one answer for every source, so they cannot disagree again (for ``slot-restore``
the profile input said "detected" while nothing resumed)."""

from __future__ import annotations

import asyncio
import textwrap
import typing
from pathlib import Path

import httpx
import pytest

from probe_results import probe_result
from sakur4.backends import kinds
from sakur4.backends.estimate import EstimatedLayouts
from sakur4.backends.experiment import CheckpointSource
from sakur4.backends.http import HttpBackend
from sakur4.backends.kinds import KINDS, identify, open_backend, server_kind, token_layouts
from sakur4.backends.ring import CheckpointRules
from sakur4.errors import InputError
from sakur4.probe import _advice
from sakur4.settings import Settings

SOURCES: tuple[CheckpointSource, ...] = typing.get_args(CheckpointSource)


@pytest.mark.parametrize("kind", [k.name for k in KINDS])
@pytest.mark.parametrize("source", SOURCES)
@pytest.mark.parametrize("recurrent", [False, True])
def test_every_source_answers_resume_profile_and_rules_as_one(
    kind: str, source: CheckpointSource, recurrent: bool
) -> None:
    answer = server_kind(kind).resumes(source, recurrent=recurrent)
    resumes_somewhere = answer.model.prefix or answer.model.ring
    # The profile input says "detected" exactly where the planner may resume ("shifting"
    # where the server also shifts kept text: kv-shift, issue 40), and "none" exactly
    # where it may not; rules exist exactly for what was detected.
    found = ("detected", "shifting")
    if source == "uncertain":
        assert answer.profile_input == "uncertain"
    else:
        assert (answer.profile_input in found) == resumes_somewhere
        assert (answer.profile_input == "shifting") == (source == "kv-shift")
        assert (answer.profile_input == "none") == (not resumes_somewhere)
    assert (answer.rules is not None) == (answer.profile_input in found)
    # What a probe result says is that same answer.
    r = probe_result(kind=kind, checkpoint_source=source, recurrent_memory=recurrent)
    assert (r.resume_model, r.source_class, r.checkpoint_rules()) == (
        answer.model,
        answer.profile_input,
        answer.rules,
    )


def test_slot_restore_plans_as_nothing_resumes() -> None:
    """The gateway restores no slot: a server whose only source is a restored slot
    state resumes nothing for it, so it plans deep and rarely (WindowFirst)."""
    r = probe_result(checkpoint_source="slot-restore")
    assert (r.resume_model.name, r.source_class, r.checkpoint_rules()) == ("none", "none", None)


def test_identification_asks_every_kind_in_order_the_generic_last() -> None:
    assert [k.order for k in KINDS] == sorted(k.order for k in KINDS)
    assert KINDS[0].name == "llama.cpp"
    assert KINDS[-1].name == "openai-compatible"
    assert len({k.name for k in KINDS}) == len(KINDS)


def test_a_name_no_kind_has_is_refused_by_name() -> None:
    with pytest.raises(InputError, match="no server kind 'nonesuch'"):
        server_kind("nonesuch")


def test_only_llamacpp_sends_its_own_request_fields() -> None:
    fields = {k.name: k.request_fields(2) for k in KINDS}
    assert fields.pop("llama.cpp") == {"cache_prompt": True, "id_slot": 2}
    assert server_kind("llama.cpp").request_fields(None) == {"cache_prompt": True}
    assert all(f == {} for f in fields.values())


ECHO = '''
"""A kind made for the test: one file, nothing else touched."""

from collections.abc import Mapping

from sakur4.backends.kinds.base import Asked, Identity, ServerKind, estimated_layouts
from sakur4.backends.kinds.generic import open_generic


async def _identify(ask: Asked) -> Identity | None:
    said = await ask.get("/echo/hello")
    if isinstance(said, Mapping) and said.get("echo"):
        return Identity("echo", version=str(said["echo"]), n_ctx=4096)
    return None


KIND = ServerKind(
    "echo",
    order=900,
    identify=_identify,
    open=open_generic,
    layouts=lambda c: None,
    layout="echoed",
    reuse_flag="start echo with --tell",
    window_advice=lambda n: ("echo: say the window",),
)
'''


def test_a_new_kind_is_one_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A kind dropped into the package is identified, opened, laid out, resumed and
    advised about with no other file changed."""
    (tmp_path / "echo.py").write_text(textwrap.dedent(ECHO))
    monkeypatch.setattr(kinds, "__path__", [*kinds.__path__, str(tmp_path)])
    found = kinds.found_kinds()
    monkeypatch.setattr(kinds, "KINDS", found)
    monkeypatch.setattr(kinds, "_BY_NAME", {k.name: k for k in found})
    assert [k.name for k in found][-2:] == ["echo", "openai-compatible"]

    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/echo/hello":
            return httpx.Response(200, json={"echo": "1.0"})
        return httpx.Response(404)

    async def go() -> str:
        async with HttpBackend(
            "http://echo:1", timeout=5, transport=httpx.MockTransport(answer)
        ) as h:
            return (await identify(h)).kind

    assert asyncio.run(go()) == "echo"
    client = open_backend("echo", "http://echo:1", Settings.load())
    assert isinstance(token_layouts(client), EstimatedLayouts)  # the generic client's
    asyncio.run(client.aclose())
    r = probe_result(kind="echo", checkpoint_source="exact-prefix")
    assert r.checkpoint_rules() == CheckpointRules(n_swa=0)
    assert "start echo with --tell" in " ".join(_advice("echo", "none", "unknown", False, None))
