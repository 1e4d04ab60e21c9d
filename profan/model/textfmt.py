"""Number formatting and control-character handling: the one place numbers become text, for the analyses'
messages (`ms`, `pct`, `fmt_ranks`) and the renderers' tables (Markdown, HTML, Excel: `fmt_ms`, `fmt_cell`, ...).

Why on the ground floor: findings' words (analyses), reports (render), charts (figures) and comparisons all
format the same numbers, and each must read the same way; a module here depends on nothing of profan's."""

from __future__ import annotations

import math
import re
import string
from collections.abc import Iterable, Mapping

# C0 controls but tab and line feed, DEL, and C1 controls: text from traces may hold them (a kernel name with a CR
# or an ESC sequence), and no report should carry them raw — a terminal runs an ESC sequence, XML (xlsx) cannot
# hold most of them, and a CR or form feed garbles a line without showing why
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")  # a tab is kept: Ascend CSV cells end in one
_CONTROL_AND_NEWLINE = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f]")
_NAMED = {"\r": "\\r", "\n": "\\n"}


def visible(text: str, *, newlines: bool = True) -> str:
    """``text`` with each control character written as a visible escape the way Python writes it (``\\r``,
    ``\\x1b``): every renderer shows the same name, and the reader sees that the source holds one. The terminal
    (``newlines=False``) escapes line breaks too, so a name cannot forge a second line of output."""
    pattern = _CONTROL if newlines else _CONTROL_AND_NEWLINE
    return pattern.sub(lambda m: _NAMED.get(m[0], f"\\x{ord(m[0]):02x}"), text)


def fmt_ms(us) -> str:
    """µs shown in ms: two decimals, more below 0.1 ms — a 4.8 µs kernel reads 0.0048, not 0.00."""
    if us is None:
        return "—"
    v = us / 1000
    if v == 0 or abs(v) >= 0.1:
        return f"{v:,.2f}"
    return f"{v:.3f}" if abs(v) >= 0.01 else f"{v:.4f}"


def fmt_us(us) -> str:
    return "—" if us is None else f"{us:,.1f}"


def fmt_pct(x) -> str:
    return "—" if x is None or not math.isfinite(x) else f"{100 * x:.1f}%"


def locators(evidence: dict, limit: int = 8) -> str:
    """'kernel_details.csv:57, 58, 212 (+93 more)' style summary of an evidence item."""
    kind = "lines" if "lines" in evidence else "events" if "events" in evidence else "pointers"
    locs = [str(x) for x in evidence.get(kind, [])]
    shown = locs[:limit]
    more = evidence["row_count"] - len(shown)
    sep = ":" if kind == "lines" else "#" if kind == "events" else " "
    label = {"lines": "", "events": "events ", "pointers": ""}[kind]
    text = f"{evidence['file']}{sep}{label}{', '.join(shown)}"
    if more > 0:
        text += f" (+{more:,} more rows)"
    return text


def cell(value) -> str:
    """A table cell in plain text: compact floats, short lists, '—' for missing."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:,.3f}".rstrip("0").rstrip(".") if abs(value) < 1e15 else f"{value:.6g}"
    if isinstance(value, list | tuple):
        shown = ", ".join(cell(v) for v in value[:5])
        return shown + (f" (+{len(value) - 5})" if len(value) > 5 else "")
    if isinstance(value, dict):
        return ", ".join(f"{k}={cell(v)}" for k, v in list(value.items())[:5])
    return str(value)


def selected(select: dict) -> str:
    """' [bucket=attention, step=13]': what an evidence item's rows were selected by (its source aside)."""
    parts = [f"{key}={cell(value)}" for key, value in select.items() if key != "source" and value is not None]
    return f" [{', '.join(parts)}]" if parts else ""


def id_list(ids, limit: int = 8) -> str:
    """Step or rank ids for a summary line: all of a few, a range for a contiguous run, else the first and last
    few with the count — a capture of 1,270 steps must not print 1,270 numbers."""
    ids = list(ids)
    if len(ids) <= limit:
        return ", ".join(str(i) for i in ids)
    ints = all(isinstance(i, int) for i in ids)
    if ints and sorted(ids) == list(range(min(ids), max(ids) + 1)):
        return f"{min(ids)}–{max(ids)} ({len(ids):,})"
    head, tail = ids[: limit // 2], ids[-2:]
    return f"{', '.join(map(str, head))}, …, {', '.join(map(str, tail))} ({len(ids):,})"


FILTERS = {
    "cell": cell,
    "selected": selected,
    "ms": fmt_ms,
    "us": fmt_us,
    "pct": fmt_pct,
    "locators": locators,
    "id_list": id_list,
}


# ------------------------------------------------------------------ generic table columns (HTML and Excel)

PIPE_COLUMNS = ("mac", "vec", "scalar", "mte1", "mte2", "mte3", "fixpipe", "cube", "vector")
_TIMESTAMP_PREFIXES = ("start", "end", "ts", "begin", "timestamp")
_SPANS = ("_spread_us", "_spread_ns")  # start_spread_us: how far the starts lie apart, a duration


def column_kind(name: str, dtype: str = "") -> str:
    """How a report-table column is shown, decided from its name (units live in the suffix) and dtype.

    One of: ``us`` (duration in µs), ``ms`` (duration in ms), ``timestamp`` (absolute µs), ``pct`` (0–1 share),
    ``ratio`` (a multiple, 1.7×), ``mb``, ``int``, ``id`` (line/event index), ``float``, ``list``, ``file``, ``text``.
    """
    n = name.lower()
    if dtype.startswith("List") or dtype.startswith("Array"):
        return "list"
    if n in ("file", "src_file", "path") or n.endswith("_file"):
        return "file"
    numeric = any(dtype.startswith(t) for t in ("Int", "UInt", "Float", "Decimal")) or not dtype
    if not numeric:
        return "text"
    if n.startswith(_TIMESTAMP_PREFIXES) and n.endswith(("_us", "_ns")) and not n.endswith(_SPANS):
        return "timestamp"
    if n.endswith("_us"):
        return "us"
    if n.endswith("_ms"):
        return "ms"
    if n.endswith("_mb"):
        return "mb"
    if n in PIPE_COLUMNS or n.startswith("share") or "_share_" in n or n.endswith(("share", "_pct", "_frac", "_ratio")):
        return "pct"
    if n == "ratio" or n.endswith("_x"):
        return "ratio"
    if n in ("count", "calls", "kernels", "events") or n.endswith(("_count", "_calls")):
        return "int"  # counts may arrive as floats (sums, joins)
    if dtype.startswith(("Int", "UInt")):
        if n in ("event", "line", "seq") or n.endswith(("_event", "_idx", "_index", "_line", "_id")):
            return "id"  # a locator or identifier: no thousands separator
        return "int"
    return "float"


def column_label(name: str, kind: str, *, ms_for_us: bool = False) -> str:
    """'comm_not_overlapped_us' -> 'comm not overlapped (µs)' (or '(ms)' where durations are shown in ms, and
    timestamps as ms after the table's first one: 'start (ms from t0)', see `fmt_cell`)."""
    base = name
    for suffix in ("_us", "_ms", "_mb", "_pct"):
        if kind != "text" and base.lower().endswith(suffix):
            base = base[: -len(suffix)]
            break
    base = base.replace("_", " ")
    text_units = {"us": "ms", "timestamp": "ms from t0"} if ms_for_us else {"us": "µs", "timestamp": "µs"}
    unit = {**text_units, "ms": "ms", "mb": "MB"}.get(kind)
    return f"{base} ({unit})" if unit else base


def fmt_cell(value, kind: str, *, list_limit: int = 6, origin: float | None = None) -> str:
    """Text for one cell of a generic table (durations in µs columns are shown in ms, as everywhere in text).
    ``origin``: the table's first timestamp (µs, `time_origin`); a timestamp is then shown as ms after it —
    '5,784,291,359,000.7' tells a reader nothing, '1.25' (ms from t0) places the row."""
    if value is None or (isinstance(value, float) and value != value):
        return "—"
    if kind == "list":
        items = [str(v) for v in value]
        more = len(items) - list_limit
        return ", ".join(items[:list_limit]) + (f" (+{more} more)" if more > 0 else "")
    if isinstance(value, bool):
        return "yes" if value else "no"
    if not isinstance(value, int | float):
        return str(value)
    if kind == "us":
        return fmt_ms(value)
    if kind == "ms":
        return f"{value:,.3f}"
    if kind == "id":
        return str(value)
    if kind == "timestamp":
        return f"{value:.1f}" if origin is None else fmt_ms(value - origin)
    if kind == "pct":
        return fmt_pct(value)
    if kind == "ratio":
        return f"{value:.2f}×"
    if kind == "mb":
        return f"{value:,.2f}"
    if kind == "int" or isinstance(value, int):
        return f"{value:,.0f}" if isinstance(value, float) else f"{value:,}"
    return f"{value:,.3f}"


def time_origin(firsts: Iterable[float | None]) -> float | None:
    """t0 of a table: the earliest of its timestamp columns' first values (None when it has none)."""
    return min((value for value in firsts if value is not None), default=None)


def origin_note(origin: float | None, labels: Iterable[str]) -> str:
    """What the 'ms from t0' columns of a table count from, with t0 as the source clock wrote it (µs)."""
    names = [label.removesuffix(" (ms from t0)") for label in labels if label.endswith("(ms from t0)")]
    if origin is None or not names:
        return ""
    where = "on the trace's clock (the JSON and xlsx reports hold the absolute times)"
    return f"{', '.join(names)}: ms from t0 = {origin:,.1f} µs {where}"


def ms(us: float | None) -> str:
    """Milliseconds with one decimal; small values in µs so they never print as 0.0 ms."""
    if us is None:
        return "n/a"
    if abs(us) < 100:
        return f"{us:,.2f} µs"
    return f"{us / 1000:,.1f} ms" if abs(us) >= 1000 else f"{us / 1000:,.3f} ms"


def pct(x: float | None) -> str:
    return "n/a" if x is None or not math.isfinite(x) else f"{100 * x:.1f}%"


def fmt_ranks(ranks: Iterable[int]) -> str:
    """Ranks (or steps) as runs: 0–36, 38–63 (a run of three or more as a range), so 64 ranks read in a line."""
    out: list[str] = []
    values = sorted(set(ranks))
    i = 0
    while i < len(values):
        j = i
        while j + 1 < len(values) and values[j + 1] == values[j] + 1:
            j += 1
        out += [f"{values[i]}–{values[j]}"] if j - i >= 2 else [str(value) for value in values[i : j + 1]]
        i = j + 1
    return ", ".join(out)


# ------------------------------------------------------------------ drill-down commands


def drill_target(source: dict) -> str:
    """The data a report was written from, as it was named (a folder or a one-file trace), shell-quoted: what
    ``profan evidence TARGET ID`` reads back from where the report was made."""
    import shlex

    root = source.get("root") if isinstance(source, dict) else None
    if not root or any(c in str(root) for c in "`\n\r") or str(root) != visible(str(root)):
        return "DATA_DIR"  # a name no code span or shell line holds as it is: the reader names the data
    return shlex.quote(str(root))


def source_mark(source: dict) -> str:
    """The comment a Markdown or HTML report carries to name its data (`profan.app.drill.text_report_data`), so
    ``profan evidence report.md ID`` works too: the root as named and absolute, as JSON that cannot end the
    comment."""
    import json

    named = {k: source.get(k) for k in ("root", "root_abs")} if isinstance(source, dict) else {}
    text = json.dumps(named, ensure_ascii=True).replace("-", "\\u002d").replace(">", "\\u003e")
    return f"<!-- profan-source: {text} -->"


# ------------------------------------------------------------------ rule texts


def counted(value, noun: str) -> str:
    """``noun`` with ``value``, in the number it takes: a count gives '1 rank', '4 ranks'; ids (a list, or text
    such as `fmt_ranks` writes) give 'rank 2', 'ranks 2, 3', 'ranks 0–3'. The noun's case is kept ('Rank 2')."""
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,} {noun}{'' if value == 1 else 's'}"
    if isinstance(value, list | tuple):
        value = fmt_ranks(value) if all(isinstance(item, int) for item in value) else ", ".join(map(str, value))
    text = str(value)
    several = any(mark in text for mark in (",", "–", " and "))
    return f"{noun}{'s' if several else ''} {text}"


class RuleTextFormatter(string.Formatter):
    """`str.format` for the texts of rules/checks.toml, with one addition: a spec that is a word,
    ``{n_ranks:rank}`` or ``{ranks:Rank}``, writes the value with that noun in its number (`counted`) — so a
    template says 'on {ranks:rank}' and reads 'on rank 2' or 'on ranks 2, 3', never 'rank(s)'. Any other spec is
    Python's (``{total_ms:,.1f}``); a word of two letters or more is never one."""

    def format_field(self, value, format_spec: str) -> str:
        if len(format_spec) >= 2 and format_spec.isalpha():
            return counted(value, format_spec)
        return super().format_field(value, format_spec)


_RULE_TEXT = RuleTextFormatter()


def fill_rule_text(template: str, values: Mapping) -> str:
    """A rule text filled with ``values`` (`RuleTextFormatter`); KeyError for a name ``values`` lacks, ValueError
    for a bad spec or a lone brace, as `str.format_map` raises them."""
    return _RULE_TEXT.vformat(template, (), values)
