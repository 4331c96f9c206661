"""Pictures rendered on the server as inline SVG: the fleet heatmap (nodes × days, coloured by
hardware incidents) and a card's timeline (placements as bars, incidents as marks). Every text is
escaped; colours are attributes, not styles, so the pages' Content-Security-Policy holds."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, date, datetime, timedelta
from typing import Any
from urllib.parse import urlencode

from markupsafe import Markup, escape

from models.vocabulary import HARDWARE_CATEGORIES

HEAT = ("#eef1f4", "#fde0c5", "#f9b384", "#f2794d", "#d93b2b", "#9e1b1b")  # 0, 1, 2, 3-4, 5-9, 10+
CELL_W, CELL_H, LABEL_W, HEAD_H = 32, 24, 170, 58


def heat_colour(n: int) -> str:
    if n <= 0:
        return HEAT[0]
    if n <= 2:
        return HEAT[n]
    if n <= 4:
        return HEAT[3]
    return HEAT[4] if n <= 9 else HEAT[5]


def _a(value: object) -> str:
    return str(escape(str(value)))


def heatmap_svg(days: Sequence[str], nodes: Sequence[dict[str, Any]]) -> Markup:
    """`days` ISO dates; `nodes` [{node, counts}] with counts[i] for days[i]. Each cell links to the
    node's incidents of that day and carries a title with the count."""
    width = LABEL_W + CELL_W * max(len(days), 1) + 10
    height = HEAD_H + CELL_H * max(len(nodes), 1) + 40
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" class="heatmap" role="img" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" aria-label="hardware incidents per node and day">']
    for j, d in enumerate(days):
        x = LABEL_W + j * CELL_W + 8
        out.append(f'<text x="{x}" y="{HEAD_H - 6}" font-size="11" text-anchor="start" '
                   f'transform="rotate(-45 {x} {HEAD_H - 6})">{_a(d[5:])}</text>')
    if not nodes:
        out.append(f'<text x="{LABEL_W}" y="{HEAD_H + 15}" font-size="12">No hardware incidents in this window.</text>')
    for i, row in enumerate(nodes):
        y = HEAD_H + i * CELL_H
        out.append(f'<text x="{LABEL_W - 6}" y="{y + CELL_H * 0.7:.0f}" font-size="12" text-anchor="end" '
                   f'class="node-label">{_a(row["node"])}</text>')
        counts = list(row.get("counts") or [])
        for j, d in enumerate(days):
            n = int(counts[j]) if j < len(counts) else 0
            start = date.fromisoformat(d)
            href = "/incidents?" + urlencode({"node": row["node"], "since": start.isoformat(),
                                              "until": (start + timedelta(days=1)).isoformat()})
            cell = (f'<rect x="{LABEL_W + j * CELL_W}" y="{y}" width="{CELL_W - 2}" height="{CELL_H - 2}" rx="3" '
                    f'fill="{heat_colour(n)}" data-node="{_a(row["node"])}" data-day="{_a(d)}" data-count="{n}">'
                    f'<title>{_a(row["node"])} {_a(d)}: {n} hardware incident{"" if n == 1 else "s"}</title></rect>')
            out.append(f'<a href="{_a(href)}">{cell}</a>' if n else cell)
            if n:
                out.append(f'<text x="{LABEL_W + j * CELL_W + (CELL_W - 2) / 2:.0f}" y="{y + CELL_H * 0.68:.0f}" '
                           f'font-size="10" text-anchor="middle" fill="{"#fff" if n >= 3 else "#222"}" '
                           f'pointer-events="none">{n}</text>')
    ly = HEAD_H + CELL_H * max(len(nodes), 1) + 14
    out.append(f'<text x="{LABEL_W - 6}" y="{ly + 11}" font-size="11" text-anchor="end">fewer</text>')
    for k, colour in enumerate(HEAT):
        out.append(f'<rect x="{LABEL_W + k * 18}" y="{ly}" width="16" height="14" rx="2" fill="{colour}"/>')
    out.append(f'<text x="{LABEL_W + len(HEAT) * 18 + 4}" y="{ly + 11}" font-size="11">more hardware incidents</text>')
    out.append("</svg>")
    return Markup("".join(out))


def _time(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    if isinstance(value, str) and value:
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError:
            return None
        return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
    return None


def gpu_timeline_svg(placements: Sequence[dict[str, Any]], incidents: Sequence[dict[str, Any]],
                     now: datetime | None = None) -> Markup:
    """One row per placement (node, slot) with its validity as a bar; each incident a mark at its
    first fault, on the row of the placement that held the card then (else on its own row)."""
    now = now or datetime.now(UTC)
    bars: list[tuple[str, datetime, datetime, bool, dict[str, Any]]] = []
    for p in placements:
        start = _time(p.get("valid_from") or p.get("since"))
        if start is None:
            continue
        end_raw = _time(p.get("valid_to") or p.get("until"))
        label = f"{p.get('node') or '?'} {p.get('pci_slot') or ''}".strip()
        bars.append((label, start, end_raw or now, end_raw is None, p))
    marks = [(t, i) for i in incidents if (t := _time(i.get("first_seen"))) is not None]
    times = [b[1] for b in bars] + [b[2] for b in bars] + [t for t, _ in marks]
    if not times:
        return Markup('<p class="empty">No placements or incidents to draw.</p>')
    t0, t1 = min(times), max(times)
    pad = max((t1 - t0) * 0.03, timedelta(hours=1))
    t0, t1 = t0 - pad, t1 + pad
    span = (t1 - t0).total_seconds()
    rows = [b[0] for b in bars]
    stray = [(t, i) for t, i in marks if _row_of(bars, t, i) is None]
    if stray or not rows:
        rows.append("other placements")
    left, plot_w, row_h, top = 170, 640, 26, 10
    width, height = left + plot_w + 20, top + row_h * len(rows) + 40

    def x(t: datetime) -> float:
        return left + plot_w * (t - t0).total_seconds() / span

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" class="gpu-timeline" role="img" width="{width}" '
           f'height="{height}" viewBox="0 0 {width} {height}" aria-label="placements and incidents over time">']
    for r, label in enumerate(rows):
        y = top + r * row_h
        out.append(f'<text x="{left - 6}" y="{y + 17}" font-size="12" text-anchor="end">{_a(label)}</text>')
        out.append(f'<line x1="{left}" y1="{y + row_h - 2}" x2="{left + plot_w}" y2="{y + row_h - 2}" '
                   'stroke="#e3e7ec"/>')
    for r, (label, start, end, current, p) in enumerate(bars):
        y = top + r * row_h
        w = max(x(end) - x(start), 2.0)
        tip = f"{label}: {start.isoformat()} to {'now' if current else end.isoformat()}"
        if p.get("uuid"):
            tip += f", UUID {p['uuid']}"
        out.append(f'<rect class="placement" x="{x(start):.1f}" y="{y + 5}" width="{w:.1f}" height="14" rx="3" '
                   f'fill="{"#4f7cac" if current else "#9db4cf"}"><title>{_a(tip)}</title></rect>')
    for t, inc in marks:
        found = _row_of(bars, t, inc)
        row = found if found is not None else len(rows) - 1
        cx, cy = x(t), top + row * row_h + 12
        hw = inc.get("category") in HARDWARE_CATEGORIES
        colour = "#c62828" if hw else "#f0a202"
        tip = f"{inc.get('first_seen')}: {', '.join(map(str, inc.get('codes') or []))} ({inc.get('category')}) " \
              f"on {inc.get('node')}"
        href = f"/incidents/{inc.get('incident_id', '')}"
        out.append(f'<a href="{_a(href)}"><path class="incident-mark" d="M{cx:.1f} {cy - 7} l7 7 l-7 7 l-7 -7 z" '
                   f'fill="{colour}" stroke="#fff"><title>{_a(tip)}</title></path></a>')
    ay = top + row_h * len(rows) + 14
    out.append(f'<text x="{left}" y="{ay}" font-size="11">{_a(t0.date().isoformat())}</text>')
    out.append(f'<text x="{left + plot_w}" y="{ay}" font-size="11" text-anchor="end">'
               f'{_a(t1.date().isoformat())}</text>')
    out.append(f'<text x="{left + plot_w / 2:.0f}" y="{ay + 16}" font-size="11" text-anchor="middle">bars: placements '
               '(dark: current); diamonds: incidents (red: hardware)</text>')
    out.append("</svg>")
    return Markup("".join(out))


def _row_of(bars: Sequence[tuple[str, datetime, datetime, bool, dict[str, Any]]], t: datetime,
            inc: dict[str, Any]) -> int | None:
    for r, (_label, start, end, _current, p) in enumerate(bars):
        if start <= t <= end and (not p.get("node") or p.get("node") == inc.get("node")):
            return r
    return None


BAR_H, BAR_LABEL_W, BAR_W = 22, 170, 360


def duration_text(seconds: float) -> str:
    """A duration for a bar's label: `45s`, `12m`, `5.5h`, `3.2d`."""
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h" if seconds < 172800 else f"{seconds / 86400:.1f}d"


def bars_svg(rows: Sequence[tuple[str, float | None]], what: str) -> Markup:
    """Horizontal bars of durations in seconds, one per (label, value), scaled to the longest; a row
    without a value (None) is named and says n/a. `what` names the figure for the picture's label."""
    known = [v for _, v in rows if v is not None]
    top = max(known, default=0.0) or 1.0
    width, height = BAR_LABEL_W + BAR_W + 70, BAR_H * max(len(rows), 1) + 8
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" class="bars" role="img" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" aria-label="{_a(what)}">']
    if not rows:
        out.append(f'<text x="4" y="{BAR_H * 0.7:.0f}" font-size="12">No hardware incidents.</text>')
    for i, (label, value) in enumerate(rows):
        y = 4 + i * BAR_H
        name = label or "(no pool known)"
        out.append(f'<text x="{BAR_LABEL_W - 6}" y="{y + BAR_H * 0.65:.0f}" font-size="12" text-anchor="end">'
                   f'{_a(name)}</text>')
        if value is None:
            out.append(f'<text x="{BAR_LABEL_W}" y="{y + BAR_H * 0.65:.0f}" font-size="12" fill="#6b7280">n/a</text>')
            continue
        w = max(1, round(BAR_W * value / top))
        out.append(f'<rect x="{BAR_LABEL_W}" y="{y}" width="{w}" height="{BAR_H - 6}" rx="2" fill="#3b6fb6" '
                   f'data-label="{_a(label)}" data-seconds="{value:g}"><title>{_a(name)}: {_a(what)} '
                   f'{duration_text(value)}</title></rect>')
        out.append(f'<text x="{BAR_LABEL_W + w + 6}" y="{y + BAR_H * 0.65:.0f}" font-size="12">'
                   f'{duration_text(value)}</text>')
    out.append("</svg>")
    return Markup("".join(out))
