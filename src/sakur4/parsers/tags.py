"""Parse one file into symbols and references with its language's tag queries.

The queries follow the tree-sitter tags convention: a match captures
``@definition.<kind>`` or ``@reference.<kind>`` on the node and ``@name`` on its
identifier. Sakur4's extra queries add ``@scope`` (a node that qualifies the
definitions inside it without being one: a Rust ``impl``, a Go receiver).

Qualified names are ``module.Outer.inner``: the path-derived module, then every
enclosing definition or scope. A second definition of the same qualified name
in one file (``@x.setter``, ``if``/``else`` variants) is numbered ``name~2``, so
each definition keeps its own fact.
"""

from __future__ import annotations

import functools
import hashlib
import operator
import threading
from dataclasses import dataclass, field
from importlib import resources
from typing import NamedTuple

import tree_sitter as ts

from sakur4.errors import LedgerError
from sakur4.parsers.registry import (
    LANGUAGES,
    LanguageSpec,
    QueryFile,
    language_for_path,
    module_name,
)

MAX_SIGNATURE_CHARS = 400


class Symbol(NamedTuple):
    """A definition found by the parser (becomes a ``symbolic_fact`` row).

    Tuples, not dataclasses: a large tree has hundreds of thousands of these,
    hashed, sorted and sent from a worker process whole (issue 17)."""

    qualified_name: str
    name: str
    kind: str
    signature: str
    start_line: int  # 1-based, inclusive; decorators included
    end_line: int
    symbol_hash: str  # of the definition's text, decorators included


class Reference(NamedTuple):
    """A use of a name (becomes a ``symbol_ref`` row)."""

    from_name: str  # the enclosing definition's qualified name, or the module
    to_name: str  # the bare name as written; resolved against facts at read time
    # call, class, type, implementation, import — or member-<kind> for a name
    # reached through an object, module or path (``x.f()``, ``pkg.F``, ``T::new``)
    kind: str
    line: int


@dataclass(frozen=True)
class ParsedFile:
    path: str
    language: str
    module: str
    symbols: tuple[Symbol, ...]
    references: tuple[Reference, ...]
    has_errors: bool  # tree-sitter recovered from a syntax error; facts still written


@dataclass(frozen=True)
class Grammar:
    spec: LanguageSpec
    language: ts.Language
    query: ts.Query
    # pattern index -> what its matches are; filled on first sight (see _role)
    roles: dict[int, tuple[str, str, str]] = field(default_factory=dict)


def _read_query(q: QueryFile) -> str:
    try:
        return (resources.files(q.package) / q.path).read_text(encoding="utf-8")
    except (ModuleNotFoundError, FileNotFoundError, NotADirectoryError) as e:
        raise LedgerError(f"query file {q} is not installed: {e}") from e


_grammar_lock = threading.Lock()


@functools.cache
def _load(spec: LanguageSpec) -> Grammar:
    try:
        language = ts.Language(spec.grammar())
    except (ImportError, ValueError, TypeError) as e:
        raise LedgerError(f"grammar for {spec.name} does not load: {e}") from e
    source = "\n".join(_read_query(q) for q in spec.queries)
    try:
        query = ts.Query(language, source)
    except (ts.QueryError, ValueError) as e:
        files = ", ".join(str(q) for q in spec.queries)
        raise LedgerError(f"tag queries for {spec.name} ({files}) do not compile: {e}") from e
    return Grammar(spec, language, query)


def load_grammar(spec: LanguageSpec) -> Grammar:
    """The compiled grammar and queries of ``spec``; LedgerError if they do not load."""
    with _grammar_lock:
        return _load(spec)


@dataclass(frozen=True)
class GrammarStatus:
    language: str
    ok: bool
    detail: str


def grammar_status() -> list[GrammarStatus]:
    """Whether each registered language's grammar and queries load (for doctor)."""
    out = []
    for spec in LANGUAGES:
        try:
            g = load_grammar(spec)
            out.append(GrammarStatus(spec.name, True, f"{g.query.pattern_count} patterns"))
        except LedgerError as e:
            out.append(GrammarStatus(spec.name, False, str(e)))
    return out


@dataclass(eq=False)
class _Container:
    """A definition or scope while names are being qualified."""

    start: int
    end: int
    name: str
    kind: str  # a definition kind, or "scope"
    node: ts.Node
    name_range: tuple[int, int]
    chain: tuple[str, ...] = ()
    parent_kind: str | None = None
    qualified: str = ""
    pattern: int = 0


def _text(source: bytes, node: ts.Node) -> str:
    return source[node.start_byte : node.end_byte].decode("utf-8", "replace")


def _bare(text: str) -> str:
    """The last segment of a name as written (``a.b.C`` → ``C``, ``"net/http"`` → ``http``)."""
    if text.isidentifier():
        return text
    text = text.strip("\"'` ")
    for sep in ("::", "/", "."):
        text = text.rsplit(sep, 1)[-1]
    return text


def _signature(node: ts.Node, source: bytes) -> str:
    """The definition's text up to its body (its first line when it has none)."""
    body = node.child_by_field_name("body")
    if body is None:
        value = node.child_by_field_name("value")
        if value is not None:
            body = value.child_by_field_name("body")
    if body is not None and body.start_byte > node.start_byte:
        end = body.start_byte
    else:
        newline = source.find(b"\n", node.start_byte, node.end_byte)
        end = newline if newline != -1 else node.end_byte
    text = source[node.start_byte : end].decode("utf-8", "replace").rstrip()
    if len(text) > MAX_SIGNATURE_CHARS:
        text = text[: MAX_SIGNATURE_CHARS - 1] + "…"
    return text


_REF_ORDER = operator.itemgetter(3, 0, 1, 2)  # line, from, to, kind

_CLASS_LIKE = frozenset({"class", "interface", "scope", "type", "enum"})

# Node types that are themselves a path to a name (``new a.B()`` captures the
# whole ``a.B``).
_MEMBER_ACCESS = frozenset(
    {
        "attribute",  # Python
        "member_expression",  # JavaScript, TypeScript
        "nested_type_identifier",  # TypeScript
        "selector_expression",  # Go
        "qualified_type",  # Go
        "field_expression",  # Rust
        "scoped_identifier",  # Rust
        "scoped_type_identifier",  # Rust
    }
)
_BLANK = frozenset(b" \t\r\n")
_DOT, _COLON = ord("."), ord(":")


def _reached_through(source: bytes, start: int, node_type: str) -> bool:
    """Whether the name at ``start`` is reached through something: ``x.f``, ``pkg.F``,
    ``T::new``, ``a?.b`` (then it is a ``member-`` reference, which the referencing
    file's own scope and imports cannot resolve).

    Lexical on purpose: the character before the name, blanks skipped, is the
    same test in every language, and asking tree-sitter for the name's parent
    walks down from the root each time (measured: a third of the indexing time).
    """
    if node_type in _MEMBER_ACCESS:
        return True
    i = start - 1
    while i >= 0 and source[i] in _BLANK:
        i -= 1
    if i < 0:
        return False
    # "." (x.f, a?.b, pkg.F) or "::" (T::new); a single ":" is a type annotation.
    return source[i] == _DOT or (source[i] == _COLON and i > 0 and source[i - 1] == _COLON)


def _role(caps: dict[str, list[ts.Node]]) -> tuple[str, str, str]:
    """What a pattern's matches are: (capture, "def" | "scope" | "ref" | "", kind)."""
    if "name" not in caps:
        return ("", "", "")
    for key in caps:
        if key.startswith("definition."):
            return (key, "def", key.removeprefix("definition."))
        if key == "scope":
            return (key, "scope", "scope")
        if key.startswith("reference."):
            return (key, "ref", key.removeprefix("reference."))
    return ("", "", "")


def parse_source(source: bytes, path: str, spec: LanguageSpec | None = None) -> ParsedFile:
    """Parse ``source`` (the bytes of the file at project-relative ``path``).

    Never writes anything: the Ledger service decides what becomes a fact."""
    spec = spec or language_for_path(path)
    if spec is None:
        raise LedgerError(f"no grammar handles {path}")
    grammar = load_grammar(spec)
    try:
        tree = ts.Parser(grammar.language).parse(source)
    except (ValueError, RuntimeError) as e:
        raise LedgerError(f"tree-sitter could not parse {path}: {e}") from e
    module = module_name(path, spec)

    containers: dict[tuple[int, int, str], _Container] = {}
    refs: list[tuple[int, int, str, str, int]] = []  # start, end, bare name, kind, line
    roles = grammar.roles
    for pattern, caps in ts.QueryCursor(grammar.query).matches(tree.root_node):
        role = roles.get(pattern)
        if role is None:
            role = roles[pattern] = _role(caps)
        capture, what, kind = role
        if not what:
            continue  # a pattern of neither kind (Go's tags.scm has a few)
        name_node = caps["name"][0]
        if what == "ref":
            start, end = name_node.start_byte, name_node.end_byte
            if kind != "import" and _reached_through(source, start, name_node.type):
                kind = "member-" + kind
            name = _bare(source[start:end].decode("utf-8", "replace"))
            refs.append((start, end, name, kind, name_node.start_point[0] + 1))
            continue
        node = caps[capture][0]
        slot = (node.start_byte, node.end_byte, what)
        seen = containers.get(slot)
        if seen is None or pattern < seen.pattern:
            containers[slot] = _Container(
                start=node.start_byte,
                end=node.end_byte,
                name=_text(source, name_node),
                kind=kind,
                node=node,
                name_range=(name_node.start_byte, name_node.end_byte),
                pattern=pattern,
            )

    # One sweep in source order: a stack of open containers gives each
    # definition its chain and each reference its innermost enclosing definition.
    # Events are (start, -end, rank, index): plain tuples sort in C, and the index
    # keeps equal events in the order they were found.
    def_names = {c.name_range for c in containers.values() if c.kind != "scope"}
    boxes = list(containers.values())
    events = [(c.start, -c.end, 0 if c.kind == "scope" else 1, i) for i, c in enumerate(boxes)]
    first_ref = len(boxes)
    events += [
        (r[0], 0, 2, first_ref + i)
        for i, r in enumerate(refs)
        if r[2] and (r[0], r[1]) not in def_names  # not a definition's own name
    ]
    events.sort()

    stack: list[_Container] = []
    owners: list[str] = []  # owners[i]: the innermost definition in stack[: i + 1]
    symbols: list[Symbol] = []
    references: set[Reference] = set()
    taken: dict[str, int] = {}
    for start, _neg_end, _rank, index in events:
        while stack and stack[-1].end <= start:
            stack.pop()
            owners.pop()
        if index >= first_ref:
            _, _, name, kind, line = refs[index - first_ref]
            references.add(Reference(owners[-1] if owners else module, name, kind, line))
            continue
        item = boxes[index]
        while stack and item.end > stack[-1].end:
            stack.pop()
            owners.pop()
        item.chain = tuple(c.name for c in stack)
        item.parent_kind = stack[-1].kind if stack else None
        stack.append(item)
        if item.kind == "scope":
            owners.append(owners[-1] if owners else module)
            continue
        qualified = ".".join((module, *item.chain, item.name))
        n = taken.get(qualified, 0) + 1
        taken[qualified] = n
        if n > 1:
            qualified = f"{qualified}~{n}"
        item.qualified = qualified
        owners.append(qualified)
        kind = item.kind
        if kind in ("function", "method"):
            # tags.scm files disagree (Python calls every def a function, Rust
            # calls a function in a `mod` a method): decide from the container.
            kind = "method" if item.parent_kind in _CLASS_LIKE else "function"
        outer = item.node
        if spec.wrappers:
            parent = outer.parent
            if parent is not None and parent.type in spec.wrappers:
                outer = parent
        symbols.append(
            Symbol(
                qualified_name=qualified,
                name=item.name,
                kind=kind,
                signature=_signature(item.node, source),
                start_line=outer.start_point[0] + 1,
                end_line=outer.end_point[0] + 1,
                symbol_hash=hashlib.blake2b(
                    source[outer.start_byte : outer.end_byte], digest_size=16
                ).hexdigest(),
            )
        )
    return ParsedFile(
        path=path,
        language=spec.name,
        module=module,
        symbols=tuple(symbols),
        # A total order (kind too): a set's order changes from one process to the next.
        references=tuple(sorted(references, key=_REF_ORDER)),
        has_errors=tree.root_node.has_error,
    )
