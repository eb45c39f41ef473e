#!/usr/bin/env python3
"""Draws creates/s against outstanding requests (threads x depth) from bench/results/matrix.csv
as an SVG, with no dependencies beyond Python's standard library.

    python3 bench/chart.py bench/results/matrix.csv docs/creates-vs-outstanding.svg
"""
import csv
import math
import sys


def main(src, dst):
    rows = list(csv.DictReader(open(src)))
    points = sorted(
        (int(r["threads"]) * int(r["depth"]), float(r["creates_per_sec"]), r["threads"], r["depth"])
        for r in rows
    )
    ceiling = next((float(r["ceiling_per_sec"]) for r in rows if r.get("ceiling_per_sec")), None)
    w, h, left, right, top, bottom = 720, 420, 80, 30, 40, 60
    xs = [math.log2(p[0]) for p in points]
    xmax = max(xs) if xs else 1.0
    ymax = max([p[1] for p in points] + ([ceiling] if ceiling else [])) * 1.1

    def x(v):
        return left + (w - left - right) * (v / xmax if xmax else 0)

    def y(v):
        return h - bottom - (h - top - bottom) * v / ymax

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">',
           f'<rect width="{w}" height="{h}" fill="white"/>',
           f'<text x="{w/2}" y="20" text-anchor="middle" font-size="14">mds creates/s against outstanding requests (threads x depth)</text>',
           f'<line x1="{left}" y1="{h-bottom}" x2="{w-right}" y2="{h-bottom}" stroke="black"/>',
           f'<line x1="{left}" y1="{top}" x2="{left}" y2="{h-bottom}" stroke="black"/>']
    for i in range(6):
        v = ymax * i / 5
        out.append(f'<line x1="{left-4}" y1="{y(v):.1f}" x2="{w-right}" y2="{y(v):.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{left-8}" y="{y(v)+4:.1f}" text-anchor="end">{v:,.0f}</text>')
    for p, lx in zip(points, xs):
        out.append(f'<text x="{x(lx):.1f}" y="{h-bottom+18}" text-anchor="middle">{p[0]}</text>')
    out.append(f'<text x="{(left+w-right)/2}" y="{h-15}" text-anchor="middle">outstanding requests (log scale)</text>')
    if ceiling:
        out.append(f'<line x1="{left}" y1="{y(ceiling):.1f}" x2="{w-right}" y2="{y(ceiling):.1f}" stroke="#c33" stroke-dasharray="6,4"/>')
        out.append(f'<text x="{w-right-4}" y="{y(ceiling)-6:.1f}" text-anchor="end" fill="#c33">journal ceiling, batches of 256: {ceiling:,.0f}/s</text>')
    path = " ".join(f"{'M' if i == 0 else 'L'}{x(lx):.1f},{y(p[1]):.1f}" for i, (p, lx) in enumerate(zip(points, xs)))
    out.append(f'<path d="{path}" fill="none" stroke="#258" stroke-width="2"/>')
    for p, lx in zip(points, xs):
        out.append(f'<circle cx="{x(lx):.1f}" cy="{y(p[1]):.1f}" r="4" fill="#258"/>')
        anchor, dx = ("end", -6) if x(lx) > w * 0.7 else ("start", 6)
        out.append(f'<text x="{x(lx)+dx:.1f}" y="{y(p[1])-8:.1f}" text-anchor="{anchor}">{p[2]}x{p[3]}: {p[1]:,.0f}</text>')
    out.append("</svg>")
    open(dst, "w").write("\n".join(out) + "\n")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
