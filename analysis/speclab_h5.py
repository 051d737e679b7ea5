"""Reader for SpecLab experiment files written by `speclab run` (docs/hdf5-schema.md).

Only the committed rows are returned: /runs rows [0, complete) and the rows of /steps,
/positions and /tokens that belong to those runs, so a file whose writer was killed reads as
the set of prompt-runs finished before it died.

    exp = Experiment("results.h5")
    exp.runs["method"], exp.steps["accepted"], exp.summary["overall"]["alpha"]

exp.summary is None where the file has no /summary (its writer was stopped before the end):
compute_summary(exp) recomputes the same tables from the committed rows.

Tables are dicts of column name -> numpy array (strings as Python str objects). Needs h5py and
numpy (Debian: python3-h5py).
"""

from __future__ import annotations

import fcntl
import math
import os
import struct

import h5py
import numpy as np

SCHEMA_VERSION = 1
Z95 = 1.959963984540054


class SchemaError(Exception):
    """The file is not a SpecLab experiment file of a supported schema version."""


_JOURNAL_HEAD, _JOURNAL_TAIL = b"SLJRNL01", b"SLJEND01"


def _fnv1a(data: bytes) -> int:
    h = 1469598103934665603
    for b in data:
        h = ((h ^ b) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return h


def _journal_records(j: bytes):
    """The (offset, bytes) records of a complete journal, or None (framework/io/hdf5_journal.cpp)."""
    if len(j) < 32 or j[:8] != _JOURNAL_HEAD or j[-8:] != _JOURNAL_TAIL:
        return None
    body = len(j) - 16
    if _fnv1a(j[:body]) != struct.unpack_from("<Q", j, body)[0]:
        return None
    (n,) = struct.unpack_from("<Q", j, 8)
    at, recs = 16, []
    for _ in range(n):
        if body - at < 16:
            return None
        off, length = struct.unpack_from("<QQ", j, at)
        at += 16
        if length > body - at:
            return None
        recs.append((off, j[at:at + length]))
        at += length
    return recs if at == body else None


def recover_journal(path: str) -> bool:
    """Finishes a commit that a killed writer left half-copied (docs/hdf5-schema.md, "Crash
    consistency"): when `<path>.journal` is complete and no writer holds the file, copies it into
    the file and removes it. An incomplete journal is left alone (the file is consistent without
    it). Returns whether it copied; the same as speclab's recover_hdf5_journal()."""
    path = os.fsdecode(os.fspath(path))  # a pathlib.Path or bytes, as h5py takes them
    # Beside the file itself, where `path` leads when it is a symbolic link (hdf5_journal_path in
    # framework/io/hdf5_journal.h): a writer through a link and a reader through the target's name
    # find the same journal.
    jpath = (os.path.realpath(path) if os.path.islink(path) else path) + ".journal"
    if not os.path.exists(jpath):
        return False
    with open(jpath, "rb") as f:
        if _journal_records(f.read()) is None:
            return False
    try:
        fd = os.open(path, os.O_RDWR)
    except OSError as e:  # a read-only file: said as a bare PermissionError until 2026-12-07
        raise SchemaError(f"{path}: a killed writer left {jpath} to be copied into the file before it can be read, "
                          f"and the file cannot be opened for writing ({os.strerror(e.errno or 0)}); make it "
                          f"writable, or copy both files to where they are") from e
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return False  # its writer is alive
        try:
            with open(jpath, "rb") as f:
                recs = _journal_records(f.read())
        except FileNotFoundError:
            return False
        if recs is None:
            return False
        for off, data in recs:
            os.pwrite(fd, data, off)
        os.unlink(jpath)
        return True
    finally:
        os.close(fd)


def _column(ds: h5py.Dataset, n: int) -> np.ndarray:
    if h5py.check_string_dtype(ds.dtype) is not None:
        return np.array(ds.asstr(errors="replace")[:n], dtype=object)
    return ds[:n]


# Columns added after a table's first version (hdf5_recorder.cpp, ColumnSpec::optional): a file
# may lack them, or hold them shorter than the table (a file continued by an older build). Their
# missing tail reads as the default (""), and they never shorten the table, as in SpecLab's reader.
# /runs/turns: a conversation's turns (one record, each turn's first token from its own prefill);
# 0 where a file predates it, read as one turn (_turns).
OPTIONAL_COLUMNS = {"steps": {"source": ""}, "runs": {"turns": 0}}


def _turns(runs: dict, i: int) -> int:
    """The turns of run i: each one's first token came from a prefill, not a decode step."""
    return max(1, int(runs["turns"][i]))


def committed_rows(group: h5py.Group) -> int:
    """min(attribute `complete`, the length of every column but the optional ones)."""
    if "complete" not in group.attrs:
        raise SchemaError(f"{group.file.filename}: {group.name}: expected attribute 'complete', found none")
    optional = OPTIONAL_COLUMNS.get(group.name.rsplit("/", 1)[-1], {}) if group.name.count("/") == 1 else {}
    n = _int_attr(group.attrs["complete"], f"{group.file.filename}: {group.name}: attribute 'complete'")
    for name, ds in group.items():
        if isinstance(ds, h5py.Dataset) and name not in optional:
            n = min(n, ds.shape[0])
    return max(n, 0)


class Table(dict):
    """A table's columns by name. A column the file lacks is a SchemaError naming the file and the
    dataset (a report on a file missing, say, /runs/method ended in a KeyError traceback)."""

    def __init__(self, columns: dict, where: str):
        super().__init__(columns)
        self.where = where  # "<file>: /runs"

    def __missing__(self, name: str):
        raise SchemaError(f"{self.where}/{name}: expected the dataset, found none")


def read_table(group: h5py.Group, n: int | None = None) -> Table:
    if n is None:
        n = committed_rows(group)
    out = Table({name: _column(ds, n) for name, ds in group.items() if isinstance(ds, h5py.Dataset)},
                f"{group.file.filename}: {group.name}")
    optional = OPTIONAL_COLUMNS.get(group.name.rsplit("/", 1)[-1], {}) if group.name.count("/") == 1 else {}
    for name, default in optional.items():
        col = out.get(name)
        if col is None or len(col) < n:
            have = [] if col is None else list(col)
            out[name] = np.array(have + [default] * (n - len(have)), dtype=object)
    return out


def _select(table: dict, mask: np.ndarray) -> dict:
    rows = {k: v[mask] for k, v in table.items()}
    return Table(rows, table.where) if isinstance(table, Table) else rows


def _attr_str(v) -> str:
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    if isinstance(v, np.generic):
        return str(v.item())
    return str(v)


def _int_attr(value, where: str) -> int:
    """An integer attribute, or a SchemaError naming it (a string there raised ValueError)."""
    try:
        if isinstance(value, (bytes, str)) or np.ndim(value) != 0 or float(value) != int(value):
            raise ValueError
        return int(value)
    except (TypeError, ValueError, OverflowError):
        raise SchemaError(f"{where}: expected an integer, found {value!r}") from None


def _open(path: str) -> h5py.File:
    """h5py.File(path, "r"), with a SchemaError naming the file for what is no HDF5 file (h5py said
    "Unable to open file (file signature not found)" without the name)."""
    try:
        return h5py.File(path, "r")
    except FileNotFoundError:
        raise
    except OSError as e:
        # A writer's lock on a good file is not damage: its own error passes on (report.py names it).
        if os.path.isfile(path) and "lock" not in str(e).lower():
            raise SchemaError(f"{path}: expected an HDF5 file written by SpecLab, found one h5py cannot open "
                              f"({' '.join(str(e).split())})") from None
        raise


class Experiment:
    def __init__(self, path):
        path = os.fsdecode(os.fspath(path))  # a pathlib.Path or bytes: `path + ".journal"` raised TypeError
        self.path = path
        recover_journal(path)
        with _open(path) as f:
            if "schema_version" not in f.attrs:
                raise SchemaError(f"{path}: expected root attribute schema_version, found none "
                                  "(not a SpecLab experiment file)")
            version = _int_attr(f.attrs["schema_version"], f"{path}: root attribute schema_version")
            if version != SCHEMA_VERSION:
                raise SchemaError(f"{path}: expected schema_version {SCHEMA_VERSION}, found {version}")
            for name in ("runs", "steps", "positions", "tokens", "points", "prompts", "methods"):
                if name not in f:
                    raise SchemaError(f"{path}: expected table /{name}, found none")
            self.attrs = {k: _attr_str(v) for k, v in f.attrs.items()}
            self.config_yaml = f["config_yaml"].asstr(errors="replace")[()] if "config_yaml" in f else ""
            # Every effective setting plus a `runtime` section (threads, model file, ...); "" in
            # files written before /resolved_config existed.
            self.resolved_config = f["resolved_config"].asstr(errors="replace")[()] if "resolved_config" in f else ""
            self.points = read_table(f["points"])
            self.point_values = read_table(f["point_values"]) if "point_values" in f else {}
            self.prompts = read_table(f["prompts"])
            self.methods = list(read_table(f["methods"])["name"])
            self.runs = read_table(f["runs"])
            n_runs = len(self.runs["run_id"])
            if not np.array_equal(self.runs["run_id"], np.arange(n_runs)):
                raise SchemaError(f"{path}: /runs/run_id: expected 0..{n_runs - 1} in order")
            self.steps = self._child(f["steps"], n_runs)
            self.positions = self._child(f["positions"], n_runs)
            self.tokens = self._child(f["tokens"], n_runs)
            self.summary = None
            if "summary" in f:
                g = f["summary"]
                self.summary = {k: read_table(g[k]) for k in ("overall", "by_category", "positions") if k in g}
            self.equivalence_path = "equivalence" if "equivalence" in f else None

    @staticmethod
    def _child(group: h5py.Group, n_runs: int) -> dict:
        t = read_table(group)
        ids = t["run_id"]
        return _select(t, (ids >= 0) & (ids < n_runs))

    @property
    def n_runs(self) -> int:
        return len(self.runs["run_id"])

    def point_label(self, point: int) -> str:
        labels = self.points.get("label")
        if labels is not None and 0 <= point < len(labels) and labels[point]:
            return str(labels[point])
        return f"#{point}"

    def point_values_of(self, point: int) -> dict:
        pv = self.point_values
        if not pv:
            return {}
        mask = pv["point"] == point
        return dict(zip(pv["key"][mask], pv["value"][mask]))

    def run_tokens(self, run_id: int) -> np.ndarray:
        mask = self.tokens["run_id"] == run_id
        order = np.argsort(self.tokens["index"][mask], kind="stable")
        return self.tokens["token"][mask][order]


# ---- statistics (the definitions of framework/io/experiment_summary.h) --------------------------

def wilson(successes: int, trials: int, z: float = Z95):
    """(rate, lo, hi) of the Wilson score interval; NaNs for no trials."""
    if trials <= 0:
        return (math.nan, math.nan, math.nan)
    n = float(trials)
    p = successes / n
    z2 = z * z
    denom = 1.0 + z2 / n
    center = (p + z2 / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / denom
    return (p, max(0.0, center - half), min(1.0, center + half))


def leviathan_speedup(alpha: float, gamma: int, c: float) -> float:
    """(1 - alpha^(gamma+1)) / ((1 - alpha)(gamma c + 1)), exact at alpha = 1."""
    if math.isnan(alpha) or math.isnan(c):
        return math.nan
    return sum(alpha ** i for i in range(gamma + 1)) / (gamma * c + 1.0)


def leviathan_mixture(alpha: float, steps_by_gamma: dict, c: float) -> tuple[float, float]:
    """For steps that drafted different numbers of tokens (steps_by_gamma[k] steps drafted k):
    Leviathan et al.'s expected tokens per step and time per step in AR decode steps,
    (sum_k n_k (1 + alpha + ... + alpha^k) / S, sum_k n_k (k c + 1) / S). Their ratio is the
    predicted speedup (framework/io/experiment_summary.h: leviathan_speedup_mixed)."""
    steps = sum(steps_by_gamma.values())
    if steps == 0 or math.isnan(alpha) or math.isnan(c):
        return math.nan, math.nan
    tokens = sum(n * sum(alpha ** i for i in range(k + 1)) for k, n in steps_by_gamma.items())
    time = sum(n * (k * c + 1.0) for k, n in steps_by_gamma.items())
    return tokens / steps, time / steps


def _ratio(a: float, b: float) -> float:
    return a / b if b > 0 else math.nan


def compute_summary(exp: Experiment) -> dict:
    """The /summary tables recomputed from the runs (for files without /summary, e.g. a run that
    was interrupted and never resumed). Same columns as the file's summary (a subset)."""
    runs, steps = exp.runs, exp.steps
    cols = ["point", "category", "method", "drafter", "gamma", "n_runs", "n_steps", "drafted", "accepted",
            "examined", "alpha", "alpha_lo", "alpha_hi", "tau", "cost_ratio", "speedup", "predicted_speedup",
            "efficiency", "draft_seconds", "verify_seconds", "accept_seconds", "kv_seconds", "other_seconds",
            "lossless"]
    pcols = ["point", "category", "method", "pos", "trials", "successes", "alpha", "alpha_lo", "alpha_hi"]
    out = {"overall": {c: [] for c in cols}, "by_category": {c: [] for c in cols}, "positions": {c: [] for c in pcols}}
    pos_by_category: dict[str, list] = {c: [] for c in pcols}
    steps_by_run: dict[int, list[int]] = {}
    for i, rid in enumerate(steps["run_id"]):
        steps_by_run.setdefault(int(rid), []).append(i)
    categories = sorted(set(runs["category"]))
    methods = list(exp.methods) + [m for m in dict.fromkeys(runs["method"]) if m not in exp.methods]
    for point in sorted(set(int(p) for p in runs["point"])):
        ar = {}
        for i in range(exp.n_runs):
            if runs["point"][i] == point and runs["method"][i] == "ar":
                ar[(int(runs["prompt"][i]), int(runs["repeat"][i]))] = i
        for method in methods:
            if method == "ar":
                continue
            sel = [i for i in range(exp.n_runs) if runs["point"][i] == point and runs["method"][i] == method]
            if not sel:
                continue
            # None: all prompts (the overall table). "" is a category of its own here: the
            # prompts that have none (inline prompts, JSONL without category_field).
            for category in [None] + categories:
                sub = [i for i in sel if category is None or runs["category"][i] == category]
                if not sub:
                    continue
                drafted = accepted = examined = emitted = n_steps = 0
                ci_accepted = ci_examined = 0  # independent runs only (alpha's interval, positions)
                by_k: dict[int, int] = {}
                draft_time = ar_decode = spec_wall = ar_wall = 0.0
                ar_fw = spec_tok = ar_tok = 0
                pos_t: list[int] = []
                pos_h: list[int] = []
                checked = failed = 0
                for i in sub:
                    if runs["lossless"][i] >= 0:
                        checked += 1
                        failed += int(runs["lossless"][i] == 0)
                    # Greedy repeats decode the same tokens again (for timing): only repeat 0's
                    # steps are trials (experiment_summary.h, independent_trials).
                    independent = not (int(runs["greedy"][i]) and int(runs["repeat"][i]) > 0)
                    for s in steps_by_run.get(i, []):
                        k, n = int(steps["drafted"][s]), int(steps["accepted"][s])
                        n_steps += 1
                        by_k[k] = by_k.get(k, 0) + 1
                        drafted += k
                        accepted += n
                        emitted += n + 1
                        examined += min(n + 1, k)
                        draft_time += float(steps["draft_seconds"][s])
                        if not independent:
                            continue
                        ci_accepted += n
                        ci_examined += min(n + 1, k)
                        while len(pos_t) < k:
                            pos_t.append(0)
                            pos_h.append(0)
                        for j in range(min(k, n + 1)):
                            pos_t[j] += 1
                            pos_h[j] += int(j < n)
                    key = (int(runs["prompt"][i]), int(runs["repeat"][i]))
                    if key in ar:
                        a = ar[key]
                        # decode phase: prompt processing (the target's prefill, a draft model's) excluded
                        spec_wall += float(runs["wall_seconds"][i]) - float(runs["prefill_seconds"][i])
                        ar_wall += float(runs["wall_seconds"][a]) - float(runs["prefill_seconds"][a])
                        ar_decode += float(runs["decode_seconds"][a])
                        ar_fw += max(0, int(runs["target_forwards"][a]) - _turns(runs, a))
                        spec_tok += max(0, int(runs["n_generated"][i]) - _turns(runs, i))
                        ar_tok += max(0, int(runs["n_generated"][a]) - _turns(runs, a))
                gamma = int(runs["gamma"][sub[0]])
                alpha = wilson(ci_accepted, ci_examined)
                c = _ratio(_ratio(draft_time, drafted), _ratio(ar_decode, ar_fw))
                # per decoded token on both sides (sampled pairs stop at different lengths)
                speedup = _ratio(_ratio(ar_wall, ar_tok), _ratio(spec_wall, spec_tok))
                tau_l, cost_l = leviathan_mixture(alpha[0], by_k, c)
                predicted = _ratio(tau_l, cost_l) if by_k else leviathan_speedup(alpha[0], gamma, c)
                row = dict(point=point, category=category or "", method=method, drafter=runs["drafter"][sub[0]],
                           gamma=gamma, n_runs=len(sub), n_steps=n_steps, drafted=drafted, accepted=accepted,
                           examined=examined, alpha=alpha[0], alpha_lo=alpha[1], alpha_hi=alpha[2],
                           tau=_ratio(emitted, n_steps), cost_ratio=c, speedup=speedup,
                           predicted_speedup=predicted, efficiency=_ratio(speedup, predicted),
                           lossless=-1 if checked == 0 else int(failed == 0))
                for part in ("draft", "verify", "accept", "kv", "other"):
                    row[f"{part}_seconds"] = float(sum(runs[f"{part}_seconds"][i] for i in sub))
                table = out["overall"] if category is None else out["by_category"]
                for col in cols:
                    table[col].append(row[col])
                # the rows over all prompts first, then the by-category rows, as the file's
                # /summary/positions (docs/hdf5-schema.md; until 2026-12-06 they interleaved here)
                ptable = out["positions"] if category is None else pos_by_category
                for j, (t, h) in enumerate(zip(pos_t, pos_h)):
                    w = wilson(h, t)
                    for col, v in zip(pcols, (point, category or "", method, j, t, h, w[0], w[1], w[2])):
                        ptable[col].append(v)
    for col in pcols:
        out["positions"][col].extend(pos_by_category[col])
    return {name: {k: np.array(v, dtype=object if k in ("category", "method", "drafter") else None)
                   for k, v in t.items()} for name, t in out.items()}


def efficiency_decomposition(exp: Experiment, by_category: bool = False) -> list[dict]:
    """Where the gap between measured and predicted speedup comes from, per (point, method).

    Over the decode phase, with A = AR seconds per decoded token on the same prompts and S the
    speculative steps (one target forward each), measured speedup ~= tau / cost, where
    cost = (verify + draft + other) / S / A is a step's wall time in AR decode steps. Leviathan et
    al. (2023) assume tau = (1 - alpha^(k+1)) / (1 - alpha) for a step of k drafts, each accepted
    with probability alpha, and cost = k c + 1 (a verification costs one decode step); over the
    steps' own k (a schedule or a threshold varies it), tau_Leviathan and cost_Leviathan are their
    means (leviathan_mixture). So efficiency ~= tau_factor * cost_factor with
    tau_factor = tau / tau_Leviathan and cost_factor = cost_Leviathan / cost."""
    runs, steps = exp.runs, exp.steps
    summary = compute_summary(exp)["by_category" if by_category else "overall"]
    steps_by_run: dict[int, list[int]] = {}
    for i, rid in enumerate(steps["run_id"]):
        steps_by_run.setdefault(int(rid), []).append(i)
    out = []
    for j in range(len(summary["point"])):
        point, method = int(summary["point"][j]), str(summary["method"][j])
        category = str(summary["category"][j]) if by_category else ""
        ar = {(int(runs["prompt"][i]), int(runs["repeat"][i])): i for i in range(exp.n_runs)
              if runs["point"][i] == point and runs["method"][i] == "ar"}
        n_steps = with_draft = drafted = emitted = 0
        by_k: dict[int, int] = {}
        verify = draft = wall = ar_decode = 0.0
        ar_tokens = 0
        for i in range(exp.n_runs):
            key = (int(runs["prompt"][i]), int(runs["repeat"][i]))
            if runs["point"][i] != point or runs["method"][i] != method or key not in ar:
                continue
            if by_category and runs["category"][i] != category:
                continue
            a = ar[key]
            for s in steps_by_run.get(i, []):
                k = int(steps["drafted"][s])
                by_k[k] = by_k.get(k, 0) + 1
                n_steps += 1
                with_draft += int(k > 0)
                drafted += k
                emitted += int(steps["accepted"][s]) + 1
                verify += float(steps["verify_seconds"][s])
                draft += float(steps["draft_seconds"][s])
            wall += float(runs["wall_seconds"][i]) - float(runs["prefill_seconds"][i])
            ar_decode += float(runs["decode_seconds"][a])
            ar_tokens += max(0, int(runs["target_forwards"][a]) - _turns(runs, a))
        per_tok = _ratio(ar_decode, ar_tokens)
        unit = n_steps * per_tok if n_steps > 0 else math.nan
        alpha, gamma, c = float(summary["alpha"][j]), int(summary["gamma"][j]), float(summary["cost_ratio"][j])
        tau = _ratio(emitted, n_steps)
        tau_l, cost_l = leviathan_mixture(alpha, by_k, c)
        v, d = _ratio(verify, unit), _ratio(draft, unit)
        o = _ratio(wall - verify - draft, unit)
        cost = v + d + o
        out.append(dict(point=point, category=category, method=method, gamma=gamma, steps=n_steps,
                        draft_steps=_ratio(with_draft, n_steps), mean_k=_ratio(drafted, n_steps),
                        tau=tau, tau_leviathan=tau_l, verify_cost=v, draft_cost=d, other_cost=o, cost=cost,
                        cost_leviathan=cost_l, tau_over_cost=_ratio(tau, cost),
                        tau_factor=_ratio(tau, tau_l), cost_factor=_ratio(cost_l, cost),
                        speedup=float(summary["speedup"][j]), efficiency=float(summary["efficiency"][j])))
    return out
