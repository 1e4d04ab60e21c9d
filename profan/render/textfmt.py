"""Number formatting shared by the text renderers (Markdown, HTML)."""

from __future__ import annotations


def fmt_ms(us) -> str:
    return "—" if us is None else f"{us / 1000:,.2f}"


def fmt_us(us) -> str:
    return "—" if us is None else f"{us:,.1f}"


def fmt_pct(x) -> str:
    return "—" if x is None else f"{100 * x:.1f}%"


def locators(ev: dict, limit: int = 8) -> str:
    """'kernel_details.csv:57, 58, 212 (+93 more)' style summary of an evidence item."""
    kind = "lines" if "lines" in ev else "events" if "events" in ev else "pointers"
    locs = [str(x) for x in ev.get(kind, [])]
    shown = locs[:limit]
    more = ev["row_count"] - len(shown)
    sep = ":" if kind == "lines" else "#" if kind == "events" else " "
    label = {"lines": "", "events": "events ", "pointers": ""}[kind]
    text = f"{ev['file']}{sep}{label}{', '.join(shown)}"
    if more > 0:
        text += f" (+{more:,} more rows)"
    return text


FILTERS = {"ms": fmt_ms, "us": fmt_us, "pct": fmt_pct, "locators": locators}
