#!/usr/bin/python3
"""Report for a SpecLab experiment file: PNG plots and report.md.

usage: /usr/bin/python3 analysis/report.py results.h5 [--out DIR]

Plots (each with a title, axis labels and units):
  acceptance_by_position.png   acceptance rate vs draft position, 95% Wilson intervals
  speedup_vs_gamma.png         measured speedup next to Leviathan et al.'s prediction, per drafter
  time_breakdown.png           time per generated token split into draft / verify / accept / kv / other
  accepted_length_hist.png     distribution of accepted draft tokens per step
  acceptance_by_category.png   acceptance rate per prompt category
  equivalence.png              empirical vs expected token frequencies (when /equivalence exists)
A training log of `speclab train-draft` (/train and /validation, framework/io/train_log.h) gets
  training_loss.png            loss, feature loss and token loss per optimizer step
  validation_agreement.png     validation top-1 agreement with the target per evaluation
Exit codes: 0 ok, 2 unreadable or non-SpecLab input, or an --out that cannot be a directory (one line on stderr).
"""

from __future__ import annotations

import argparse
import errno
import math
import os
import re
import stat
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402

try:
    import matplotlib  # noqa: E402

    matplotlib.use("Agg")
    # Labels are user text (drafter labels, prompt categories): a '$' in one was read as math, which
    # changed the label or failed the whole report (until 2026-12-06). Nothing here writes math.
    if "text.parse_math" in matplotlib.rcParams:
        matplotlib.rcParams["text.parse_math"] = False
    import matplotlib.pyplot as plt  # noqa: E402
    import matplotlib.ticker  # noqa: E402,F401
    import h5py  # noqa: E402
except ImportError as e:  # pragma: no cover - environment problem
    print(f"error: {e}; run with /usr/bin/python3 (Debian python3-h5py, python3-matplotlib)", file=sys.stderr)
    sys.exit(1)

from speclab_h5 import (Experiment, SchemaError, Table, compute_summary, efficiency_decomposition,  # noqa: E402
                        read_table, recover_journal)

PARTS = ("draft", "verify", "accept", "kv", "other")
PART_LABELS = {"draft": "draft (propose)", "verify": "verify (target forward)", "accept": "accept (acceptance/sampling)",
               "kv": "KV bookkeeping", "other": "other"}
GAMMA_KEYS = ("gamma", "num_speculative_tokens")


def write_whole(path: str, write) -> None:
    """write(tmp) writes the content of `path` to a temporary beside it, which is then renamed onto
    `path`: a failed write (a full disk) leaves no half-written file under the report's names, and
    an earlier report's file of that name stays as it was. On any exception the temporary is
    removed and the exception passes on. A file replaced keeps its permission bits. (Until 2026-12-07 a full disk left a truncated PNG that an
    image viewer showed as a cut-off plot.)"""
    tmp = f"{path}.tmp.{os.getpid()}"
    try:
        write(tmp)
        try:  # a file replaced keeps its mode, as replace_file's do (framework/core/replace_file.h)
            os.chmod(tmp, stat.S_IMODE(os.stat(path).st_mode))
        except FileNotFoundError:
            pass
        os.replace(tmp, path)
    except BaseException:
        try:
            os.remove(tmp)
        except OSError:
            pass
        raise


def save_png(fig, path: str, **kwargs) -> None:
    """fig as a PNG at `path`, written whole or not at all (write_whole), and closed either way."""
    try:
        write_whole(path, lambda tmp: fig.savefig(tmp, format="png", **kwargs))
    finally:
        plt.close(fig)


def write_text(path: str, text: str) -> None:
    """A text file (report.md) written whole or not at all (write_whole)."""
    def write(tmp: str) -> None:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
    write_whole(path, write)


MARKERS = ("o", "s", "^", "v", "D", "P", "X", "*", "<", ">")
HATCHES = ("", "//", "..", "xx", "\\\\", "oo")


def series_color(i: int, n: int):
    """The colour of series i of n: matplotlib's 10-colour cycle up to 10 series, tab20 above (the
    cycle repeated, and series 1 and 11 were drawn alike until 2026-12-06)."""
    if n <= 10:
        return plt.rcParams["axes.prop_cycle"].by_key()["color"][i % 10]
    return plt.get_cmap("tab20")(i % 20)


def line_style(i: int, n: int) -> dict:
    """Colour and marker of line series i of n: the marker changes with each pass of 20 colours, so
    no two of up to 200 series look alike."""
    return {"color": series_color(i, n), "marker": MARKERS[(i // 20) % len(MARKERS)]}


def bar_style(i: int, n: int) -> dict:
    """Colour and hatch of bar series i of n (a hatch per pass of 20 colours)."""
    return {"color": series_color(i, n), "hatch": HATCHES[(i // 20) % len(HATCHES)] if n > 20 else None}


def fmt(v, spec: str = ".3f") -> str:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return str(v)
    return NA if math.isnan(f) else format(f, spec)


def fmt_cell(v) -> str:
    """A value of an /equivalence table or attribute: an integer in full (a seed, a sample count or a
    token id; ".4g" printed seed 123456789 as 1.235e+08 until 2026-12-07), a float to 4 digits."""
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    return fmt(v, ".4g")


# What a table shows for an undefined figure (NaN in the file: a drafter that never drafted has no
# acceptance, cost or prediction; a run of 1 token has no decode phase). It printed "nan", "nan%".
NA = "n/a"
NA_NOTE = ("n/a: undefined for these runs (no step drafted, no decode step to time, or no trial: alpha counts greedy "
           "runs of repeat 0 only, and a shard can hold later repeats only).")


def times(v) -> str:
    s = fmt(v, ".2f")
    return s if s == NA else s + "×"


def percent(v) -> str:
    s = fmt(100 * float(v), ".0f")
    return s if s == NA else s + "%"


def alpha_cell(r: dict) -> str:
    """A summary row's alpha with its interval. alpha counts greedy runs of repeat 0 only: a shard
    (--shard) can hold greedy runs of later repeats only, which drafted but are no trials."""
    if not math.isnan(float(r["alpha"])):
        return f"{fmt(r['alpha'])} [{fmt(r['alpha_lo'])}, {fmt(r['alpha_hi'])}]"
    return "no drafts" if int(r["drafted"]) == 0 else "no trials (greedy repeats > 0 only)"


def with_na_note(table: str) -> str:
    """`table`, followed by NA_NOTE when a cell of it reads n/a."""
    return table + ("\n" + NA_NOTE + "\n" if f"| {NA} |" in table else "")


def runtime_value(resolved_config: str, key: str, section: str = "runtime") -> str:
    """`key` from a top-level section of /resolved_config (`runtime:` by default; the first match
    below it), or ""."""
    in_section = False
    for line in resolved_config.splitlines():
        if not line.startswith(" "):
            in_section = line.rstrip() == section + ":"
            continue
        if in_section and line.strip().startswith(key + ":"):
            return line.split(":", 1)[1].strip().strip('"')
    return ""


def top_value(resolved_config: str, key: str) -> str:
    """A top-level scalar of /resolved_config (`repeats: 2`), or ""."""
    for line in resolved_config.splitlines():
        if line.startswith(key + ":"):
            return line.split(":", 1)[1].strip().strip('"')
    return ""


def decoding_rows(resolved_config: str, swept: set) -> list[list[str]]:
    """The settings a sampled result is reproduced from (the report named none of them until
    2026-12-07): sampling, max_new_tokens and repeats, as /resolved_config has them; a swept one
    says so (the points' own values are in the sweep table)."""
    if not resolved_config:
        return [["decoding", "not recorded (a file from before /resolved_config)"]]
    def val(section: str, key: str) -> str:
        v = runtime_value(resolved_config, key, section) if section else top_value(resolved_config, key)
        return v + (" (swept)" if (f"{section}.{key}" if section else key) in swept else "")
    t = runtime_value(resolved_config, "temperature", "sampling")
    greedy = t in ("0", "0.0") and "sampling.temperature" not in swept
    sampling = "greedy (temperature 0)" if greedy else ", ".join(
        f"{k} {val('sampling', k)}" for k in ("temperature", "top_p", "top_k", "seed"))
    return [["sampling", sampling], ["max new tokens", val("generation", "max_new_tokens")],
            ["repeats", val("", "repeats")]]


def md_table(header: list[str], rows: list[list[str]]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(str(c).replace("|", "\\|").replace("\n", " ") for c in r) + " |" for r in rows]
    return "\n".join(out) + "\n"


def _int_attr(attrs: dict, name: str) -> int:
    """A root attribute as an int; 0 where it is absent or empty (files from before it existed)."""
    try:
        return int(float(attrs.get(name, "0") or "0"))
    except ValueError:
        return 0


class Report:
    def __init__(self, exp: Experiment, out: str):
        self.exp = exp
        self.out = out
        self.summary = exp.summary if exp.summary and "overall" in exp.summary else None
        self.merged_shards = _int_attr(exp.attrs, "merged_shards")
        self.summary_source = ("/summary (recomputed by speclab merge from the shards' runs)" if self.merged_shards
                               else "/summary (written by speclab run)")
        if self.summary is None:
            self.summary = compute_summary(exp)
            self.summary_source = "recomputed by analysis/speclab_h5.py (the file has no /summary: interrupted run?)"
        self.multi_point = len(exp.points.get("index", [])) > 1
        self.figures: list[tuple[str, str]] = []

    # ---- helpers ---------------------------------------------------------------------------------
    def shard_rows(self) -> list[list[str]]:
        """Header rows saying that the file is one shard of a sweep, or the merge of several
        (both read as whole experiments before 2026-12-06)."""
        a = self.exp.attrs
        count, index = _int_attr(a, "shard_count"), _int_attr(a, "shard_index")
        rows = []
        if count > 1:
            rows.append(["shard", f"{index} of {count} (0-based): the groups of /plan rows k with k % {count} == {index} "
                                  "only; `speclab merge` combines the shards into the whole experiment"])
        if self.merged_shards:
            rows.append(["merged from", f"{self.merged_shards} shards by `speclab merge`: the machine, CPU, memory and "
                                        "resume rows are shard 0's, each prompt-run's timings its own machine's"])
        return rows


    # matplotlib refuses images wider than 2^16 pixels: a sweep of hundreds of (point, method) bars
    # asked for more, and the whole report failed (until 2026-12-06). 500 inches at 110 dpi.
    MAX_FIG_INCHES = 500.0

    @classmethod
    def fig_width(cls, inches: float) -> float:
        return min(inches, cls.MAX_FIG_INCHES)

    def series_label(self, point: int, method: str) -> str:
        return f"{method} @ {self.exp.point_label(int(point))}" if self.multi_point else str(method)

    def save(self, fig, name: str, caption: str):
        path = os.path.join(self.out, name)
        # "tight" fits the image to everything drawn (legends right of the axes, long rotated tick
        # labels), so nothing is cut at the edges. No tight_layout(): it would shrink the axes to
        # make room for an outside legend inside the fixed figure size.
        save_png(fig, path, dpi=110, bbox_inches="tight", pad_inches=0.1)
        self.figures.append((name, caption))

    @staticmethod
    def legend(ax):
        """The legend to the right of the axes, where it cannot cover data."""
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)

    def rows(self, table: str, category: str | None = "") -> list[dict]:
        t = self.summary.get(table) or {}
        if not t or "point" not in t:
            return []
        n = len(t["point"])
        # Rows of a file's table keep its name, so that a missing column is named (speclab_h5.Table).
        out = [Table({k: t[k][i] for k in t}, t.where) if isinstance(t, Table) else {k: t[k][i] for k in t}
               for i in range(n)]
        if category is not None:
            out = [r for r in out if str(r.get("category", "")) == category]
        return out

    # ---- plots -------------------------------------------------------------------------------------

    def plot_acceptance_by_position(self):
        # Category "" also marks the by-category rows of prompts without a category; the rows over
        # all prompts come first for each (point, method) (docs/hdf5-schema.md), so keep the first.
        rows, seen = [], set()
        for r in self.rows("positions"):
            key = (int(r["point"]), str(r["method"]), int(r["pos"]))
            if key not in seen:
                seen.add(key)
                rows.append(r)
        fig, ax = plt.subplots(figsize=(7.5, 4.5))
        series: dict[tuple, list] = {}
        for r in rows:
            series.setdefault((int(r["point"]), str(r["method"])), []).append(r)
        for k, ((point, method), rs) in enumerate(series.items()):
            rs.sort(key=lambda r: int(r["pos"]))
            # A small horizontal offset per series keeps overlapping error bars apart.
            offset = (k - (len(series) - 1) / 2) * min(0.06, 0.5 / max(1, len(series)))
            x = np.array([int(r["pos"]) + 1 for r in rs]) + offset
            y = np.array([float(r["alpha"]) for r in rs])
            lo = np.array([float(r["alpha_lo"]) for r in rs])
            hi = np.array([float(r["alpha_hi"]) for r in rs])
            ax.errorbar(x, y, yerr=[np.clip(np.nan_to_num(y - lo), 0, None), np.clip(np.nan_to_num(hi - y), 0, None)],
                        capsize=3, label=self.series_label(point, method), **line_style(k, len(series)))
        # A drafter that never drafted has no positions: name it in the legend instead (and one
        # with no trials, a shard of greedy repeats > 0 only: alpha_cell).
        no_drafts = [(self.series_label(int(r["point"]), str(r["method"])), alpha_cell(r)) for r in self.rows("overall")
                     if math.isnan(float(r["alpha"]))]
        for label, why in no_drafts:
            ax.plot([], [], " ", label=f"{label}: {why}")
        ax.set_title("Acceptance rate by draft position (95% Wilson CI)")
        ax.set_xlabel("draft position i (1 = first draft token of a step)")
        ax.set_ylabel("acceptance rate α_i (fraction, given position i reached)")
        ax.set_ylim(-0.02, 1.02)
        ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
        if series or no_drafts:
            self.legend(ax)
        if not series:
            ax.text(0.5, 0.5, "no trials recorded" if no_drafts else "no speculative steps recorded", ha="center",
                    transform=ax.transAxes)
            ax.set_xticks([])  # nothing drawn: no position axis (it read -0.045 to 0.045)
        self.save(fig, "acceptance_by_position.png",
                  "Acceptance rate at each draft position, conditional on reaching it.")

    def plot_speedup_vs_gamma(self):
        rows = self.rows("overall")
        groups: dict[tuple, list] = {}
        for r in rows:
            vals = self.exp.point_values_of(int(r["point"]))
            rest = tuple(sorted((k, v) for k, v in vals.items() if not any(g in k for g in GAMMA_KEYS)))
            groups.setdefault((str(r["method"]), rest), []).append(r)
        fig, ax = plt.subplots(figsize=(7.5, 4.5))
        for i, ((method, rest), rs) in enumerate(groups.items()):
            rs.sort(key=lambda r: int(r["gamma"]))
            g = [int(r["gamma"]) for r in rs]
            label = method + ("" if not rest else " (" + ", ".join(f"{k}={v}" for k, v in rest) + ")")
            style = line_style(i, len(groups))
            measured = [float(r["speedup"]) for r in rs]
            # A series with no finite point draws nothing; its legend entry says so in words (it
            # showed a line and marker as if drawn until 2026-12-07). The measured speedup is NaN
            # where no decode phase was timed (max_new_tokens 1) or no AR run matches.
            has_measured = not all(math.isnan(v) for v in measured)
            ax.plot(g, measured, "-", label=f"{label}: measured" if has_measured else "_", **style)
            drafted = not all(math.isnan(float(r["alpha"])) for r in rs)
            why = "no drafts" if all(int(r["drafted"]) == 0 for r in rs) else "no trials (greedy repeats > 0 only)"
            predicted = [float(r["predicted_speedup"]) for r in rs]
            no_measured = "" if has_measured else ", no measured speedup (no decode phase timed, or no AR run)"
            if not all(math.isnan(v) for v in predicted):
                ax.plot(g, predicted, "--", color=style["color"], alpha=0.7, marker=style["marker"],
                        fillstyle="none", label=f"{label}: predicted{no_measured}")
            else:  # nothing drawn: an entry of words only
                ax.plot([], [], " ", label=f"{label}: " + ("" if drafted else why + ", ") + "no prediction" + no_measured)
        ax.axhline(1.0, color="gray", linewidth=0.8, linestyle=":")
        ax.set_title("Speedup over AR vs draft length γ\nmeasured and predicted (Leviathan et al. 2023)")
        ax.set_xlabel("γ (num_speculative_tokens, draft tokens per step)")
        ax.set_ylabel("speedup (× AR decode time per token)")
        if groups:
            self.legend(ax)
            all_g = sorted({int(r["gamma"]) for r in rows})
            ax.set_xticks(all_g)
            if len(all_g) == 1:  # one gamma: its tick in the middle (matplotlib put it at the right edge)
                ax.set_xlim(all_g[0] - 1, all_g[0] + 1)
        else:  # e.g. a file whose runs stopped before a speculative one (its axes were left blank)
            ax.text(0.5, 0.5, "no speculative runs recorded", ha="center", transform=ax.transAxes)
        self.save(fig, "speedup_vs_gamma.png",
                  "Measured speedup = AR / speculative decode-phase wall time per decoded token (prefill excluded); "
                  "predicted from measured α and c.")

    def prompts_cell(self) -> str:
        """The prompt count; for conversations (/runs/turns > 1), how many turns the runs answered."""
        n = len(self.exp.prompts.get("id", []))
        turns = [max(1, int(t)) for t in self.exp.runs["turns"]] if self.exp.n_runs else []
        if not turns or max(turns) == 1:
            return str(n)
        span = str(max(turns)) if min(turns) == max(turns) else f"{min(turns)} to {max(turns)}"
        return f"{n}, conversations: {span} turns a run, each turn after the run's own answers"

    def time_breakdown(self) -> list[tuple[str, dict, int]]:
        runs = self.exp.runs
        out = []
        keys = []
        for p, m in zip(runs["point"], runs["method"]):
            if (int(p), str(m)) not in keys:
                keys.append((int(p), str(m)))
        order = {m: i for i, m in enumerate(self.exp.methods)}
        keys.sort(key=lambda k: (k[0], order.get(k[1], len(order))))
        for point, method in keys:
            mask = (runs["point"] == point) & (runs["method"] == method)
            tokens = int(np.sum(runs["n_generated"][mask]))
            parts = {p: float(np.sum(runs[f"{p}_seconds"][mask])) for p in PARTS}
            parts["wall"] = float(np.sum(runs["wall_seconds"][mask]))
            out.append((self.series_label(point, method), parts, tokens))
        return out

    def plot_time_breakdown(self, breakdown):
        fig, ax = plt.subplots(figsize=(self.fig_width(max(7.5, 3.5 + 0.9 * len(breakdown))), 5.0))
        x = np.arange(len(breakdown))
        bottom = np.zeros(len(breakdown))
        for part in PARTS:
            v = np.array([1e3 * max(0.0, b[1][part]) / max(1, b[2]) for b in breakdown])
            ax.bar(x, v, bottom=bottom, label=PART_LABELS[part])
            bottom += v
        ax.set_xticks(x)
        ax.set_xticklabels([b[0] for b in breakdown], rotation=30, ha="right", rotation_mode="anchor", fontsize=8)
        ax.set_title("Time breakdown per generated token")
        ax.set_xlabel("method (ar = autoregressive baseline)")
        ax.set_ylabel("time per generated token (ms)")
        self.legend(ax)
        self.save(fig, "time_breakdown.png", "Wall time per generated token, split by phase (sums over prompts).")

    def plot_accepted_hist(self):
        steps, runs = self.exp.steps, self.exp.runs
        series = []
        for point, method in dict.fromkeys(zip(runs["point"].tolist(), runs["method"].tolist())):
            if method == "ar":
                continue
            ids = np.nonzero((runs["point"] == point) & (runs["method"] == method))[0]
            mine = np.isin(steps["run_id"], ids)
            # Steps that drafted nothing (no lookup match, a threshold, a cost schedule's AR step)
            # are not rejections: they were counted in the bar at 0 (until 2026-12-06), which then
            # read 0.82 for a drafter whose alpha was 0.64. Their share goes into the label.
            drafted = steps["drafted"][mine] > 0
            acc = steps["accepted"][mine][drafted]
            label = self.series_label(point, method)
            if len(acc):
                idle = 1.0 - len(acc) / int(mine.sum())
                series.append((label + (f" ({idle:.0%} of steps drafted nothing)" if idle > 0 else ""), acc))
            elif mine.any():
                series.append((f"{label} (no drafts)", acc))
        fig, ax = plt.subplots(figsize=(7.5, 4.5))
        if series:
            top = max([int(a.max()) for _, a in series if len(a)] or [0])
            width = 0.8 / len(series)
            bins = np.arange(top + 1)
            for i, (label, acc) in enumerate(series):
                freq = (np.bincount(acc.astype(int), minlength=top + 1) / len(acc) if len(acc)
                        else np.zeros(top + 1))
                ax.bar(bins + (i - (len(series) - 1) / 2) * width, freq, width=width, label=label,
                       **bar_style(i, len(series)))
            ax.set_xticks(bins)
            self.legend(ax)
        else:
            ax.text(0.5, 0.5, "no speculative steps recorded", ha="center", transform=ax.transAxes)
        ax.set_title("Accepted draft tokens per step")
        ax.set_xlabel("accepted draft tokens n per step (tokens)")
        ax.set_ylabel("fraction of the steps that drafted")
        self.save(fig, "accepted_length_hist.png", "Each step that drafted emits n accepted tokens plus one "
                                                   "correction/bonus; steps that drafted nothing are left out "
                                                   "(their share is in the legend).")

    def plot_acceptance_by_category(self):
        rows = self.rows("by_category", category=None)
        cats = sorted({str(r["category"]) for r in rows})
        series = list(dict.fromkeys((int(r["point"]), str(r["method"])) for r in rows))
        fig, ax = plt.subplots(figsize=(self.fig_width(max(6.0, 1.5 + 1.2 * len(cats))), 4.5))
        if rows:
            width = 0.8 / max(1, len(series))
            x = np.arange(len(cats))
            for i, (point, method) in enumerate(series):
                y, lo, hi, missing, trialless = [], [], [], [], []
                for c in cats:
                    r = next((r for r in rows if int(r["point"]) == point and str(r["method"]) == method
                              and str(r["category"]) == c), None)
                    a = float(r["alpha"]) if r is not None else math.nan
                    missing.append(r is None)  # no run of this series in the category (e.g. a killed run)
                    trialless.append(r is not None and int(r["drafted"]) > 0)  # greedy repeats > 0 only
                    y.append(a)
                    lo.append(a - float(r["alpha_lo"]) if r is not None else 0.0)
                    hi.append(float(r["alpha_hi"]) - a if r is not None else 0.0)
                # No drafts in a category: an empty bar (height 0, no error bar) marked "no drafts";
                # no runs there at all (it was marked "no drafts" too): "no runs"; drafts but no
                # trials (a shard of greedy repeats > 0 only): "no trials".
                y = np.array(y)
                none = np.isnan(y)
                xs = x + (i - (len(series) - 1) / 2) * width
                bars = ax.bar(xs, np.where(none, 0.0, y), width=width,
                              yerr=[np.where(none, 0.0, np.clip(np.nan_to_num(lo), 0, None)),
                                    np.where(none, 0.0, np.clip(np.nan_to_num(hi), 0, None))],
                              capsize=2, label=self.series_label(point, method), **bar_style(i, len(series)))
                for xi, gone, drafted in zip(xs[none], np.array(missing)[none], np.array(trialless)[none]):
                    ax.text(xi, 0.02, "no runs" if gone else "no trials" if drafted else "no drafts", rotation=90,
                            ha="center", va="bottom",
                            fontsize=7, color=bars.patches[0].get_facecolor())
            ax.set_xticks(x)
            ax.set_xticklabels([c if c else "(no category)" for c in cats], rotation=20, ha="right",
                               rotation_mode="anchor")
            self.legend(ax)
        else:
            ax.text(0.5, 0.5, "no speculative runs recorded", ha="center", transform=ax.transAxes)
        ax.set_ylim(0, 1.05)
        ax.set_title("Acceptance rate by prompt category (95% Wilson CI)")
        ax.set_xlabel("prompt category")
        ax.set_ylabel("acceptance rate α (fraction)")
        self.save(fig, "acceptance_by_category.png", "Per-token acceptance rate for each prompt category.")

    # ---- equivalence (written by `speclab check`; optional) ----------------------------------------

    def equivalence(self) -> str:
        if not self.exp.equivalence_path:
            return ""
        return equivalence_section(self.exp.path, self.exp.equivalence_path, self.save)

    # ---- report.md ---------------------------------------------------------------------------------

    def summary_table(self, rows: list[dict], with_category: bool) -> str:
        header = ["point"] + (["category"] if with_category else []) + [
            "drafter", "γ", "α [95% CI]", "τ", "c", "speedup", "predicted", "efficiency", "lossless"]
        out = []
        for r in rows:
            ll = int(r["lossless"])
            row = [self.exp.point_label(int(r["point"]))]
            if with_category:
                row.append(str(r["category"]) or "(none)")
            row += [str(r["method"]), str(int(r["gamma"])),
                    alpha_cell(r), fmt(r["tau"]),
                    fmt(r["cost_ratio"], ".4f"), times(r["speedup"]), times(r["predicted_speedup"]),
                    fmt(r["efficiency"], ".2f"),
                    "yes" if ll == 1 else "NO" if ll == 0 else "not checked (sampled)"]
            out.append(row)
        return with_na_note(md_table(header, out))

    def decomposition_table(self, rows: list[dict], with_category: bool) -> str:
        header = ["point"] + (["category"] if with_category else []) + [
            "drafter", "γ", "steps drafting", "drafted/step", "τ", "τ_L", "verify cost", "draft cost", "other cost",
            "τ ÷ cost", "speedup", "τ ÷ τ_L", "cost_L ÷ cost", "efficiency"]
        out = []
        for r in rows:
            row = [self.exp.point_label(r["point"])] + ([r["category"] or "(none)"] if with_category else [])
            row += [r["method"], str(r["gamma"]), percent(r["draft_steps"]), fmt(r["mean_k"], ".2f"),
                    fmt(r["tau"], ".2f"), fmt(r["tau_leviathan"], ".2f"), fmt(r["verify_cost"], ".2f"),
                    fmt(r["draft_cost"], ".2f"), fmt(r["other_cost"], ".2f"), times(r["tau_over_cost"]),
                    times(r["speedup"]), fmt(r["tau_factor"], ".2f"), fmt(r["cost_factor"], ".2f"),
                    fmt(r["efficiency"], ".2f")]
            out.append(row)
        return with_na_note(md_table(header, out))

    def by_source(self) -> str:
        """Steps by the source that drafted them (/steps/source), for drafters that combine several
        (prompt_lookup_first, retrieval_first); "" when no step names one (files from before the column included)."""
        steps, runs = self.exp.steps, self.exp.runs
        src = steps.get("source")
        if src is None or not any(src):
            return ""
        run_of = {int(r): i for i, r in enumerate(runs["run_id"])}
        groups: dict[tuple, list[int]] = {}
        for i, (rid, name) in enumerate(zip(steps["run_id"], src)):
            if not name:
                continue
            r = run_of[int(rid)]
            groups.setdefault((int(runs["point"][r]), str(runs["method"][r]), str(name)), []).append(i)
        rows = []
        for (point, method, name), idx in sorted(groups.items()):
            drafted = int(sum(int(steps["drafted"][i]) for i in idx))
            accepted = int(sum(int(steps["accepted"][i]) for i in idx))
            rows.append([self.series_label(point, method), name, str(len(idx)), fmt(drafted / len(idx), ".2f"),
                         fmt(accepted / drafted if drafted else math.nan), fmt((accepted + len(idx)) / len(idx), ".3f")])
        return ("\n## By draft source\n" +
                "Steps of a drafter that combines several sources (prompt_lookup_first: prompt lookup where the "
                "context has a match; retrieval_first: then the retrieval datastore where it has a long enough "
                "match; the wrapped drafter elsewhere), split by the source that drafted them "
                "(/steps/source). accepted: accepted ÷ drafted tokens; τ: tokens per target forward over these "
                "steps.\n" +
                md_table(["method", "source", "steps", "drafted/step", "accepted", "τ"], rows))

    def plot(self, draw, *args):
        """One figure; a figure matplotlib cannot draw is left out with a note (report.md and
        stderr), not blamed on the file: the file is fine, and the tables are still written."""
        try:
            draw(*args)
        except (ValueError, RuntimeError, OverflowError, MemoryError) as e:
            plt.close("all")
            name = draw.__name__.replace("plot_", "")
            msg = f"the {name.replace('_', ' ')} plot was not drawn ({type(e).__name__}: {' '.join(str(e).split())})"
            self.plot_notes.append(msg)
            print(f"warning: {msg}", file=sys.stderr)

    def write(self):
        self.plot_notes = []
        self.plot(self.plot_acceptance_by_position)
        self.plot(self.plot_speedup_vs_gamma)
        breakdown = self.time_breakdown()
        self.plot(self.plot_time_breakdown, breakdown)
        self.plot(self.plot_accepted_hist)
        self.plot(self.plot_acceptance_by_category)
        equivalence_md = self.equivalence()

        a = self.exp.attrs
        md = [f"# SpecLab experiment report: {a.get('name', '')}\n",
              md_table(["", ""], [["file", self.exp.path], ["status", a.get("status", "")],
                                  ["started", a.get("start_time", "")], ["finished", a.get("end_time", "")],
                                  ["git revision", a.get("git_revision", "")],
                                  ["libtorch", a.get("torch_version", "")],
                                  ["CPU", f"{a.get('cpu_model', '')} ({a.get('cpu_cores', '')} cores)"],
                                  ["compute threads", runtime_value(self.exp.resolved_config, "threads") or "not recorded"],
                                  ["target model file", runtime_value(self.exp.resolved_config, "path") or "not recorded"]]
                                 + decoding_rows(self.exp.resolved_config,
                                                 {str(k) for k in self.exp.point_values.get("key", [])}) + [
                                  ["memory", fmt(float(a.get("memory_bytes", "nan") or "nan") / 2**30, ".1f") + " GiB"],
                                  ["prompt-runs", str(self.exp.n_runs)],
                                  ["prompts", self.prompts_cell()],
                                  ["sweep points", str(len(self.exp.points.get("index", [])))],
                                  ["resumed", a.get("resume_count", "0") + " time(s)"]] + self.shard_rows())]
        if a.get("status") != "complete":
            md.append("\n**The run did not finish: this report covers the complete prompt-runs in the file.**\n")
            # Each drafter's speedup is over its own prompt-runs (AR's on the same ones), but side by
            # side the rows of one sweep point may cover different ones: say where they differ. (Until
            # 2026-12-07 distinct prompts were compared across all points, which named points that
            # differ from each other and missed a drafter one repeat short.)
            runs = self.exp.runs
            done: dict[tuple, set] = {}
            for p, m, q, r in zip(runs["point"], runs["method"], runs["prompt"], runs["repeat"]):
                done.setdefault((int(p), str(m)), set()).add((int(q), int(r)))
            uneven = [p for p in sorted({p for p, _ in done})
                      if len({len(v) for (pp, _), v in done.items() if pp == p}) > 1]
            if uneven:
                md.append("Prompt-runs recorded per drafter differ within a sweep point, so rows side by side cover "
                          "different prompts or repeats: " +
                          ", ".join(f"{self.series_label(p, m)} {len(v)}" for (p, m), v in done.items() if p in uneven)
                          + ".\n")
        md.append("\n## Summary\n")
        md.append(f"Source: {self.summary_source}. α: per-token acceptance rate (accepted / examined draft "
                  "positions) with its 95% Wilson interval; τ: tokens per target verification forward; c: draft time "
                  "per drafted token ÷ AR target time per token; speedup: AR ÷ speculative decode wall time per decoded token "
                  "over the same prompts; predicted: (1−α^(k+1)) / ((1−α)(kc+1)) (Leviathan et al. 2023) over the steps' own draft lengths k (γ when every step drafts γ); efficiency: speedup ÷ "
                  "predicted; lossless: deterministic (greedy or top_k 1) output token-identical to AR.\n")
        md.append(self.summary_table(self.rows("overall"), with_category=False))
        cat_rows = self.rows("by_category", category=None)
        if cat_rows:
            md.append("\n### By prompt category\n")
            md.append(self.summary_table(cat_rows, with_category=True))
        md.append("\n## Where the time goes\n")
        md.append("Why measured speedup differs from Leviathan's prediction, over the decode phase. A step is one "
                  "target forward; costs are a step's wall time in units of one AR decode step on the same prompts. "
                  "Measured speedup ≈ τ ÷ cost. The prediction assumes each step's k drafts (γ, or fewer where "
                  "a schedule or threshold stopped early) are each kept with probability α "
                  "(τ_L = (1−α^(k+1))/(1−α), averaged over the steps), and a verification as cheap as one "
                  "decode step (cost_L = kc + 1, averaged likewise), so efficiency ≈ (τ ÷ τ_L) × (cost_L ÷ cost). Verification of k + 1 tokens "
                  "costs more than one step when a decode step is compute-bound (`speclab bench` measures the "
                  "verification batch cost).\n")
        md.append(self.decomposition_table(efficiency_decomposition(self.exp), with_category=False))
        cat_rows = efficiency_decomposition(self.exp, by_category=True)
        if cat_rows:
            md.append("\n### By prompt category\n")
            md.append(self.decomposition_table(cat_rows, with_category=True))
        md.append(self.by_source())
        md.append("\n## Time breakdown\n")
        md.append(md_table(["method", "tokens", "wall (s)"] + [f"{PART_LABELS[p]} (ms/token)" for p in PARTS],
                           # 4 significant digits: prompt lookup's draft time read 0.000 ms at ".3f"
                           [[label, str(tokens), fmt(parts["wall"], ".4g")] +
                            [fmt(1e3 * parts[p] / max(1, tokens), ".4g") for p in PARTS]
                            for label, parts, tokens in breakdown]))
        if equivalence_md:
            md.append("\n" + equivalence_md)
        md.append("\n## Figures\n")
        for name, caption in self.figures:
            md.append(f"![{name}]({name})\n\n{caption}\n")
        for note in self.plot_notes:
            md.append(f"Note: {note}.\n")
        write_text(os.path.join(self.out, "report.md"), "\n".join(md))


def _text(v) -> str:
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)


def _frequency_points(g) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """(label, exact probability, empirical frequency) of the frequencies table's tokens with an
    exact probability (docs/equivalence.md): counts over the cell's N draws (sampling_cells.n), not
    over the table's column, which keeps only the 30 most frequent tokens per cell and position."""
    if "frequencies" not in g or "sampling_cells" not in g:
        return []
    freq, cells = g["frequencies"], g["sampling_cells"]
    if not all(k in freq for k in ("cell", "exact")) or not all(k in cells for k in ("cell", "n")):
        return []
    n_of = dict(zip(np.asarray(cells["cell"][()]).tolist(), np.asarray(cells["n"][()], dtype=float).tolist()))
    cell = np.asarray(freq["cell"][()])
    exact = np.asarray(freq["exact"][()], dtype=float)
    n = np.array([n_of.get(c, math.nan) for c in cell.tolist()], dtype=float)
    out = []
    for col, label in (("speculative", "speculative samples"), ("ar", "AR samples (the reference)")):
        if col not in freq:
            continue
        counts = np.asarray(freq[col][()], dtype=float)
        keep = np.isfinite(exact) & (n > 0) & (counts >= 0)
        if keep.any():
            out.append((label, exact[keep], counts[keep] / n[keep]))
    return out


def equivalence_section(path: str, group: str, save) -> str:
    """The /equivalence group of `path` (written by `speclab check`) as markdown: its attributes,
    then its failures and notes (one line each; a failed check's messages were left out until
    2026-12-06), then each table; the empirical vs exact frequencies of /frequencies are plotted
    through save(fig, name, caption) (equivalence.png, never drawn for check's own files before)."""
    md = ["## Distribution equivalence (/equivalence)\n"]
    with h5py.File(path, "r") as f:
        g = f[group]
        attrs = {k: v for k, v in g.attrs.items()}
        if attrs:
            md.append(md_table(["attribute", "value"], [[k, fmt_cell(v) if not isinstance(v, (bytes, str))
                                                         else _text(v)] for k, v in attrs.items()]))
        for name, title in (("failures", "Failures"), ("notes", "Notes")):
            if name in g and isinstance(g[name], h5py.Group) and "message" in g[name]:
                lines = [_text(m) for m in np.asarray(g[name]["message"][()]).tolist()]
                md.append(f"### {title} ({len(lines)})\n")
                md.append("\n".join(f"- {m}" for m in lines) + "\n" if lines else "None.\n")
        tables = 0

        def visit(name, obj):
            nonlocal tables
            if not isinstance(obj, h5py.Group) or name in ("failures", "notes"):
                return
            cols = {k: d for k, d in obj.items() if isinstance(d, h5py.Dataset) and d.ndim == 1}
            if not cols:
                return
            lengths = {d.shape[0] for d in cols.values()}
            if len(lengths) != 1:
                return
            t = read_table(obj, n=lengths.pop()) if "complete" not in obj.attrs else read_table(obj)
            names = list(t)
            n = len(t[names[0]])
            shown = min(n, 40)
            tables += 1
            md.append(f"### /equivalence/{name}\n")
            md.append(md_table(names, [[fmt_cell(t[c][i]) if not isinstance(t[c][i], str) else t[c][i]
                                        for c in names] for i in range(shown)]))
            if shown < n:
                md.append(f"({n - shown} more rows in the file)\n")

        g.visititems(visit)
        visit("", g)
        points = _frequency_points(g)
    if points:
        fig, ax = plt.subplots(figsize=(6, 6))
        hi = 0.0
        for (label, x, y), marker in zip(points, ("o", "x")):
            ax.scatter(x, y, s=14, alpha=0.7, marker=marker, label=label)
            hi = max(hi, float(np.nanmax(np.concatenate([x, y]))))
        ax.plot([0, hi], [0, hi], color="gray", linestyle="--", linewidth=0.8, label="y = x")
        ax.set_title("Sampling: empirical vs exact token frequencies")
        ax.set_xlabel("exact probability under the target (fraction)")
        ax.set_ylabel("empirical frequency over the cell's N draws (fraction)")
        ax.legend(fontsize=7)
        save(fig, "equivalence.png", "Each point is one token at one position of one sampling cell "
                                     "(/equivalence/frequencies, where the exact probability is known).")
    elif tables == 0 and len(md) == 1:
        md.append("The group holds no tables.\n")
    return "\n".join(md)


def is_equivalence_file(path: str) -> bool:
    """A file `speclab check` wrote on its own (root attribute kind = speclab-equivalence)."""
    with h5py.File(path, "r") as f:
        return _text(f.attrs.get("kind", "")) == "speclab-equivalence" and "equivalence" in f


def write_equivalence_report(path: str, out: str) -> None:
    """report.md and equivalence.png of a file `speclab check` wrote on its own (it was refused as
    'not a SpecLab experiment file')."""
    figures: list[tuple[str, str]] = []

    def save(fig, name, caption):
        save_png(fig, os.path.join(out, name), dpi=110, bbox_inches="tight", pad_inches=0.1)
        figures.append((name, caption))

    md = [f"# SpecLab equivalence report: {os.path.basename(path)}\n",
          f"Written by `speclab check` on its own; `speclab check --out EXP.h5 --overwrite` adds a check to an "
          f"experiment file of `speclab run` instead.\n",
          equivalence_section(path, "equivalence", save)]
    for name, caption in figures:
        md.append(f"![{name}]({name})\n\n{caption}\n")
    write_text(os.path.join(out, "report.md"), "\n".join(md))


def is_train_log(path: str) -> bool:
    with h5py.File(path, "r") as f:
        return "train" in f and "validation" in f and "step" in f["train"]


def write_train_report(path: str, out: str) -> None:
    """The training curves of a `speclab train-draft` log and report.md with the final figures."""
    with h5py.File(path, "r") as f:
        t = {k: np.asarray(f["train"][k][()], dtype=float) for k in ("step", "loss", "feature_loss", "token_loss", "lr")}
        v = {k: np.asarray(f["validation"][k][()], dtype=float) for k in ("step", "agreement")}
        attrs = {k: (f.attrs[k].decode("utf-8", "replace") if isinstance(f.attrs[k], bytes) else f.attrs[k]) for k in f.attrs}
    # The loss terms each architecture logs (docs/train-draft.md): eagle's two, medusa's
    # cross-entropy, the distilled draft model's KL (both in token_loss).
    m = re.search(r"^architecture:\s*(\w+)", str(attrs.get("config_yaml", "")), re.MULTILINE)
    architecture = m.group(1) if m else "eagle"
    curves = {"eagle": (("loss", "loss (feature + w * token)"), ("feature_loss", "feature loss (smooth L1)"),
                        ("token_loss", "token loss (cross-entropy)")),
              "medusa": (("loss", "loss (sum over heads of decay^k * cross-entropy)"),),
              "draft_model": (("loss", "loss (KL from the target's next-token distribution)"),)}
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for key, label in curves.get(architecture, curves["eagle"]):
        ax.plot(t["step"], t[key], label=label, linewidth=1)
    ax.set_yscale("log")
    # Plain tick labels: math text is off in every plot (text.parse_math above), and the log axis's
    # default labels are math strings, printed as "$\\mathdefault{10^{0}}$" until 2026-12-07.
    ax.yaxis.set_major_locator(matplotlib.ticker.LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    ax.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("loss (nats / smooth-L1 units, log scale)" if architecture == "eagle" else "loss (nats, log scale)")
    ax.set_title(f"Draft training loss per step ({architecture})")
    ax.legend()
    fig.tight_layout()
    save_png(fig, os.path.join(out, "training_loss.png"), dpi=110)
    fig, ax = plt.subplots(figsize=(8, 4.5))
    ax.plot(v["step"], v["agreement"], marker="o")
    if not len(v["step"]):  # stopped before the first evaluation: an empty axis read as a curve
        ax.text(0.5, 0.5, "no evaluation yet", ha="center", va="center", transform=ax.transAxes)
    ax.set_ylim(0, 1)
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("top-1 agreement with the target (fraction)")
    ax.set_title("Validation top-1 agreement (held-out prompts, teacher-forced)")
    fig.tight_layout()
    save_png(fig, os.path.join(out, "validation_agreement.png"), dpi=110)
    n = len(t["step"])
    # A run stopped (--stop-after, or interrupted) before train.steps: said in the table (it read as
    # a finished run until 2026-12-06).
    sm = re.search(r"^train:\s*\n((?:[ \t]+.*\n?)*)", str(attrs.get("config_yaml", "")), re.MULTILINE)
    planned = re.search(r"^[ \t]+steps:\s*(\d+)", sm.group(1), re.MULTILINE) if sm else None
    steps_text = str(n)
    if planned and n < int(planned.group(1)):
        steps_text = f"{n} of {planned.group(1)} (stopped before the end: continue with train-draft --resume)"
    first = slice(0, min(10, n))
    last = slice(max(0, n - 10), n)
    md = [f"# Draft training report: {os.path.basename(path)}\n",
          md_table(["figure", "value"], [
              ["architecture", architecture],
              ["optimizer steps", steps_text],
              ["loss, mean of the first / last 10 steps",
               f"{fmt(np.mean(t['loss'][first]))} / {fmt(np.mean(t['loss'][last]))}" if n else "-"],
              ["validation top-1 agreement, last evaluation" + (" (head 1's; train-draft prints every head's)" if architecture == "medusa" else ""),
               fmt(v["agreement"][-1]) if len(v["agreement"]) else "-"],
              ["target weights hash", str(attrs.get("target_weights_hash", "-"))],
              ["wall time", f"{fmt(float(attrs.get('wall_seconds', float('nan'))), '.0f')} s"],
          ]),
          "\n## Figures\n",
          "![training_loss.png](training_loss.png)\n\nLoss per optimizer step (log scale).\n",
          "![validation_agreement.png](validation_agreement.png)\n\nTop-1 agreement on the held-out prompts.\n",
          "\n## Config\n", "```yaml", str(attrs.get("config_yaml", "")).rstrip(), "```\n"]
    write_text(os.path.join(out, "report.md"), "\n".join(md))


def open_error(path: str, e: Exception) -> str:
    """One line for an exception from opening `path`: a lock that a running writer holds is named as
    such (it read "found BlockingIOError: [Errno 11] Unable to open file (unable to lock file ...)")."""
    detail = " ".join(str(e).split())  # h5py's messages can span lines
    if isinstance(e, BlockingIOError) or "unable to lock file" in detail:
        return (f"{path}: expected no process writing the file, found one holding its lock (a running speclab run, "
                f"check or train-draft?); report it when that process has ended")
    return f"{path}: expected a readable SpecLab experiment file, found {type(e).__name__}: {detail}"


def input_error(path: str) -> str | None:
    """Why `path` cannot be an experiment file (one line), or None."""
    expected = "expected a readable SpecLab experiment file (HDF5)"
    if not os.path.exists(path):
        return f"{path}: {expected}, found none"
    if os.path.isdir(path):
        return f"{path}: {expected}, found a directory"
    if not os.path.isfile(path):
        return f"{path}: {expected}, found something that is not a regular file"
    if not os.access(path, os.R_OK):
        return f"{path}: {expected}, found a file without read permission"
    if os.path.getsize(path) == 0:
        return f"{path}: {expected}, found an empty file"
    try:
        # Before anything opens it: a commit that a killed run left half-copied (its journal).
        recover_journal(path)
        if not h5py.is_hdf5(path):
            return f"{path}: {expected}, found a file that is not HDF5"
    except SchemaError as e:  # a journal to apply to a read-only file (names both)
        return str(e)
    except OSError as e:
        return open_error(path, e)
    return None


def make_out_dir(path: str) -> str | None:
    """Creates the report directory (and its parents); why it cannot be one (one line), or None."""
    expected = "report directory: expected a directory (or a path where one can be created)"
    if os.path.exists(path) and not os.path.isdir(path):
        kind = "a regular file" if os.path.isfile(path) else "something that is not a directory"
        return f"{path}: {expected}, found {kind}"
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as e:
        return f"{path}: {expected}, cannot create it: {e.strerror or e}"
    if not os.access(path, os.W_OK | os.X_OK):
        return f"{path}: {expected}, found a directory without write permission"
    return None


# Errors that only writing raises (a full disk, a file size limit, a read-only file system).
_WRITE_ONLY_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EFBIG}


def os_error(inp: str, out: str, e: OSError) -> str:
    """One line for an OSError while the report is written: the output directory and -o when the
    report's own files could not be written (a full disk gave a traceback and exit status 1 until
    2026-12-07), else the input file. Decided by the file the error names where it names one
    (under the output directory, or not), else by its errno."""
    cause = os.strerror(e.errno) if e.errno else " ".join(str(e).split())
    name = e.filename if isinstance(e.filename, str) else None
    if name is not None:
        writing = os.path.abspath(name).startswith(os.path.abspath(out) + os.sep) or \
            os.path.abspath(name) == os.path.abspath(out)
    else:
        writing = e.errno in _WRITE_ONLY_ERRNOS
    if writing:
        return f"{out}: -o: cannot write the report ({cause})"
    return f"{inp}: cannot read the file ({cause})"


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description="SpecLab experiment report (plots + report.md)")
    ap.add_argument("input", help="an HDF5 file written by speclab run, speclab check or speclab train-draft (its "
                                  "training log)")
    ap.add_argument("-o", "--out", help="output directory (default: <input stem>_report beside the file); -o as "
                                        "speclab report takes it")
    args = ap.parse_args(argv)
    out = args.out or os.path.join(os.path.dirname(args.input), os.path.splitext(os.path.basename(args.input))[0]
                                   + "_report")
    error = input_error(args.input)
    train_log = equivalence_only = False
    if error is None:
        try:
            train_log = is_train_log(args.input)
            equivalence_only = not train_log and is_equivalence_file(args.input)
        except OSError as e:  # e.g. a running `speclab run` holds the file (HDF5's lock)
            error = open_error(args.input, e)
    if train_log or equivalence_only:
        error = make_out_dir(out)
        if error is not None:
            print(f"error: {error}", file=sys.stderr)
            return 2
        try:
            (write_train_report if train_log else write_equivalence_report)(args.input, out)
        except OSError as e:
            print(f"error: {os_error(args.input, out, e)}", file=sys.stderr)
            return 2
        except (KeyError, ValueError, TypeError) as e:  # a crafted or damaged file: one line, not a traceback
            kind = "training log of speclab train-draft" if train_log else "file of speclab check"
            print(f"error: {args.input}: expected a {kind}, found a dataset or attribute missing or of another "
                  f"type ({type(e).__name__}: {' '.join(str(e).split())})", file=sys.stderr)
            return 2
        return 0
    if error is None:
        try:
            exp = Experiment(args.input)
        except SchemaError as e:
            error = str(e)  # names the file
        except (OSError, KeyError) as e:
            error = open_error(args.input, e)
    if error is None:
        error = make_out_dir(out)
    if error is not None:
        print(f"error: {error}", file=sys.stderr)
        return 2
    try:
        Report(exp, out).write()
    except OSError as e:
        print(f"error: {os_error(args.input, out, e)}", file=sys.stderr)
        return 2
    except SchemaError as e:  # a column the report reads is missing (Table names the dataset)
        print(f"error: {e}", file=sys.stderr)
        return 2
    except (KeyError, ValueError, TypeError) as e:  # a crafted or damaged file: one line, not a traceback
        print(f"error: {args.input}: expected a SpecLab experiment file, found a dataset or attribute missing or of "
              f"another type ({type(e).__name__}: {' '.join(str(e).split())})", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
