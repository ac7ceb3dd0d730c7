"""The resume model: one object per checkpoint source, where the string dispatch was."""

from __future__ import annotations

from sakur4.backends.kinds import resume_model
from sakur4.backends.ring import DEFAULT_RULES, SentPrompt, advance, empty_slot


def test_resume_models_answer_what_the_string_dispatch_did() -> None:
    """One object per checkpoint source (issue 27): any prefix, vLLM's whole blocks, the
    ring, nothing."""
    sent = SentPrompt(tokens=tuple(range(1200)), user_starts=(0,))
    prediction = advance(empty_slot(DEFAULT_RULES), sent)
    at = {
        (kind, source): resume_model(kind, source).resume_at(1000, 1200, prediction)  # type: ignore[arg-type]
        for kind, source in [
            ("llama.cpp", "exact-prefix"),
            ("llama.cpp", "kv-shift"),
            ("vllm", "exact-prefix"),
            ("llama.cpp", "checkpoint-ring"),
            ("llama.cpp", "uncertain"),
            ("llama.cpp", "none"),
            ("llama.cpp", "slot-restore"),
        ]
    }
    ring = prediction.resume_at(1000)
    assert at == {
        ("llama.cpp", "exact-prefix"): 1000,
        ("llama.cpp", "kv-shift"): 1000,
        ("vllm", "exact-prefix"): 896,
        ("llama.cpp", "checkpoint-ring"): ring,
        ("llama.cpp", "uncertain"): ring,
        ("llama.cpp", "none"): 0,
        ("llama.cpp", "slot-restore"): 0,
    }
    assert resume_model("vllm", "exact-prefix").resume_at(0, 1200, prediction) == 0
