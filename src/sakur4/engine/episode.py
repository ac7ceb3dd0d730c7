"""What the engine is told about one episode of the session's transcript."""

from __future__ import annotations

from dataclasses import dataclass, field

from sakur4.errors import InputError
from sakur4.vocabulary import Kind, Tier

MESSAGE_ROLES = frozenset({"system", "user", "assistant"})


@dataclass(frozen=True, slots=True)
class Episode:
    """One message, tool call, tool result or note, in prompt order.

    ``tokens`` is the size of ``content`` (for a tool call, its arguments) as the
    gateway counted it. A tool call's ``content`` is its JSON arguments string; a
    tool result pairs with its call by ``tool_call_id``. ``pinned`` episodes never
    step (the harness's leading system prompt is always treated as pinned). An
    episode's content never changes under its id: the prompt's stability rests on
    it, so changed content is a new episode.

    ``joins``: a slice of the message before it (a harness message split by what its
    parts are, so each steps on its own): rendered joined to it as one message.
    """

    id: int
    role: str
    kind: Kind
    content: str
    tokens: int
    tier: Tier = Tier.LIVE
    tool_name: str | None = None
    tool_call_id: str | None = None
    droppable: bool = False
    depends_on: tuple[int, ...] = ()
    pinned: bool = False
    joins: bool = False
    # The hash, taken once: the renderings' memos and the planner's and the render's
    # lookups hash an episode thousands of times a turn (the generated hash built and
    # hashed a 12-field tuple each time).
    _hash: int = field(init=False, repr=False, compare=False)

    def __hash__(self) -> int:
        return self._hash

    def __post_init__(self) -> None:
        # Checked once here, so the planner's per-turn pass over a long session
        # need not; plain strings and ints become the enums (compared by identity).
        try:
            object.__setattr__(self, "kind", Kind(self.kind))
            object.__setattr__(self, "tier", Tier(self.tier))
        except ValueError as e:
            raise InputError(f"episode {self.id}: {e}") from e
        if self.tokens < 0:
            raise InputError(f"episode {self.id} has a negative token count")
        if self.kind in (Kind.TOOL_CALL, Kind.TOOL_RESULT):
            if not self.tool_call_id:
                raise InputError(f"episode {self.id} ({self.kind}) has no tool_call_id")
            if self.kind is Kind.TOOL_CALL and not self.tool_name:
                raise InputError(f"episode {self.id} (tool_call) has no tool name")
        elif self.role not in MESSAGE_ROLES:
            raise InputError(
                f"episode {self.id} has role {self.role!r}; a {self.kind} needs one of "
                f"{', '.join(sorted(MESSAGE_ROLES))}"
            )
        fields = (self.id, self.role, self.kind, self.content, self.tokens, self.tier)
        rest = (self.tool_name, self.tool_call_id, self.droppable, self.depends_on)
        object.__setattr__(self, "_hash", hash((*fields, *rest, self.pinned, self.joins)))
