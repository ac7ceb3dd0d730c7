"""Token layout: the exact token span of each chat message in the prompt the server
builds (:mod:`.measure`), from the template's wrappers, the model's token pieces and a
cache of recent layouts."""

from sakur4.backends.layout.cache import prefix_hashes
from sakur4.backends.layout.measure import TokenLayouts
from sakur4.backends.layout.spans import MessageSpan, TokenLayout

__all__ = ["MessageSpan", "TokenLayout", "TokenLayouts", "prefix_hashes"]
