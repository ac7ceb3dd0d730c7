"""The session's chart, drawn on the server as inline SVG (no script, no network).

Per turn: a bar of the prompt the server received, split into what it reported
reusing (``reused``) and re-processing (``processed``); a turn whose reuse it did not
report is one hatched bar labelled unverifiable (counted as a full re-prefill, as
receipts are); a turn in flight or refused is an outline, in no total. A point per
turn on the prompt's size, the window, trigger and target as lines, a marker above
each turn with an event, and under it the prefill time the server reported. Colours
are CSS classes (``dashboard.css``), chosen for contrast.
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape
from typing import Any

WIDTH, HEIGHT = 760, 300
LEFT, RIGHT, TOP, BOTTOM = 64, 16, 22, 34
PREFILL_HEIGHT = 120
LABELLED_TURNS = 24


def _ticks(top: float, count: int = 4) -> list[int]:
    """Round numbers from 0 to ``top`` for the axis."""
    if top <= 0:
        return [0]
    raw = top / count
    magnitude = 10 ** (len(str(int(raw))) - 1)
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    return [int(i * step) for i in range(count + 1) if i * step <= top * 1.0001]


def _x(i: int, n: int) -> tuple[float, float]:
    """The left edge and width of turn ``i``'s band."""
    band = (WIDTH - LEFT - RIGHT) / max(n, 1)
    return LEFT + i * band, band


# Turns with no reuse to show: drawn as an outline, counted in no total.
_OUTLINED = {
    "in flight": "in flight: the server has not answered yet (not counted)",
    "refused": "refused: nothing was sent",
}


def _turn_label(t: dict[str, Any]) -> str:
    if t["outcome"] in _OUTLINED:
        reuse = _OUTLINED[t["outcome"]]
    elif t["outcome"] == "failed":
        reuse = "failed: the answer never completed (counted as a full re-prefill)"
    elif t["cache_verdict"] == "unverifiable":
        reuse = "reuse unverifiable (counted as a full re-prefill)"
    else:
        reuse = f"{t['server_cached'] or 0:,} reused, {t['server_processed'] or 0:,} re-processed"
    return (
        f"turn {t['turn']}: {t['prompt_tokens']:,} of {t['context_window']:,} tokens "
        f"({t['pressure']:.0%}), {t['verdict']}; {reuse}"
    )


def tokens_chart(turns: Sequence[dict[str, Any]], profile: dict[str, Any]) -> str:
    """The per-turn token chart of a session."""
    n = len(turns)
    window = max(t["context_window"] for t in turns)
    top = float(max(window, *(t["prompt_tokens"] for t in turns)))
    plot_h = HEIGHT - TOP - BOTTOM

    def y(v: float) -> float:
        return TOP + plot_h * (1 - v / top)

    parts = [
        f'<svg id="tokens-chart" class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" '
        'aria-labelledby="tokens-chart-title tokens-chart-desc" '
        'preserveAspectRatio="xMinYMin meet">',
        '<title id="tokens-chart-title">Prompt tokens per turn against the window</title>',
        f'<desc id="tokens-chart-desc">{n} turns. Each bar is the prompt the server '
        "received, split into the tokens it reported reusing and re-processing; hatched "
        "bars are turns whose reuse the server did not report. The receipts table below "
        "holds the same figures.</desc>",
        '<defs><pattern id="unverifiable-hatch" width="6" height="6" '
        'patternUnits="userSpaceOnUse" patternTransform="rotate(45)">'
        '<rect width="6" height="6" class="hatch-bg"/>'
        '<line x1="0" y1="0" x2="0" y2="6" class="hatch-line"/></pattern></defs>',
    ]
    for v in _ticks(top):
        parts.append(
            f'<line class="grid" x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y(v):.1f}" '
            f'y2="{y(v):.1f}"/><text class="axis" x="{LEFT - 6}" y="{y(v) + 4:.1f}" '
            f'text-anchor="end">{v:,}</text>'
        )
    points = []
    for i, t in enumerate(turns):
        x0, band = _x(i, n)
        w = max(1.0, band * 0.7)
        bx = x0 + (band - w) / 2
        label = escape(_turn_label(t))
        parts.append(f'<g class="turn" data-turn="{t["turn"]}" data-receipt="{t["id"]}">')
        parts.append(f"<title>{label}</title>")
        if t["outcome"] in _OUTLINED:
            parts.append(
                f'<rect class="bar {t["outcome"].replace(" ", "-")}" x="{bx:.1f}" '
                f'width="{w:.1f}" y="{y(t["prompt_tokens"]):.1f}" '
                f'height="{y(0) - y(t["prompt_tokens"]):.1f}"/>'
            )
        elif t["cache_verdict"] == "unverifiable":
            parts.append(
                f'<rect class="bar unverifiable" x="{bx:.1f}" width="{w:.1f}" '
                f'y="{y(t["prompt_tokens"]):.1f}" height="{y(0) - y(t["prompt_tokens"]):.1f}" '
                'fill="url(#unverifiable-hatch)"/>'
            )
        else:
            reused = t["server_cached"] or 0
            processed = t["server_processed"] or 0
            parts.append(
                f'<rect class="bar reused" x="{bx:.1f}" width="{w:.1f}" y="{y(reused):.1f}" '
                f'height="{y(0) - y(reused):.1f}"/>'
                f'<rect class="bar processed" x="{bx:.1f}" width="{w:.1f}" '
                f'y="{y(reused + processed):.1f}" '
                f'height="{y(reused) - y(reused + processed):.1f}"/>'
            )
        cx, cy = x0 + band / 2, y(t["prompt_tokens"])
        points.append(f"{cx:.1f},{cy:.1f}")
        if t["events"]:
            ev = escape("; ".join(t["events"]))
            parts.append(
                f'<path class="event" d="M{cx - 5:.1f},{TOP - 14} h10 l-5,8 z">'
                f"<title>turn {t['turn']}: {ev}</title></path>"
            )
        parts.append("</g>")
    parts.append(f'<polyline class="prompt-line" points="{" ".join(points)}"/>')
    for i, t in enumerate(turns):
        x0, band = _x(i, n)
        parts.append(
            f'<circle class="point" r="3.5" cx="{x0 + band / 2:.1f}" '
            f'cy="{y(t["prompt_tokens"]):.1f}" data-turn="{t["turn"]}" '
            f'data-prompt-tokens="{t["prompt_tokens"]}"><title>{escape(_turn_label(t))}</title>'
            "</circle>"
        )
    lines = [("window", "window", 1.0)]
    if profile.get("trigger") is not None:
        lines += [
            ("trigger", "trigger", profile["trigger"]),
            ("target", "target", profile["target"]),
        ]
    for cls, name, frac in lines:
        v = window * frac
        parts.append(
            f'<line class="limit {cls}" x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y(v):.1f}" '
            f'y2="{y(v):.1f}"/><text class="limit-label {cls}" x="{WIDTH - RIGHT - 2}" '
            f'y="{y(v) - 3:.1f}" text-anchor="end">{name} {v:,.0f}</text>'
        )
    every = max(1, n // LABELLED_TURNS)  # a label under every turn, or every so many
    for i, t in enumerate(turns):
        if i % every == 0 or i == n - 1:
            x0, band = _x(i, n)
            parts.append(
                f'<text class="axis" x="{x0 + band / 2:.1f}" y="{HEIGHT - 16}" '
                f'text-anchor="middle">{t["turn"]}</text>'
            )
    parts.append(f'<text class="axis" x="{LEFT}" y="{HEIGHT - 2}">turn</text></svg>')
    return "".join(parts)


def prefill_chart(turns: Sequence[dict[str, Any]]) -> str:
    """The prefill time the server reported per turn (no bar where it did not say)."""
    n = len(turns)
    top = float(max([t["prefill_ms"] or t.get("first_token_ms") or 0.0 for t in turns] + [1.0]))
    plot_h = PREFILL_HEIGHT - 14 - 20

    def y(v: float) -> float:
        return 14 + plot_h * (1 - v / top)

    parts = [
        f'<svg id="prefill-chart" class="chart" viewBox="0 0 {WIDTH} {PREFILL_HEIGHT}" '
        'role="img" aria-labelledby="prefill-chart-title" preserveAspectRatio="xMinYMin meet">',
        '<title id="prefill-chart-title">Prefill time per turn, in milliseconds, as the '
        "server reported it (outlined: time to first token, measured by the gateway where "
        "the server reported none)</title>",
        f'<text class="axis" x="{LEFT - 6}" y="{y(top) + 4:.1f}" text-anchor="end">'
        f"{top:,.0f} ms</text>",
        f'<text class="axis" x="{LEFT - 6}" y="{y(0) + 4:.1f}" text-anchor="end">0</text>',
        f'<line class="grid" x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y(0):.1f}" y2="{y(0):.1f}"/>',
    ]
    for i, t in enumerate(turns):
        ms, cls, what = t["prefill_ms"], "prefill", "prefill (the server's figure)"
        if ms is None and t.get("first_token_ms") is not None:
            ms, cls = t["first_token_ms"], "first-token"
            what = "time to first token, measured by the gateway (no server figure)"
        if ms is None:
            continue
        x0, band = _x(i, n)
        w = max(1.0, band * 0.7)
        parts.append(
            f'<rect class="bar {cls}" x="{x0 + (band - w) / 2:.1f}" width="{w:.1f}" '
            f'y="{y(ms):.1f}" height="{y(0) - y(ms):.1f}" '
            f'data-turn="{t["turn"]}"><title>turn {t["turn"]}: {what} '
            f"{ms:,.0f} ms</title></rect>"
        )
    parts.append("</svg>")
    return "".join(parts)
