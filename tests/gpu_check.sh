#!/usr/bin/env bash
# The checks to run whenever a CUDA GPU is at hand (issue 22): the gpu-marked tests (what
# `make test-gpu` runs) and bench-scale's GPU section, with the GPU, torch and CUDA named.
#   make gpu-check                                   (this checkout's .venv)
#   bash .gpu/run.sh bash tests/gpu_check.sh         (an offline GPU machine: ../shared/gpu/bundle.sh)
# Results: $OUT (default: benchmarks/results)/gpu_check.log, gpu_conv_probe.json,
# gpu_round_profile.json and gpu_scale.json. ROUNDS / WARMUP size the benchmark (default 2 / 1:
# a few minutes on an H100); BENCH=0 runs the tests only, PROBE=0 / PROFILE=0 skip the convolution probe /
# the round profile.
set -u
cd "$(dirname "$0")/.."
py=${PYTHON:-python3}
case $py in */*) py=$(cd "$(dirname "$py")" && pwd)/$(basename "$py") ;; esac  # for benchmarks/
out=$(realpath -m "${OUT:-benchmarks/results}")
mkdir -p "$out"
exec > >(tee "$out/gpu_check.log") 2>&1
nvidia-smi -L || true
"$py" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda,
      torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'NO CUDA GPU')"
status=0
# where the batched ConvNet step spends its time, per kernel option (one JSON line)
if [ "${PROBE:-1}" != 0 ]; then
  (cd benchmarks && "$py" gpu_conv_probe.py &&
   CLIENTS=1000 BATCH=20 STEPS=10 "$py" gpu_conv_probe.py) | tee "$out/gpu_conv_probe.json" ||
    status=1
fi
# where a batched round's wall time goes, phase by phase ((a), (b), (c'); one JSON line each)
if [ "${PROFILE:-1}" != 0 ]; then
  (cd benchmarks && "$py" gpu_round_profile.py) | tee "$out/gpu_round_profile.json" || status=1
fi
# the gpu-marked test files only: the rest need packages a bare GPU machine may lack
"$py" -m pytest -q -rs -p no:cacheprovider -m gpu \
    $(grep -rl "mark.gpu" tests --include='test_*.py') || status=1
if [ "${BENCH:-1}" != 0 ]; then
  (cd benchmarks && ROUNDS=${ROUNDS:-2} WARMUP=${WARMUP:-1} "$py" -c "
import json, sys, tempfile
from pathlib import Path
import bench_scale_gpu
section = bench_scale_gpu.gpu_section(Path(tempfile.mkdtemp(prefix='gpu-check-')))
Path(sys.argv[1]).write_text(json.dumps(section, indent=1))
print('\\n'.join(bench_scale_gpu.render(section)))" "$out/gpu_scale.json") || status=1
fi
exit $status
