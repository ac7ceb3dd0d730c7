"""The domain values every layer shares: an episode's tier and kind, the token estimate,
and the Ledger's fact record.

The store, the context engine and the surfaces all use these (SPEC §13: the
foundation's one vocabulary). A tier is an ``IntEnum`` because the engine orders
and steps tiers (higher is further down the ladder); the store and every surface
write its :attr:`Tier.label` (``live``, ``masked``, …), the strings the
``episodic_stream.tier`` column has always held. A kind is a ``StrEnum``: its
value is the stored string. :func:`estimate_tokens` is the one estimate for text no
tokenizer has counted (the episodic stream, the repo map, the gateway's unseen messages).
:class:`Fact` is the one record of a Ledger fact (SPEC §13: one fact record); it is
here, not in ``sakur4.ledger``, because the MCP server publishes its schema when it
starts and must not load the Ledger (tree-sitter, the worker pool) to do so.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import IntEnum, StrEnum
from typing import Any

from sakur4.errors import InputError


class Tier(IntEnum):
    """How much of an episode the prompt shows; higher is further down the ladder (SPEC §7)."""

    LIVE = 0
    MASKED = 1
    REFERENCED = 2
    ARCHIVED = 3
    DROPPED = 4

    @classmethod
    def of(cls, label: str) -> Tier:
        """The tier a stored or typed label names: ``"masked"`` is :attr:`MASKED`."""
        try:
            return _BY_LABEL[label]
        except KeyError:
            names = ", ".join(_BY_LABEL)
            raise InputError(f"unknown tier {label!r}; tiers are {names}") from None

    @property
    def label(self) -> str:
        """The name receipts and the store use: ``live``, ``masked``, …"""
        return self.name.lower()

    @property
    def shown(self) -> bool:
        """Whether the prompt shows anything for an episode at this tier."""
        return self < Tier.ARCHIVED

    @property
    def folded(self) -> bool:
        """Out of the prompt (or stubbed there) but whole in the store: it can be opened."""
        return Tier.LIVE < self < Tier.DROPPED


_BY_LABEL = {t.name.lower(): t for t in Tier}


class Kind(StrEnum):
    """What an episode is; tool calls and results render in their own shapes.

    In the store, ``tool_call`` is an assistant message that makes calls; in the
    engine each call is an episode of its own.
    """

    MESSAGE = "message"
    TOOL_CALL = "tool_call"
    TOOL_RESULT = "tool_result"
    NOTE = "note"


# Every kind, in order (a CLI choice, an error message's list).
KINDS: tuple[Kind, ...] = tuple(Kind)


class Nature(StrEnum):
    """What an episode's text is, whoever's role carries it (issue 30).

    A harness puts its own instructions, the user's request and tool output in
    messages of any role (Claude Code sends a tool's output inside a user message,
    aider a repo map as one): what may fold follows this, never the role.
    """

    INSTRUCTION = "instruction"  # the harness's: system text, reminders, context it injects
    REQUEST = "request"  # the user's own words
    TOOL_OUTPUT = "tool_output"  # what a tool returned, wherever the harness put it
    ANSWER = "answer"  # the model's turn: its text and its calls
    UNCLASSIFIED = "unclassified"  # a harness shape not known: kept, never guessed


def natures_named(text: str) -> frozenset[Nature]:
    """The natures a comma-separated list names (``SAKUR4_KEEP_TEXT``); ValueError for
    a name that is not one."""
    given = [v.strip() for v in text.split(",") if v.strip()]
    bad = [v for v in given if v not in _NATURES]
    if bad:
        raise ValueError(f"{bad[0]!r} is not one of {', '.join(sorted(_NATURES))}")
    return frozenset(Nature(v) for v in given)


_NATURES = frozenset(n.value for n in Nature)

# What keeps its text by default: the agent needs it every turn, and what cannot be
# classified is kept rather than guessed (SAKUR4_KEEP_TEXT overrides).
KEEP_TEXT: frozenset[Nature] = frozenset({Nature.INSTRUCTION, Nature.REQUEST, Nature.UNCLASSIFIED})


def estimate_tokens(text: str) -> int:
    """A rough count, one token per four characters rounded up, for text no tokenizer saw."""
    return (len(text) + 3) // 4


# A ``symbolic_fact`` row. The indexer compares what it parsed against these, the
# Ledger's readers return them, and the CLI (``--json``) and the MCP tools publish them
# as they are: the docstring and each field's metadata ``description`` are the MCP
# output schema's (pydantic reads both), so they are written for a client.
@dataclass(frozen=True)
class Fact:
    """One Ledger fact: a symbol as the parser saw it."""

    id: int
    path: str
    qualified_name: str
    name: str = field(
        metadata={"description": "the bare name: the qualified name's last part, less any ~N"}
    )
    kind: str
    language: str
    signature: str
    start_line: int | None
    end_line: int | None
    symbol_hash: str
    file_hash: str = field(
        metadata={"description": "its file's content hash when written ('' if the file was gone)"}
    )
    tombstone: bool = field(metadata={"description": "the symbol was removed from the code"})
    indexed_at: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)
