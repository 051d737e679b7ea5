#!/usr/bin/env bash
# Crash-safety test for `speclab run`: SIGKILL at random points of a sweep, again and again.
#
#   scripts/kill_test.sh [SPECLAB] [KILLS] [SEED]      (make kill-test: build/speclab, 20 kills)
#
# It first runs the sweep (configs/tiny_stories.yaml, 3 prompts x 3 methods x 2 gamma values x
# 4 repeats = 72 prompt-runs of 32 tokens) once without interruption as the reference. Then, until
# KILLS processes were killed: start `speclab run --resume` on the same file (which creates it
# when it does not exist), SIGKILL it after a random delay, and check the file:
#   - it opens (h5py, the analysis reader); if it says status complete (the kill landed after the
#     last commit), it must equal the reference run below;
#   - it holds every prompt-run the killed process reported finished (its last "[k/N]" progress
#     line is printed after the run was flushed), each once, with all its tokens;
#   - it holds every prompt-run the file held after the previous kill (nothing lost).
# When a resumed process finishes on its own, the completed file must equal the reference run
# (same keys; same tokens, text, steps and per-position p/q/acceptance; timings aside), and the
# next kill starts a fresh file. Prints the number of kills and exits non-zero on any failure.
set -euo pipefail

SPECLAB=${1:-build/speclab}
KILLS=${2:-20}
SEED=${3:-$(date +%s)}
PY=${SPECLAB_PYTHON:-/usr/bin/python3}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
SPECLAB=$(cd "$(dirname "$SPECLAB")" && pwd)/$(basename "$SPECLAB")
[[ -x $SPECLAB ]] || { echo "kill_test: no speclab binary at $SPECLAB (run make build)" >&2; exit 2; }

WORK=$(mktemp -d "${TMPDIR:-/tmp}/speclab_kill_XXXXXX")
trap 'rm -rf "$WORK"' EXIT
RANDOM=$((SEED % 32768))
echo "kill_test: seed $SEED, $KILLS kills, work dir $WORK"

CONFIG=$ROOT/configs/tiny_stories.yaml
SETS=(--set repeats=4 --set generation.max_new_tokens=32 --set generation.ignore_eos=true)
TOTAL=72

cat > "$WORK/check.py" <<'EOF'
"""check.py MODE FILE [ARGS]: the kill test's checks (h5py, analysis/speclab_h5.py)."""
import sys
sys.path.insert(0, sys.argv[1])
import numpy as np
from speclab_h5 import Experiment

mode, path = sys.argv[2], sys.argv[3]


def fail(msg):
    print(f"kill_test: FAIL: {path}: {msg}")
    sys.exit(1)


def keyed(e):
    out = {}
    for i in range(e.n_runs):
        key = (int(e.runs["point"][i]), int(e.runs["prompt"][i]), str(e.runs["method"][i]), int(e.runs["repeat"][i]))
        if key in out:
            fail(f"prompt-run {key} recorded twice")
        steps = e.steps["run_id"] == i
        pos = e.positions["run_id"] == i
        out[key] = {
            "tokens": e.run_tokens(i).tolist(),
            "n_generated": int(e.runs["n_generated"][i]),
            "text": str(e.runs["text"][i]),
            "lossless": int(e.runs["lossless"][i]),
            "steps": [e.steps[c][steps].tolist() for c in ("step", "drafted", "accepted", "bonus")],
            "positions": [e.positions[c][pos].tolist() for c in ("step", "pos", "p", "q", "accept_prob", "accepted")],
        }
        if len(out[key]["tokens"]) != out[key]["n_generated"]:
            fail(f"prompt-run {key}: {len(out[key]['tokens'])} tokens, expected {out[key]['n_generated']}")
    return out


try:
    exp = Experiment(path)
except Exception as ex:  # noqa: BLE001 - any failure to read is the failure under test
    fail(f"does not open: {type(ex).__name__}: {ex}")
runs = keyed(exp)


def same_as_reference(ref_path):
    ref = keyed(Experiment(ref_path))
    if set(runs) != set(ref):
        fail(f"{len(runs)} prompt-runs, the reference has {len(ref)}; keys differ")
    for k in ref:
        for field in ref[k]:
            a, b = runs[k][field], ref[k][field]
            if field == "positions":  # NaN accept_prob after a rejection compares equal here
                a, b = [np.nan_to_num(np.asarray(x, dtype=float), nan=-1).tolist() for x in a], \
                       [np.nan_to_num(np.asarray(x, dtype=float), nan=-1).tolist() for x in b]
            if a != b:
                fail(f"prompt-run {k}: {field} differs from the uninterrupted run")
    if exp.summary is None:
        fail("no /summary")


if mode == "killed":
    reported, before_file, ref_path = int(sys.argv[4]), sys.argv[5], sys.argv[6]
    if len(runs) < reported:
        fail(f"holds {len(runs)} prompt-runs, the killed process reported {reported} finished")
    before = [tuple(l.split("\t")) for l in open(before_file).read().splitlines() if l]
    for b in before:
        k = (int(b[0]), int(b[1]), b[2], int(b[3]))
        if k not in runs:
            fail(f"prompt-run {k}, present before the kill, is gone")
    with open(before_file, "w") as f:
        for k in sorted(runs):
            f.write("\t".join(map(str, k)) + "\n")
    if exp.attrs.get("status") == "complete":  # killed after its last commit, while exiting
        same_as_reference(ref_path)
        print(f"{len(runs)} complete")
    else:
        print(len(runs))
elif mode == "complete":
    if exp.attrs.get("status") != "complete":
        fail(f"status {exp.attrs.get('status')!r} after the run finished")
    same_as_reference(sys.argv[4])
    print(len(runs))
EOF

check() { "$PY" "$WORK/check.py" "$ROOT/analysis" "$@"; }

echo "kill_test: reference run (uninterrupted)"
t0=$(date +%s%N)
"$SPECLAB" run "$CONFIG" "${SETS[@]}" --output "$WORK/ref.h5" --no-report > "$WORK/ref.out" 2> "$WORK/ref.err" || {
  cat "$WORK/ref.err" >&2; echo "kill_test: FAIL: the reference run failed" >&2; exit 1; }
ref_ms=$(( ($(date +%s%N) - t0) / 1000000 ))
[[ $(check complete "$WORK/ref.h5" "$WORK/ref.h5") == "$TOTAL" ]] || { echo "kill_test: FAIL: reference run incomplete"; exit 1; }
echo "kill_test: reference: $TOTAL prompt-runs in ${ref_ms} ms"

H5=$WORK/killed.h5
: > "$WORK/before.tsv"
kills=0 attempts=0 completed=0 empty_kills=0
while (( kills < KILLS )); do
  attempts=$((attempts + 1))
  (( attempts <= 10 * KILLS + 20 )) || { echo "kill_test: FAIL: $attempts attempts without $KILLS kills"; exit 1; }
  # Uniform over most of an uninterrupted run: startup, file creation, the sweep, the summary.
  delay_ms=$(( 100 + (RANDOM * 32768 + RANDOM) % (ref_ms * 4 / 5) ))
  "$SPECLAB" run "$CONFIG" "${SETS[@]}" --output "$H5" --resume --no-report > "$WORK/run.out" 2> "$WORK/run.err" &
  pid=$!
  sleep "$(printf '%d.%03d' $((delay_ms / 1000)) $((delay_ms % 1000)))"
  if kill -KILL "$pid" 2>/dev/null; then
    set +e; { wait "$pid"; } 2>/dev/null; rc=$?; set -e
    if (( rc != 137 )); then
      # It ended between the liveness check and the kill: treat like a finished run below.
      :
    else
      kills=$((kills + 1))
      reported=$(grep -o '^\[[0-9]*/' "$WORK/run.err" | tail -1 | tr -d '[/' || true)
      reported=${reported:-0}
      if [[ ! -e $H5 ]]; then
        (( reported == 0 )) || { echo "kill_test: FAIL: no file after $reported reported prompt-runs"; exit 1; }
        (( ! $(wc -l < "$WORK/before.tsv") )) || { echo "kill_test: FAIL: the file is gone"; exit 1; }
        empty_kills=$((empty_kills + 1))
        echo "kill_test: kill $kills after ${delay_ms} ms: before the file was created"
        continue
      fi
      have=$(check killed "$H5" "$reported" "$WORK/before.tsv" "$WORK/ref.h5") || { echo "$have"; exit 1; }
      echo "kill_test: kill $kills after ${delay_ms} ms: file holds ${have%% *}/$TOTAL prompt-runs (process reported $reported)"
      if [[ $have == *complete ]]; then
        # Killed after its last commit: the file is complete and equal to the reference.
        completed=$((completed + 1))
        echo "kill_test: (that file was already complete and equals the uninterrupted run; starting over)"
        rm -f "$H5"
        : > "$WORK/before.tsv"
      fi
      continue
    fi
  else
    set +e; wait "$pid"; rc=$?; set -e
  fi
  if (( rc != 0 )); then
    cat "$WORK/run.err" >&2
    echo "kill_test: FAIL: a resumed run exited with code $rc"
    exit 1
  fi
  have=$(check complete "$H5" "$WORK/ref.h5") || { echo "$have"; exit 1; }
  completed=$((completed + 1))
  echo "kill_test: run finished on its own: $have prompt-runs, equal to the uninterrupted run; starting over"
  rm -f "$H5"
  : > "$WORK/before.tsv"
done

# Finish the last interrupted file and compare it too.
"$SPECLAB" run "$CONFIG" "${SETS[@]}" --output "$H5" --resume --no-report > "$WORK/run.out" 2> "$WORK/run.err" || {
  cat "$WORK/run.err" >&2; echo "kill_test: FAIL: the final --resume failed"; exit 1; }
have=$(check complete "$H5" "$WORK/ref.h5") || { echo "$have"; exit 1; }
completed=$((completed + 1))
echo "kill_test: final --resume: $have prompt-runs, equal to the uninterrupted run"
echo "kill_test: PASS: $kills kills ($empty_kills before the file existed), $completed resumed files completed and equal to the reference"
