"""The dashboard's HTML, rendered on the server from :mod:`.view`'s values.

Everything a page shows is in its HTML: it reads the same with JavaScript off (the
rows open with ``<details>``, the chart is inline SVG). ``dashboard.js`` only keeps
it live: it polls the page's JSON endpoint and, when the version changes, swaps in
the page rendered again. Text from the store is escaped where it is placed.
"""

from __future__ import annotations

from html import escape
from typing import Any

from sakur4.gateway.dashboard.chart import prefill_chart, tokens_chart
from sakur4.receipts import RECEIPT_COLUMNS


def _num(v: int | float | None, unit: str = "") -> str:
    return "-" if v is None else f"{v:,.0f}{unit}"


def document(title: str, body: str, *, api: str, version: str) -> str:
    """A whole page: the live part in ``<main>`` carries the endpoint it is polled from."""
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{escape(title)} · Sakur4</title>"
        '<link rel="stylesheet" href="/sakur4/static/dashboard.css">'
        '<script src="/sakur4/static/dashboard.js" defer></script></head><body>'
        '<header><a class="home" href="/sakur4/">Sakur4 dashboard</a>'
        '<p id="live-status" role="status" aria-live="polite">'
        "<noscript>Live updates need JavaScript: reload to see new turns.</noscript></p>"
        "</header>"
        f'<main id="live" data-api="{escape(api)}" data-version="{escape(version)}">'
        f"{body}</main></body></html>"
    )


def _session_flags(s: dict[str, Any]) -> str:
    """Refused and failed turns, flagged in words (not colour alone); the last turn
    refused first: that session cannot go on as it is."""
    flags = []
    if s["last_refused"]:
        flags.append('<span class="flag refused">last turn refused</span>')
    elif s["refused"]:
        flags.append(f'<span class="flag refused">{s["refused"]:,} refused</span>')
    if s["failed"]:
        flags.append(f'<span class="flag failed">{s["failed"]:,} failed</span>')
    return " ".join(flags) or "-"


def index_page(data: dict[str, Any]) -> str:
    """Every project with its sessions."""
    parts = ["<h1>Projects</h1>"]
    if not data["projects"]:
        parts.append("<p>No project in this store yet: point your agent at the gateway.</p>")
    for p in data["projects"]:
        parts.append(
            f'<section class="project" aria-labelledby="project-{p["id"]}">'
            f'<h2 id="project-{p["id"]}">{escape(p["name"])}</h2>'
            f'<p class="root">{escape(p["root"])}</p>'
        )
        if not p["sessions"]:
            parts.append("<p>No session with receipts yet.</p></section>")
            continue
        parts.append(
            '<div class="scroll"><table class="sessions"><caption>Sessions, most recent '
            'first</caption><thead><tr><th scope="col">session</th><th scope="col">harness'
            '</th><th scope="col">prompts</th><th scope="col">requests</th>'
            '<th scope="col">last request</th>'
            '<th scope="col">last prompt</th><th scope="col">flags</th>'
            '<th scope="col">last activity</th></tr></thead><tbody>'
        )
        for s in p["sessions"]:
            cls = ' class="refused"' if s["last_refused"] else ""
            parts.append(
                f'<tr{cls}><th scope="row"><a href="{escape(s["page"])}">'
                f"{escape(s['session'])}</a></th>"
                f'<td data-col="harness">{escape(s["harness"] or "unknown")}</td>'
                f"<td>{s['prompts']:,}</td><td>{s['receipts']:,}</td><td>{s['last_turn']}</td>"
                f"<td>{s['prompt_tokens']:,} of {s['context_window']:,}</td>"
                f'<td data-col="flags">{_session_flags(s)}</td>'
                f"<td>{escape(s['last_at'])}</td></tr>"
            )
        parts.append("</tbody></table></div></section>")
    return document("Projects", "".join(parts), api="/sakur4/api/projects", version=data["version"])


def _divergence(t: dict[str, Any]) -> str:
    if t["divergence"] is not None:
        return f"the prompt first differs from the cached one at token {t['divergence']:,}"
    if t.get("compared") is False:
        return (
            "nothing cached to compare with (the session's first request to this gateway, "
            "or the first after a failed request or a server restart)"
        )
    return "the prompt extends the one cached"


def _stored_size(step: dict[str, Any]) -> str:
    """The episode's size as stored (the episodes table's figure), where the receipt
    says it; a piece is one call or the text of an assistant message."""
    tokens = step.get("tokens")
    if tokens is None:
        return ""
    return f" ({tokens:,} tokens{'; one piece of it' if step.get('piece') else ''})"


def _receipt_detail(t: dict[str, Any]) -> str:
    """What a row opens: steps, cut, divergence, repairs, the plan's reason."""
    cut = (
        "no cut"
        if t["chosen_cut"] is None
        else f"chosen at token {t['chosen_cut']:,} (asked {_num(t['requested_cut'])})"
    )
    items = [
        f"<dt>reason</dt><dd>{escape(str(t['reason'] or '-'))}</dd>",
        f"<dt>profile</dt><dd>{escape(t['profile'])}: {escape(t['profile_reason'])}</dd>",
        f"<dt>cut</dt><dd>{cut}; predicted reuse {_num(t['predicted_reuse'])}</dd>",
        f"<dt>divergence</dt><dd>{_divergence(t)}</dd>",
        f"<dt>events</dt><dd>{escape('; '.join(t['events']) or 'none')}</dd>",
    ]
    steps = "".join(
        f"<li>episode {s['episode']}{_stored_size(s)}: "
        f"{escape(str(s['from']))} → {escape(str(s['to']))}, "
        f"{s['tokens_before']:,} → {s['tokens_after']:,} tokens "
        f"({s['reclaimed']:,} reclaimed)</li>"
        for s in t["steps"]
    )
    repairs = "".join(
        f"<li>{escape(str(x.get('kind', '?')))}: {_num(x.get('saved_predicted'))} predicted"
        + (
            ""
            if x.get("saved_confirmed") is None
            else f", {x['saved_confirmed']:,} confirmed by the server"
        )
        + "</li>"
        for x in t["repairs"]
    )
    churn = "".join(f"<li>{escape(str(c.get('kind', '?')))}</li>" for c in t["churn"])
    return (
        f'<details id="receipt-{t["id"]}"><summary>turn {t["turn"]}: steps, cut, '
        f"divergence, repairs</summary><dl>{''.join(items)}</dl>"
        f"<h4>steps ({len(t['steps'])})</h4>"
        + (f"<ol>{steps}</ol>" if steps else "<p>none</p>")
        + "<h4>repairs</h4>"
        + (f"<ul>{repairs}</ul>" if repairs else "<p>none</p>")
        + ("<h4>churn not repaired</h4><ul>" + churn + "</ul>" if churn else "")
        + "</details>"
    )


def _receipts_table(turns: list[dict[str, Any]]) -> str:
    head = "".join(f'<th scope="col">{escape(c)}</th>' for c in RECEIPT_COLUMNS)
    rows = []
    span = len(RECEIPT_COLUMNS)
    for t in turns:
        cells = "".join(
            f'<td data-col="{escape(c)}">{escape(t["row"][c])}</td>' for c in RECEIPT_COLUMNS
        )
        cls = f"receipt {t['outcome'].replace(' ', '-')}"
        rows.append(
            f'<tr class="{cls}" data-receipt="{t["id"]}">{cells}</tr>'
            f'<tr class="more"><td colspan="{span}">{_receipt_detail(t)}</td></tr>'
        )
    return (
        '<div class="scroll"><table id="receipts"><caption>Receipts, one per turn (the '
        "fields of <code>sakur4 receipts</code>); reuse the server did not report is "
        f"unverifiable</caption><thead><tr>{head}</tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table></div>"
    )


def _episodes_table(data: dict[str, Any]) -> str:
    rows = []
    for e in data["episodes"]:
        tier = escape(e["tier"])
        fold = (
            f'<a class="fold" href="{escape(e["fold"])}">open fold {e["id"]}</a>'
            if e["fold"]
            else "-"
        )
        rows.append(
            f'<tr data-episode="{e["id"]}"><td>{e["id"]}</td><td>{e["turn"]}</td>'
            f"<td>{escape(e['role'])}</td><td>{escape(e['kind'])}</td>"
            f"<td>{escape(e['nature'])}</td>"
            f"<td>{escape(e['tool_name'] or '-')}</td><td>{e['tokens']:,}</td>"
            f'<td><span class="tier tier-{tier}">{tier}</span></td><td>{fold}</td></tr>'
        )
    if not rows:
        return "<p>No episodes recorded for this session.</p>"
    heads = ("episode", "turn", "role", "kind", "what", "tool", "tokens", "tier", "full content")
    head = "".join(f'<th scope="col">{h}</th>' for h in heads)
    return (
        '<div class="scroll"><table id="episodes"><caption>Episodes in order, with the '
        "tier each is shown at; a fold opens its full content</caption>"
        f"<thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table></div>"
    )


def _anchors(data: dict[str, Any]) -> str:
    if not data["anchors"]:
        return "<p>No pinned anchors.</p>"
    items = "".join(
        f'<li data-anchor="{a["id"]}"><span class="priority">priority {a["priority"]}</span> '
        f"{escape(a['text'])}"
        + ("" if a["session"] is None else ' <span class="scope">(this session only)</span>')
        + "</li>"
        for a in data["anchors"]
    )
    return f'<ol id="anchors">{items}</ol>'


def _totals(data: dict[str, Any]) -> str:
    t, est = data["totals"], data["drop_oldest_estimate"]
    unverifiable = (
        f" ({t['unverifiable_turns']} unverifiable, counted as full re-prefills)"
        if t["unverifiable_turns"]
        else ""
    )
    apart = []
    if t["in_flight"]:
        apart.append(f"{t['in_flight']} in flight, not counted until the server answers")
    if t["refused"]:
        apart.append(f"{t['refused']} refused, nothing sent")
    if t["failed"]:
        apart.append(f"{t['failed']} failed")
    turns_note = f" ({'; '.join(apart)})" if apart else ""
    if t["prefill_ms"] is None:
        prefill = "not reported by the server"
        if t["first_token_ms"] is not None:
            prefill += (
                '; time to first token, measured by the gateway: <span class="figure" '
                f'data-figure="first-token-ms">{t["first_token_ms"]:,.0f}</span> ms over '
                f"{t['first_token_turns']} turns"
            )
    else:
        prefill = f'<span class="figure" data-figure="prefill-ms">{t["prefill_ms"]:,.0f}</span> ms'
        if t["prefill_untimed_turns"]:
            prefill += f" ({t['prefill_untimed_turns']} turns without a reported time)"
    if est["reprefilled"] is None:
        compare = f'<dt>drop-oldest</dt><dd id="estimate">no estimate: {escape(est["note"])}</dd>'
    else:
        compare = (
            f'<dt>drop-oldest <span class="label">estimate</span></dt><dd id="estimate">'
            f'<span class="figure" data-figure="drop-oldest">{est["reprefilled"]:,}</span> '
            f"tokens re-processed over the same turns ({est['truncations']} truncations), "
            f'against Sakur4\'s <span class="figure" data-figure="sakur4-same-turns">'
            f"{est['sakur4_reprefilled']:,}</span>"
            f'<p class="note">{escape(est["note"])}</p></dd>'
        )
    return (
        '<dl id="totals">'
        f'<dt>prompts</dt><dd><span class="figure" data-figure="prompts">{t["prompts"]:,}'
        "</span> (the user's; the agent's own requests between them are not prompts)</dd>"
        f'<dt>requests</dt><dd><span class="figure" data-figure="turns">{t["turns"]:,}</span>'
        f"{turns_note}</dd>"
        '<dt>tokens re-processed</dt><dd><span class="figure" data-figure="reprefilled">'
        f"{t['reprefilled']:,}</span>{unverifiable}</dd>"
        '<dt>tokens reused</dt><dd><span class="figure" data-figure="reused">'
        f"{t['reused']:,}</span> (the server's own figures)</dd>"
        f"<dt>prefill time</dt><dd>{prefill}</dd>"
        f"{compare}</dl>"
    )


LEGEND = (
    '<ul class="legend" aria-label="Chart legend">'
    '<li><span class="swatch reused"></span>reused (server)</li>'
    '<li><span class="swatch processed"></span>re-processed (server)</li>'
    '<li><span class="swatch unverifiable"></span>unverifiable (counted as re-processed)</li>'
    '<li><span class="swatch point"></span>prompt tokens</li>'
    '<li><span class="swatch event"></span>event</li>'
    '<li><span class="swatch in-flight"></span>in flight (not counted)</li>'
    '<li><span class="swatch refused"></span>refused (nothing sent)</li>'
    "<li>lines: window, trigger, target</li></ul>"
)


def _last_turn(t: dict[str, Any]) -> str:
    """The newest turn's state, said first: a refused one stops the session."""
    state = escape(t["state"])
    return (
        f'<p id="last-turn" class="last-turn {state.replace(" ", "-")}" role="status">'
        f'<a href="#receipt-{t["receipt"]}">last turn</a> ({t["turn"]}) {state}: '
        f"{escape(t['said'])}</p>"
    )


def session_page(data: dict[str, Any], api: str) -> str:
    """One session: totals, the chart, receipts, episodes and anchors."""
    p = data["profile"]
    limits = (
        f"trigger {p['trigger']:.0%}, target {p['target']:.0%}"
        if p["trigger"] is not None
        else "trigger and target not known for this profile"
    )
    body = (
        f'<p class="crumbs"><a href="/sakur4/">Projects</a> › {escape(data["project"]["name"])}'
        f"</p><h1>Session {escape(data['session'])}</h1>"
        f'<p class="summary">harness {escape(data["harness"] or "unknown")}; window '
        f"{data['context_window']:,} tokens; profile {escape(p['name'])} ({limits})</p>"
        f"{_last_turn(data['last_turn'])}"
        '<section aria-labelledby="h-totals"><h2 id="h-totals">Totals</h2>'
        f"{_totals(data)}</section>"
        '<section aria-labelledby="h-chart"><h2 id="h-chart">Per turn</h2>'
        f"{LEGEND}<figure>{tokens_chart(data['turns'], p)}</figure>"
        f"<figure>{prefill_chart(data['turns'])}</figure></section>"
        '<section aria-labelledby="h-receipts"><h2 id="h-receipts">Receipts</h2>'
        f"{_receipts_table(data['turns'])}</section>"
        '<section aria-labelledby="h-anchors"><h2 id="h-anchors">Pinned anchors, in '
        f"rendering order</h2>{_anchors(data)}</section>"
        '<section aria-labelledby="h-episodes"><h2 id="h-episodes">Episodes</h2>'
        f"{_episodes_table(data)}</section>"
    )
    return document(f"Session {data['session']}", body, api=api, version=data["version"])
