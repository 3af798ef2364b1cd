#!/usr/bin/env bash
# One prepared GPU check (issue 24): run as-is on a machine with a CUDA device, in under 8 min.
#
#   benchmarks/gpu_check.sh [OUT.md]      (default: gpu_check.md; PYTHON=... picks the interpreter)
#
# Writes one markdown section to paste into benchmarks/RESULTS.md and stops at the first thing
# that is not as expected (set -e; every step says what it checks). Steps on CUDA:
#   1. the device (nvidia-smi: name, driver, clocks, throttle reasons, other processes) and one
#      NVML reading through aitune_fp.measure.telemetry (pynvml must import: extra "nvml");
#   2. pytest -m gpu (every gpu-marked test must pass: none may skip; among them the NVML
#      telemetry of a real tune and cache="cold" on the real L2);
#   3. the main job on CUDA, decided on the host clock and again on the device clock, with both
#      clocks, the threads, the quality flags and the telemetry (device_isolation, SM clock
#      range, temperature, power) of each candidate from the JSON-lines log;
#   4. the main job again with --isolation process (CUDA workers: started, timed, handed back);
#   5. decision_quality.py on CUDA: identical, 1.03x, 1.1x and 2x, 10 decisions each.
# Without CUDA it says so at the top of the section and runs only what a CPU can check: the
# fake-CUDA-timer, fake-NVML telemetry and thread tests, the list of gpu tests that would run,
# and the main job on CPU with --threads 1 (the thread and load fields checked, telemetry
# "unknown"). cache="cold" has no tune flag yet: only its gpu test runs it.
#
# KEEP_GOING=1 records a failed step and goes on (for a one-shot lease on a lent GPU machine);
# every step runs under `timeout` (STEP_SCALE=0.5 halves each step's limit); GPU_CHECK_WORK=DIR
# keeps the tunes' JSON-lines logs there; PYTEST_ARGS adds to the gpu tests' pytest line;
# DQ_REPEATS=0 leaves decision_quality.py out.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
[ -x "$PY" ] || PY=python3
OUT=${1:-gpu_check.md}
WORK=${GPU_CHECK_WORK:-$(mktemp -d -t aitune_fp-gpu-check-XXXXXX)}
mkdir -p "$WORK"
START=$(date +%s)
FAILED=0
# gpu-marked tests live in these files (collecting only them needs no test-only extra beyond
# jsonschema and hypothesis)
GPU_TESTS=$(grep -l "mark.gpu" tests/test_*.py)

say() { printf '%s\n' "$*" | tee -a "$OUT"; }
fail() {
    say "**FAILED**: $*"; echo "gpu_check: FAILED: $*" >&2
    FAILED=1; [ "${KEEP_GOING:-0}" = 1 ] || exit 1
}
# run "$@" for at most $1 seconds (scaled by STEP_SCALE)
limit() {
    local s; s=$(awk -v s="$1" -v k="${STEP_SCALE:-1}" 'BEGIN { printf "%d", s * k }'); shift
    timeout --kill-after=10 "$s" "$@"
}
block() { say '```'; "$@" 2>&1 | tee -a "$OUT"; local rc=${PIPESTATUS[0]}; say '```'; return "$rc"; }

# the candidates' figures, threads and flags from a tune's JSON-lines log, as markdown rows
summarise() {
    "$PY" - "$1" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1], encoding="utf-8") if l.strip()]
started = [r for r in rows if r["event"].endswith(".started")]
if not started or "threads" not in started[-1]:
    sys.exit("started event without the thread fields")
s = started[-1]
print(f"threads {s['threads']} intra-op, {s['interop_threads']} inter-op, OMP "
      f"{s['omp_num_threads']}, {s['cpus']} cpus, load {s['load_avg_1m']}")
print("| candidate | verdict | clock | estimate | host est. | device est. | isolation "
      "| SM MHz | max °C | max W | flags |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
from aitune_fp.core.results import flat
measured = [  # a result's parts read flat, as the schema-1 events held them
    {**r, **flat(r["result"])} if "result" in r else r
    for r in rows if r["event"].endswith(".candidate_measured")
]
if not measured:
    sys.exit("no candidate was measured")
for r in measured:
    if r.get("threads") is None:
        sys.exit(f"{r['backend_description']}: no thread figures")
    if r.get("decision") == "statistical" and r.get("device_isolation") is None:
        sys.exit(f"{r['backend_description']}: no telemetry fields (device_isolation)")
    f = lambda v: "—" if v is None else f"{v:.3f}"
    g = lambda v: "—" if v is None else f"{v:g}"
    low, high = r.get("sm_clock_mhz_min"), r.get("sm_clock_mhz_max")
    mhz = "—" if high is None else f"{g(low)}–{g(high)}"
    print(f"| {r['backend_description']} | {r['verdict']} | {r.get('clock')} | "
          f"{f(r.get('estimate'))} | {f(r.get('host_estimate'))} | "
          f"{f(r.get('device_estimate'))} | {r.get('device_isolation')} | {mhz} | "
          f"{g(r.get('temperature_c_max'))} | {g(r.get('power_w_max'))} | "
          f"{', '.join(r['flags']) or 'ok'} |")
PY
}

: > "$OUT"
CUDA=$("$PY" -c 'import torch; print(int(torch.cuda.is_available()))') \
    || fail "cannot import torch with $PY"
say "## GPU check, $(date -u '+%Y-%m-%d %H:%M UTC'), $(hostname)"
say ""
if [ "$CUDA" != 1 ]; then
    say "**No CUDA device here** (torch.cuda.is_available() is False): nothing was measured on a"
    say "GPU. Only the CPU-checkable parts ran; run this script again on a CUDA machine."
    say ""
    say "### CPU-checkable parts"
    block "$PY" -m pytest -q -p no:cacheprovider tests/test_two_clocks.py \
        tests/test_cuda_workers.py tests/test_threads_load.py tests/test_telemetry.py tests/test_cold_cache.py \
        || fail "fake-CUDA-timer / fake-NVML / thread tests"
    say "gpu tests that would run on CUDA:"
    block "$PY" -m pytest -q -p no:cacheprovider -m gpu --collect-only || fail "collecting gpu tests"
    "$PY" -m aitune_fp tune --device cpu --threads 1 --backends eager --looks 10,20 \
        --max-seconds 5 --quiet --json-log "$WORK/cpu.jsonl" --cache-dir "$WORK/cpu" \
        > "$WORK/cpu.txt" || fail "the main job on CPU"
    grep -q '^CPU threads: 1 intra-op' "$WORK/cpu.txt" || fail "the table header has no thread line"
    say "main job on CPU (--threads 1, eager against eager):"
    block summarise "$WORK/cpu.jsonl" || fail "the CPU job's events"
    grep -q '"device_isolation": "unknown"' "$WORK/cpu.jsonl" \
        || fail "telemetry on CPU is not \"unknown\""
    say ""
    say "cache=\"cold\" (no tune flag yet): its gpu test runs it on CUDA."
    say "CPU-only check done in $(( $(date +%s) - START )) s; CUDA: not run."
    exit 0
fi

say "### Device"
block nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu,power.draw,clocks_throttle_reasons.active --format=csv \
    || fail "nvidia-smi"
block nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv || true
block nvidia-smi -q -d PERFORMANCE || true
say "one NVML reading of cuda:0 through aitune_fp.measure.telemetry (needs the nvml extra):"
block "$PY" - <<'PY' || fail "pynvml does not import, or NVML did not read cuda:0 (pip install nvidia-ml-py)"
import pynvml  # noqa: F401  (the extra "nvml"; fails here when it is missing)
import torch
from aitune_fp.profiling.timers import CudaTimer
from aitune_fp.measure.telemetry import NvmlSampler, open_sampler
timer = CudaTimer(0)
torch.ones(1, device=timer.device).sum().item()  # a context on the device, as while timing
sampler = open_sampler(timer)
if not isinstance(sampler, NvmlSampler):
    raise SystemExit("NVML did not find cuda:0")
print(sampler.sample())
sampler.close()
PY
say ""
say "### pytest -m gpu"
# shellcheck disable=SC2086  # GPU_TESTS is a list of file names
block limit 240 "$PY" -m pytest -q -p no:cacheprovider -m gpu -rs --durations=5 $GPU_TESTS \
    ${PYTEST_ARGS:-} \
    || fail "gpu tests"
if grep -q "SKIPPED" "$OUT"; then fail "a gpu test skipped on a CUDA machine"; fi
for clock in host device; do
    say ""
    say "### Main job on CUDA, --clock $clock"
    limit 200 "$PY" -m aitune_fp tune --device cuda --clock "$clock" --max-seconds 10 --quiet \
        --json-log "$WORK/$clock.jsonl" --cache-dir "$WORK/$clock" > "$WORK/$clock.txt" \
        || fail "the main job on CUDA (--clock $clock)"
    block cat "$WORK/$clock.txt"
    block summarise "$WORK/$clock.jsonl" || fail "the CUDA job's events (--clock $clock)"
    grep -q '"device_estimate": [0-9]' "$WORK/$clock.jsonl" \
        || fail "no device time recorded on CUDA (--clock $clock)"
done
say ""
say "### Main job on CUDA in workers (--isolation process), beside the in-process host run above"
limit 200 "$PY" -m aitune_fp tune --device cuda --isolation process --max-seconds 10 --quiet \
    --json-log "$WORK/workers.jsonl" --cache-dir "$WORK/workers" > "$WORK/workers.txt" \
    || fail "the main job on CUDA in workers"
block cat "$WORK/workers.txt"
block summarise "$WORK/workers.jsonl" || fail "the CUDA workers job's events"
grep -q '"isolation": "process"' "$WORK/workers.jsonl" \
    || fail "CUDA workers did not run (the header names why)"
[ "${DQ_REPEATS:-10}" = 0 ] && { say "Done in $(( $(date +%s) - START )) s (decision_quality not run)."; exit "$FAILED"; }
say ""
say "### decision_quality.py on CUDA (identical, 1.03x, 1.1x, 2x; ${DQ_REPEATS:-10} decisions each)"
block limit 150 "$PY" benchmarks/decision_quality.py --device cuda --cases A/A 1.03x 1.10x 2.00x \
    --repeats "${DQ_REPEATS:-10}" --reference-pairs 200 --out "$WORK/dq.md" \
    || fail "decision_quality on CUDA"
say ""
say "cache=\"cold\" (no tune flag yet) ran only in its gpu test."
say "Done in $(( $(date +%s) - START )) s$( [ "$FAILED" = 1 ] && echo ', with failed steps')."
exit "$FAILED"
