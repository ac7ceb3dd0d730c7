"""The OpenAI-compatible gateway (a surface): where a harness's request enters.

- :mod:`.app`: the app assembled, its middleware, guards and the read routes.
- :mod:`.openai`, :mod:`.anthropic`: one module per wire API, each framing what the
  pipeline yields, over :mod:`.serving` (body, headers, settle, keep-alives, streamed
  errors); :mod:`.translate`: Anthropic ↔ chat.
The turn itself runs in the turn pipeline (:mod:`sakur4.turns`), a service below.
"""
