"""The OpenAI-compatible gateway (a surface): where a harness's request enters.

- :mod:`.app`: HTTP routes, guards (loopback, token, origin, body size), error mapping.
- :mod:`.turns`: one request through record → plan → render → send → receipt.
- :mod:`.sessions`: per-session slot and what the server holds.
- :mod:`.adapter`: store episodes ↔ engine episodes.
"""
