#!/usr/bin/env python3
"""Commit cost and peak RSS of `speclab run` against the number of prompt-runs in the file.

    /usr/bin/python3 scripts/commit_cost.py [SPECLAB] [N ...]     (default build/speclab 1000 10000)

For each N it runs configs/tiny_stories.yaml (stories260K; 18 prompt-runs per repeat, so
repeats = ceil(N / 18)) with generation.max_new_tokens=8, time-stamps each progress line
("[k/N] ... in X s") as it arrives, and takes per prompt-run: gap between consecutive lines
minus the decode time the line reports = the commit (HDF5 write) plus the loop's bookkeeping,
and the commit alone as the line reports it ("; commit X ms, cpu Y ms": Hdf5Recorder::append,
wall time and the thread's CPU time, which other processes on a shared machine do not inflate).
Prints one table row per N: the medians over the first and the last 100 prompt-runs,
the file size, the process's peak RSS while it records prompt-runs (VmHWM from /proc when the
next-to-last progress line arrives, before the end-of-run summary reads every record back), its peak
RSS over the whole run (getrusage of the child) and the run's wall time. Commit cost or memory
that grows with the file shows as last >> first, or as a sweep RSS that grows with N.
"""
import math
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
speclab = sys.argv[1] if len(sys.argv) > 1 else os.path.join(root, "build", "speclab")
sizes = [int(x) for x in sys.argv[2:]] or [1000, 10000]
line_re = re.compile(r"^\[(\d+)/(\d+)\] .* in ([0-9.]+) s;.*?(?:; commit ([0-9.]+) ms, cpu ([0-9.]+) ms)?$")

print("| prompt-runs | file | commit CPU, first 100 (median ms) | last 100 | commit wall, first 100 | last 100 "
      "| commit+bookkeeping wall, first 100 | last 100 | peak RSS, sweep | peak RSS, whole run | run time |")
print("|---|---|---|---|---|---|---|---|---|---|---|")


def vm_hwm_kib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


for n in sizes:
    repeats = math.ceil(n / 18)
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "cost.h5")
        cmd = [speclab, "run", os.path.join(root, "configs", "tiny_stories.yaml"), "--set", f"repeats={repeats}",
               "--set", "generation.max_new_tokens=8", "--set", "generation.ignore_eos=true",
               "--output", out, "--no-report", "--threads", "1"]
        before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        t_start = time.monotonic()
        p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        stamps, commits, cpus = [], [], []
        sweep_hwm = 0
        for line in p.stderr:
            m = line_re.match(line)
            if m:
                stamps.append((time.monotonic(), float(m.group(3))))
                if m.group(4) is not None:
                    commits.append(float(m.group(4)))
                    cpus.append(float(m.group(5)))
                if int(m.group(1)) == int(m.group(2)) - 1:  # before the last: the summary has not begun
                    sweep_hwm = vm_hwm_kib(p.pid)
        if p.wait() != 0:
            sys.exit(f"commit_cost: {' '.join(cmd)} failed")
        wall = time.monotonic() - t_start
        rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # KiB, max over children so far
        gaps = [(t1 - t0) - w1 for (t0, _), (t1, w1) in zip(stamps, stamps[1:])]
        first, last = gaps[:100], gaps[-100:]
        size = os.path.getsize(out)
        note = "" if rss > before else " (<= an earlier row's)"
        med = lambda xs: f"{statistics.median(xs):.2f}" if xs else "n/a"  # noqa: E731
        print(f"| {len(stamps)} | {size / 1e6:.1f} MB | {med(cpus[:100])} | {med(cpus[-100:])} | "
              f"{med(commits[:100])} | {med(commits[-100:])} | "
              f"{1e3 * statistics.median(first):.2f} | "
              f"{1e3 * statistics.median(last):.2f} | {sweep_hwm / 1024:.0f} MB | {rss / 1024:.0f} MB{note} | "
              f"{wall / 60:.1f} min |", flush=True)
