"""The turn pipeline (a service, SPEC §13): record → plan → render → send → receipt.

The gateway's routes (a surface) hand a request here and frame what comes back: an
answer, or a streamed answer's chunks and then its outcome, as typed values. Nothing
here knows HTTP or either wire API (tests/test_turns_speak_no_wire.py).

- :mod:`.pipeline`: one turn end to end (:meth:`~.pipeline.TurnPipeline.turn`), per backend.
- :mod:`.prepare`: the request named, repaired, recorded, planned and rendered.
- :mod:`.receipt`: the turn's receipt opened, completed or failed.
- :mod:`.send`: every backend call, through :mod:`.watch` (a server lost, restarted, shrunk).
- :mod:`.sessions`, :mod:`.slots`: what each session and each server slot holds.
- :mod:`.turn`: the turn's records; :mod:`.storecalls`: typed store calls off the loop.
- :mod:`.churn`, :mod:`.adapter`, :mod:`.validate`, :mod:`.voice`: repairs, store ↔
  engine episodes, the request's messages checked, the terminal's lines.
"""
