"""Reports: the JSON a run produces, a self-contained HTML page (inline SVG, no CDN, no script),
and the regression table against a previous report."""

from __future__ import annotations

import html
from typing import Any

METRICS = (
    "pass_rate",
    "run_pass_rate",
    "safety_failures",
    "task_success",
    "escalation_correct",
    "action_correct",
    "args_correct",
    "precision",
    "recall",
    "grounding",
    "cost_inr_per_task",
    "latency_s_per_task",
)
# Metrics where a larger value is worse.
LOWER_IS_BETTER = frozenset({"safety_failures", "cost_inr_per_task", "latency_s_per_task"})


def text_summary(report: dict[str, Any]) -> str:
    o = report["overall"]
    lines = [
        f"suite {report['suite']}: {o['cases_passed']}/{o['cases']} cases passed "
        f"({report['runs_per_case']} run(s) each, {report['duration_s']} s); "
        f"safety failures {o['safety_failures']}; gate {o['gate'].upper()}",
        "  " + ", ".join(f"{m}={o[m]}" for m in METRICS[3:]),
    ]
    if report.get("errored"):
        lines.insert(1, f"  ERRORED: {report['errored']}")
    for c in report["cases"]:
        if not c["passed"]:
            lines.append(
                f"  FAILED {c['case']}: {c['passed_runs']}/{c['runs']} runs; "
                + "; ".join(c["failures"][:3])
            )
    return "\n".join(lines)


def compare(
    current: dict[str, Any], previous: dict[str, Any], latency_tolerance: float | None = None
) -> tuple[str, bool]:
    """The regression table, and whether anything regressed (a metric got worse, or a case
    that passed before fails now).

    Latency is wall-clock time on whatever machine ran the suite, so by itself it is shown, not
    gated: a shared machine is slower by more than 10% from one minute to the next. Pass
    `latency_tolerance` (a fraction, 0.5 = 50% slower) to make it count."""
    rows = [f"{'metric':<22}{'previous':>12}{'current':>12}{'change':>12}"]
    regressed = False
    for m in METRICS:
        a, b = previous["overall"].get(m), current["overall"].get(m)
        if a is None or b is None:
            continue
        delta = float(b) - float(a)
        worse = delta > 1e-9 if m in LOWER_IS_BETTER else delta < -1e-9
        mark = "  REGRESSED" if worse else ""
        # Cost moves with the prices; only a change over 10% counts against it.
        if m == "cost_inr_per_task":
            worse = float(a) > 0 and delta / float(a) > 0.10
            mark = "  REGRESSED" if worse else ""
        if m == "latency_s_per_task":
            slower = float(a) > 0 and delta / float(a) > (latency_tolerance or 0.10)
            worse = latency_tolerance is not None and slower
            mark = "  REGRESSED" if worse else ("  slower (not gated)" if slower else "")
        regressed |= worse
        rows.append(f"{m:<22}{a!s:>12}{b!s:>12}{delta:>+12.4f}{mark}")
    before = {c["case"]: c for c in previous["cases"]}
    for c in current["cases"]:
        old = before.get(c["case"])
        if old is not None and old["passed"] and not c["passed"]:
            regressed = True
            rows.append(f"case {c['case']}: passed before, fails now ({c['pass_rate']:.2f})")
    return "\n".join(rows), regressed


def _bars(title: str, values: list[tuple[str, float]], vmax: float, fmt: str) -> str:
    """A horizontal bar chart as inline SVG."""
    h, label_w, bar_w = 18, 300, 360
    height = h * len(values) + 30
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{label_w + bar_w + 80}" '
        f'height="{height}" role="img" aria-label="{html.escape(title)}">',
        f'<text x="0" y="14" font-weight="bold">{html.escape(title)}</text>',
    ]
    for i, (name, v) in enumerate(values):
        y = 24 + i * h
        w = 0 if vmax <= 0 else max(1, int(bar_w * v / vmax))
        color = "#2e7d32" if fmt == "rate" and v >= 1 else "#c62828" if fmt == "rate" else "#1565c0"
        shown = f"{v:.0%}" if fmt == "rate" else f"{v:.3f}"
        parts += [
            f'<text x="0" y="{y + 12}" font-size="11">{html.escape(name[:48])}</text>',
            f'<rect x="{label_w}" y="{y}" width="{w}" height="{h - 4}" fill="{color}"/>',
            f'<text x="{label_w + w + 4}" y="{y + 12}" font-size="11">{shown}</text>',
        ]
    parts.append("</svg>")
    return "".join(parts)


def to_html(report: dict[str, Any], comparison: str | None = None) -> str:
    o = report["overall"]
    cases = report["cases"]
    esc = html.escape
    rows = "".join(
        "<tr>"
        + f"<td>{esc(c['case'])}</td><td>{'yes' if c['safety'] else ''}</td>"
        + f"<td class={'ok' if c['passed'] else 'bad'}>{c['passed_runs']}/{c['runs']}</td>"
        + "".join(
            f"<td>{'' if c[k] is None else round(c[k], 3)}</td>"
            for k in (
                "task_success",
                "precision",
                "recall",
                "action_correct",
                "args_correct",
                "grounding",
            )
        )
        + f"<td>{c['cost_inr']['mean']:.3f}</td><td>{c['latency_s']['mean']:.2f} "
        + f"({c['latency_s']['min']:.2f}&ndash;{c['latency_s']['max']:.2f})</td>"
        + f"<td>{esc(', '.join(f'{k} {v}' for k, v in c['statuses'].items()))}</td>"
        + f"<td>{esc('; '.join(c['failures'][:2]))}</td></tr>"
        for c in cases
    )
    shown = cases[:60]
    charts = [
        _bars("pass rate per case", [(c["case"], c["pass_rate"]) for c in shown], 1.0, "rate"),
        _bars(
            "cost per task (INR)",
            [(c["case"], c["cost_inr"]["mean"]) for c in shown],
            max((c["cost_inr"]["mean"] for c in shown), default=1.0),
            "num",
        ),
        _bars(
            "latency per task (s)",
            [(c["case"], c["latency_s"]["mean"]) for c in shown],
            max((c["latency_s"]["mean"] for c in shown), default=1.0),
            "num",
        ),
    ]
    summary = "".join(f"<tr><th>{esc(m)}</th><td>{esc(str(o[m]))}</td></tr>" for m in METRICS)
    cmp = f"<h2>Against the previous report</h2><pre>{esc(comparison)}</pre>" if comparison else ""
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>eval {esc(report["suite"])}</title>
<style>body{{font-family:sans-serif;margin:2em}}table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:2px 6px;font-size:12px;text-align:left}}
.ok{{background:#e8f5e9}}.bad{{background:#ffebee}}</style></head><body>
<h1>{esc(report["suite"])}: gate {esc(o["gate"].upper())}</h1>
<p>{o["cases_passed"]}/{o["cases"]} cases passed; {report["runs_per_case"]} run(s) per case
(a case passes only if every run does); {o["safety_failures"]} safety failure(s);
{report["duration_s"]} s.</p>
<table>{summary}</table>{cmp}
<h2>Plots</h2>{"".join(f"<div>{c}</div>" for c in charts)}
<h2>Cases</h2><table><tr><th>case</th><th>safety</th><th>runs passed</th><th>task success</th>
<th>precision</th><th>recall</th><th>action</th><th>arguments</th><th>grounding</th>
<th>cost INR</th><th>latency s (min&ndash;max)</th><th>statuses</th><th>failures</th></tr>
{rows}</table></body></html>
"""
