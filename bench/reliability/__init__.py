"""Reliability harnesses (issue 11): crash safety, load, fuzzing, resource faults.

Each module is a long-run script and a library the short CI versions in
``bench/tests/reliability/`` call with small bounds:

    PYTHONPATH=bench nice -n 10 .venv/bin/python -m reliability.crash --kills 200
    PYTHONPATH=bench nice -n 10 .venv/bin/python -m reliability.load
    PYTHONPATH=bench nice -n 10 .venv/bin/python -m reliability.fuzz --examples 5000
    PYTHONPATH=bench nice -n 10 .venv/bin/python -m reliability.faults

Modules:

- ``invariants``: what must hold in a store after any crash (integrity, nothing
  half-written, acknowledged writes present, the Ledger append-only);
- ``projectfiles``: a source tree that changes between runs and remembers every
  version it wrote, so the Ledger can be checked against the bytes;
- ``procs``: spawning Sakur4's processes (and llama-server), stopping them by pid;
- ``chat``: a coding agent's conversation through the gateway;
- ``crash``: SIGKILL at random moments: ``serve`` (stdio, HTTP), ``gateway``, ``index``;
- ``load``: 8 gateway sessions on one multi-slot llama-server; 16 MCP HTTP clients;
- ``fuzz``: hypothesis strategies and targets: JSON-RPC lines and bodies, gateway
  bodies, source files, store bytes;
- ``faults``: a full disk (size-limited tmpfs), a read-only store, a silent backend.

Results: docs/RELIABILITY.md; guards shown failing: docs/verification/reliability.md.
"""
