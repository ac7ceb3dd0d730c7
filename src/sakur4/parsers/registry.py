"""The languages the Ledger parses: one entry per language, data only.

Adding a language is one :class:`LanguageSpec` in :data:`LANGUAGES` (its grammar
package, its file extensions, the query files to run) plus one fixture file in
``tests/fixtures/lang/``. The queries are each grammar package's own shipped
``queries/tags.scm``, read from the installed package, followed by Sakur4's small
``*-extra.scm`` files in ``queries/`` beside this module (imports, base classes,
method scopes — things ``tags.scm`` leaves out). TypeScript and TSX run the
JavaScript ``tags.scm`` too: the TypeScript grammar extends JavaScript's, and
its own ``tags.scm`` covers only what TypeScript adds.

The grammar loaders import their package inside the function so that one
missing or broken grammar costs that language only (``doctor`` lists which load).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import PurePosixPath

# What a grammar package hands to ``tree_sitter.Language``: a PyCapsule.
GrammarHandle = object


@dataclass(frozen=True)
class QueryFile:
    """A query file shipped inside an installed package, e.g. a grammar's tags.scm."""

    package: str
    path: str

    def __str__(self) -> str:
        return f"{self.package}/{self.path}"


@dataclass(frozen=True)
class LanguageSpec:
    name: str
    extensions: tuple[str, ...]
    grammar: Callable[[], GrammarHandle]
    queries: tuple[QueryFile, ...]
    # File stems that name their directory's module (pkg/__init__.py is "pkg").
    package_stems: tuple[str, ...] = ()
    # Node types that wrap a definition and belong to its text (decorators).
    wrappers: tuple[str, ...] = ()
    # Files in one directory share their top-level names without importing
    # them (a Go package); elsewhere a bare name needs a definition in the same
    # file or an import.
    directory_is_scope: bool = False


def _python() -> GrammarHandle:
    import tree_sitter_python

    return tree_sitter_python.language()


def _javascript() -> GrammarHandle:
    import tree_sitter_javascript

    return tree_sitter_javascript.language()


def _typescript() -> GrammarHandle:
    import tree_sitter_typescript

    return tree_sitter_typescript.language_typescript()


def _tsx() -> GrammarHandle:
    import tree_sitter_typescript

    return tree_sitter_typescript.language_tsx()


def _go() -> GrammarHandle:
    import tree_sitter_go

    return tree_sitter_go.language()


def _rust() -> GrammarHandle:
    import tree_sitter_rust

    return tree_sitter_rust.language()


def _tags(package: str) -> QueryFile:
    return QueryFile(package, "queries/tags.scm")


def _ours(name: str) -> QueryFile:
    return QueryFile("sakur4.parsers", f"queries/{name}")


_JS_TAGS = _tags("tree_sitter_javascript")
_TS_TAGS = _tags("tree_sitter_typescript")

LANGUAGES: tuple[LanguageSpec, ...] = (
    LanguageSpec(
        name="python",
        extensions=(".py", ".pyi"),
        grammar=_python,
        queries=(_tags("tree_sitter_python"), _ours("python-extra.scm")),
        package_stems=("__init__",),
        wrappers=("decorated_definition",),
    ),
    LanguageSpec(
        name="javascript",
        extensions=(".js", ".jsx", ".mjs", ".cjs"),
        grammar=_javascript,
        queries=(
            _JS_TAGS,
            _ours("js-extra.scm"),
            _ours("javascript-extra.scm"),
            _ours("jsx-extra.scm"),
        ),
        package_stems=("index",),
    ),
    LanguageSpec(
        name="typescript",
        extensions=(".ts", ".mts", ".cts"),
        grammar=_typescript,
        queries=(_JS_TAGS, _TS_TAGS, _ours("js-extra.scm"), _ours("typescript-extra.scm")),
        package_stems=("index",),
    ),
    LanguageSpec(
        name="tsx",
        extensions=(".tsx",),
        grammar=_tsx,
        queries=(
            _JS_TAGS,
            _TS_TAGS,
            _ours("js-extra.scm"),
            _ours("typescript-extra.scm"),
            _ours("jsx-extra.scm"),
        ),
        package_stems=("index",),
    ),
    LanguageSpec(
        name="go",
        extensions=(".go",),
        grammar=_go,
        queries=(_tags("tree_sitter_go"), _ours("go-extra.scm")),
        directory_is_scope=True,
    ),
    LanguageSpec(
        name="rust",
        extensions=(".rs",),
        grammar=_rust,
        queries=(_tags("tree_sitter_rust"), _ours("rust-extra.scm")),
        package_stems=("mod",),
    ),
)

_BY_EXTENSION = {ext: spec for spec in LANGUAGES for ext in spec.extensions}
_BY_NAME = {spec.name: spec for spec in LANGUAGES}


def language_for_path(path: str) -> LanguageSpec | None:
    """The language of a file, by its extension; None when no grammar handles it."""
    # Called for every file of every re-index walk: plain string work, no Path.
    base = path.rpartition("/")[2]
    stem, dot, ext = base.rpartition(".")
    if not dot or not stem.strip("."):
        return None  # no extension, or a dotfile such as ".gitignore"
    return _BY_EXTENSION.get("." + ext.lower())


def language_named(name: str) -> LanguageSpec | None:
    return _BY_NAME.get(name)


def module_name(path: str, spec: LanguageSpec | None = None) -> str:
    """The path-derived module of a file: ``pkg/sub/mod.py`` → ``pkg.sub.mod``.

    A package file (``pkg/__init__.py``, ``lib/index.ts``, ``src/x/mod.rs``) names
    its directory. The rule is the same in every language so that a qualified
    name can be read back to a file without knowing the language's import system.
    """
    p = PurePosixPath(path)
    parts = [*p.parent.parts, p.stem] if str(p.parent) != "." else [p.stem]
    if spec is not None and len(parts) > 1 and parts[-1] in spec.package_stems:
        parts.pop()
    return ".".join(parts)
