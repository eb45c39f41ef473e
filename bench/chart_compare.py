#!/usr/bin/env python3
"""Draws the side-by-side CSVs of bench/ as grouped bar charts (SVG), with no dependencies
beyond Python's standard library:

    python3 bench/chart_compare.py vs-stores bench/results/vs-stores.csv docs/vs-stores.svg
    python3 bench/chart_compare.py vs-ceiling bench/results/vs-ceiling.csv docs/vs-ceiling.svg

vs-stores: durable writes/s of mds, Redis (appendfsync always) and PostgreSQL (synchronous
commit) at each number of outstanding requests, from bench/vs-stores.sh; vs-ceiling: mds
creates/s beside its journal ceiling (RocksDB's synced batches of that many creates), from
bench/journal-ceiling.sh, with the issue's 60 % mark. Both use a log scale: the rates span
three decades.
"""
import csv
import math
import sys
from html import escape


def fmt(v):
    """1,234 / 12.3k / 1.2M; tick values (round ones) without a decimal."""
    for unit, div in (("M", 1e6), ("k", 1e3)):
        if v >= 10 * div or (unit == "M" and v >= div):
            x = v / div
            return f"{x:,.0f}{unit}" if x == round(x) else f"{x:,.1f}{unit}"
    return f"{v:,.0f}"


def bars(title, subtitle, groups, series, notes, marks=None):
    """groups: x labels; series: [(name, colour, [value or None per group])]; notes: a line of
    text under each group; marks: optional [(value or None per group, label)] drawn as a dashed
    tick across the first series' bar."""
    w, h, left, right, top, bottom = 760, 480, 80, 20, 70, 115
    values = [v for _, _, vs in series for v in vs if v]
    lo = 10 ** math.floor(math.log10(min(values))) if values else 1
    hi = 10 ** math.ceil(math.log10(max(values) * 1.05)) if values else 10

    def y(v):
        f = (math.log10(v) - math.log10(lo)) / (math.log10(hi) - math.log10(lo))
        return h - bottom - (h - top - bottom) * f

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">',
           f'<rect width="{w}" height="{h}" fill="white"/>',
           f'<text x="{w / 2}" y="22" text-anchor="middle" font-size="15">{escape(title)}</text>',
           f'<text x="{w / 2}" y="40" text-anchor="middle" fill="#555">{escape(subtitle)}</text>']
    decade = lo
    while decade <= hi:
        for m in (1, 2, 5):
            v = decade * m
            if lo <= v <= hi:
                major = m == 1
                out.append(f'<line x1="{left}" y1="{y(v):.1f}" x2="{w - right}" y2="{y(v):.1f}" '
                           f'stroke="{"#ccc" if major else "#eee"}"/>')
                out.append(f'<text x="{left - 6}" y="{y(v) + 4:.1f}" text-anchor="end" '
                           f'fill="{"#000" if major else "#888"}">{fmt(v)}</text>')
        decade *= 10
    out.append(f'<line x1="{left}" y1="{top}" x2="{left}" y2="{h - bottom}" stroke="black"/>')
    out.append(f'<line x1="{left}" y1="{h - bottom}" x2="{w - right}" y2="{h - bottom}" stroke="black"/>')
    out.append(f'<text x="18" y="{(top + h - bottom) / 2}" text-anchor="middle" '
               f'transform="rotate(-90 18 {(top + h - bottom) / 2})">per second (log scale)</text>')
    gw = (w - left - right) / max(len(groups), 1)
    bw = min(44, gw * 0.8 / max(len(series), 1))
    for g, label in enumerate(groups):
        x0 = left + gw * g + (gw - bw * len(series)) / 2
        for s, (_, colour, vs) in enumerate(series):
            v = vs[g]
            if not v:
                continue
            x = x0 + s * bw
            out.append(f'<rect x="{x:.1f}" y="{y(v):.1f}" width="{bw - 3:.1f}" '
                       f'height="{h - bottom - y(v):.1f}" fill="{colour}"/>')
            out.append(f'<text x="{x + (bw - 3) / 2:.1f}" y="{y(v) - 4:.1f}" text-anchor="middle" '
                       f'font-size="10">{fmt(v)}</text>')
        for mv, mlabel in marks or []:
            if mv[g]:
                out.append(f'<line x1="{x0 - 4:.1f}" y1="{y(mv[g]):.1f}" x2="{x0 + bw + 1:.1f}" '
                           f'y2="{y(mv[g]):.1f}" stroke="#c33" stroke-width="2" stroke-dasharray="4,2"/>')
                out.append(f'<text x="{x0 - 6:.1f}" y="{y(mv[g]) + 4:.1f}" text-anchor="end" '
                           f'font-size="10" fill="#c33">{escape(mlabel)}</text>')
        cx = left + gw * (g + 0.5)
        out.append(f'<text x="{cx:.1f}" y="{h - bottom + 18}" text-anchor="middle">{escape(label)}</text>')
        out.append(f'<text x="{cx:.1f}" y="{h - bottom + 34}" text-anchor="middle" fill="#555" '
                   f'font-size="11">{escape(notes[g])}</text>')
    lx, ly = left, h - 50
    for name, colour, _ in series:
        width = 24 + 6.5 * len(name)
        if lx + width > w - right:
            lx, ly = left, ly + 20
        out.append(f'<rect x="{lx:.0f}" y="{ly}" width="12" height="12" fill="{colour}"/>')
        out.append(f'<text x="{lx + 16:.0f}" y="{ly + 10}">{escape(name)}</text>')
        lx += width
    out.append("</svg>")
    return "\n".join(out) + "\n"


def num(r, k):
    v = r.get(k, "")
    return float(v) if v not in ("", None) else None


def vs_stores(rows):
    rows.sort(key=lambda r: int(r["outstanding"]))
    series = [("mds (loadgen create)", "#258", [num(r, "mds_per_sec") for r in rows]),
              ("Redis, appendfsync always (SET)", "#c33", [num(r, "redis_per_sec") for r in rows]),
              ("PostgreSQL, synchronous_commit (INSERT)", "#396", [num(r, "pg_per_sec") for r in rows])]
    if any(num(r, "pg_batch16_per_sec") for r in rows):
        series.append(("PostgreSQL, 16 INSERTs per commit", "#9c9",
                       [num(r, "pg_batch16_per_sec") for r in rows]))
    notes = []
    for r in rows:
        parts = [f"mds/{k} {r[f'mds_over_{k}']}" for k in ("redis", "pg") if r.get(f"mds_over_{k}")]
        if r.get("mds_per_commit"):
            parts.append(f"{float(r['mds_per_commit']):.1f}/commit")
        notes.append(", ".join(parts))
    first = rows[0] if rows else {}
    subtitle = (f"Redis {first.get('redis_version') or '-'}, PostgreSQL {first.get('pg_version') or '-'}; "
                f"{first.get('duration_secs', '?')} s per run, side by side on one machine, "
                f"mean of {first.get('rounds', '?')} round(s)")
    if first.get("placement"):
        subtitle += f"; {first['placement']}"
    return bars("Durable writes/s against outstanding requests", subtitle,
                [f"{r['outstanding']} outstanding" for r in rows], series, notes)


def vs_ceiling(rows):
    rows.sort(key=lambda r: int(r["outstanding"]))
    series = [("mds creates/s", "#258", [num(r, "mds_per_sec") for r in rows]),
              ("journal ceiling: RocksDB synced batches of N creates", "#aaa",
               [num(r, "ceiling_per_sec") for r in rows])]
    notes = [f"{r['threads']} x {r['depth']}: mds/ceiling {float(r['ratio']):.2f}, "
             f"{float(r['ops_per_commit']):.0f} per commit" for r in rows]
    marks = [([0.6 * c if c else None for c in series[1][2]], "60%")]
    return bars("mds creates/s against its journal ceiling", "ceiling at N outstanding: "
                "RocksDB's synced write rate when each commit carries N create records (criterion)",
                [f"N = {r['outstanding']}" for r in rows], series, notes, marks)


def main(kind, src, dst):
    rows = list(csv.DictReader(open(src)))
    draw = {"vs-stores": vs_stores, "vs-ceiling": vs_ceiling}[kind]
    open(dst, "w").write(draw(rows))


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] not in ("vs-stores", "vs-ceiling"):
        sys.exit(__doc__)
    main(*sys.argv[1:])
