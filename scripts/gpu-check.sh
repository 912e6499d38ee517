#!/usr/bin/env bash
# gpu-check.sh: check gpupool's node agent on a machine with an NVIDIA GPU.
#
#   scripts/gpu-check.sh | tee gpu-check.out      (then paste the output into docs/gpu-check.md)
#
# 1. The inventory the agent sees through NVML (and what it would publish on the Node).
# 2. With NVIDIA MPS and the caps gpupool's own isolation code computes for a share:
#    a process cannot allocate past its memory cap; two shares of 25% and 75% of the SMs get
#    roughly that split of the throughput; NVML telemetry attributes memory and SM use to the
#    right process.
#
# It never changes the GPU's settings (no compute-mode, MIG, clock or reset commands). It
# starts its own MPS control daemon in a temporary folder only when none runs, and stops it
# on exit. Needs: nvidia-smi, nvidia-cuda-mps-control, the repo's .venv (make venv) and
# PyTorch with CUDA in it (pip install torch) for part 2.
# Environment: PYTHON (default .venv/bin/python), GPU (index, default 0), SECONDS_PER_RUN (20).
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-$REPO/.venv/bin/python}
GPU=${GPU:-0}
RUN_SECONDS=${SECONDS_PER_RUN:-20}
WORK=$(mktemp -d /tmp/gpupool-gpu-check.XXXXXX)
MPS_STARTED=0
export CUDA_MPS_PIPE_DIRECTORY=$WORK/mps/pipe CUDA_MPS_LOG_DIRECTORY=$WORK/mps/log
CHILDREN=()

cleanup() {
    for pid in "${CHILDREN[@]}"; do kill "$pid" 2>/dev/null || true; done
    if [ "$MPS_STARTED" = 1 ]; then
        echo quit | nvidia-cuda-mps-control || true
        echo "stopped the MPS control daemon this script started"
    fi
    rm -rf "$WORK"
}
trap cleanup EXIT

echo "# gpupool gpu-check, $(date -u +%Y-%m-%dT%H:%M:%SZ), commit $(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo unknown)"
echo
echo "## 1. Machine"
nvidia-smi --query-gpu=index,uuid,name,memory.total,mig.mode.current,compute_mode,driver_version \
    --format=csv
echo
echo "## 2. Inventory the agent sees (gpupool.agent.nvml.RealNvml) and would publish"
"$PY" - <<'PYEOF'
from gpupool.agent.inventory import publication
from gpupool.agent.nvml import RealNvml

nvml = RealNvml()
devices = nvml.devices()
for gpu in devices:
    print(f"GPU {gpu.index}: {gpu.uuid} model={gpu.model} memory={gpu.memory_mib} MiB "
          f"minor={gpu.minor} mig={gpu.mig_enabled} healthy={gpu.healthy}")
    for mig in gpu.mig:
        print(f"    MIG {mig.uuid} profile={mig.profile} memory={mig.memory_mib} MiB")
published = publication(devices, 4)
print("labels:", published.labels)
print("annotations:", published.annotations)
print("allocatable (maxPodsPerGPU 4):", published.allocatable)
for usage in nvml.usage():
    print(f"usage {usage.gpu_uuid}: memory used {usage.memory_used_mib} MiB, SM {usage.sm_percent}%, "
          f"{len(usage.processes)} processes")
nvml.close()
PYEOF

echo
echo "## 3. Isolation under MPS with gpupool's caps"
if ! "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
    echo "SKIPPED: PyTorch with CUDA is not installed in $PY (pip install torch), so part 3 did not run."
    exit 2
fi
UUID=$(nvidia-smi --query-gpu=uuid --format=csv,noheader -i "$GPU")
if pgrep -x nvidia-cuda-mps-control >/dev/null; then
    echo "An MPS control daemon already runs: set CUDA_MPS_PIPE_DIRECTORY to its pipe folder and rerun;"
    echo "this script does not touch a daemon it did not start."
    [ -S "${GPUPOOL_MPS_PIPE:-/nonexistent}/control" ] || exit 3
    export CUDA_MPS_PIPE_DIRECTORY=$GPUPOOL_MPS_PIPE
else
    mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
    nvidia-cuda-mps-control -d
    MPS_STARTED=1
    echo "started an MPS control daemon (pipe $CUDA_MPS_PIPE_DIRECTORY)"
fi

# The environment gpupool gives a container with a share: computed by the agent's own code.
caps_env() {  # milli memory_mib -> "K=V" lines
    "$PY" - "$UUID" "$1" "$2" <<'PYEOF'
import sys
from gpupool.agent.grants import ContainerGrant, GpuGrant
from gpupool.agent.isolation import IsolationConfig, edits_for

uuid, milli, memory = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
grant = ContainerGrant("check", "check", "check", "main", (GpuGrant(uuid, 0, milli, memory, exclusive=False),))
for key, value in edits_for(grant, IsolationConfig("mps")).env.items():
    if key != "CUDA_MPS_PIPE_DIRECTORY":  # the daemon's real pipe folder on this host
        print(f"{key}={value}")
PYEOF
}

cat > "$WORK/worker.py" <<'PYEOF'
import os, sys, time
import torch

mode = sys.argv[1]
if mode == "memory":
    cap_mib = int(sys.argv[2])
    block = torch.empty(int(cap_mib * 0.5) * 2**20, dtype=torch.uint8, device="cuda")
    print(f"pid {os.getpid()}: allocated {cap_mib // 2} MiB under a {cap_mib} MiB cap: ok", flush=True)
    try:
        more = torch.empty(cap_mib * 2**20, dtype=torch.uint8, device="cuda")
        print(f"pid {os.getpid()}: FAIL: allocated {cap_mib} MiB more, past the cap", flush=True)
        sys.exit(1)
    except torch.cuda.OutOfMemoryError:
        print(f"pid {os.getpid()}: PASS: allocating {cap_mib} MiB more failed (out of memory)", flush=True)
else:
    start_at, seconds = float(sys.argv[2]), float(sys.argv[3])
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.float16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.float16)
    torch.cuda.synchronize()
    while time.time() < start_at:
        time.sleep(0.01)
    n, t0 = 0, time.time()
    while time.time() - t0 < seconds:
        a @ b
        n += 1
        if n % 20 == 0:
            torch.cuda.synchronize()
    torch.cuda.synchronize()
    print(f"{os.getpid()} {n / (time.time() - t0):.1f}", flush=True)
PYEOF

echo
echo "### 3a. Memory cap: a share with 4096 MiB"
( export $(caps_env 250 4096 | xargs); echo "env: $(caps_env 250 4096 | tr '\n' ' ')"; "$PY" "$WORK/worker.py" memory 4096 ) \
    || echo "FAIL: the memory check did not pass (see above)"

echo
echo "### 3b. Compute shares: 25% and 75% of the SMs, ${RUN_SECONDS}s of fp16 matmuls each, at once"
START=$(( $(date +%s) + 15 ))
( export $(caps_env 250 0 | xargs); exec "$PY" "$WORK/worker.py" compute "$START" "$RUN_SECONDS" > "$WORK/w25.out" ) &
P25=$!; CHILDREN+=("$P25")
( export $(caps_env 750 0 | xargs); exec "$PY" "$WORK/worker.py" compute "$START" "$RUN_SECONDS" > "$WORK/w75.out" ) &
P75=$!; CHILDREN+=("$P75")

echo
echo "### 3c. Telemetry while they run (gpupool.agent.nvml.RealNvml.usage, per PID)"
"$PY" - "$P25" "$P75" "$START" "$RUN_SECONDS" <<'PYEOF'
import sys, time
from gpupool.agent.nvml import RealNvml
from gpupool.agent.telemetry import pod_uid_of

p25, p75, start, seconds = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
names = {p25: "share-25%", p75: "share-75%"}
nvml = RealNvml()
while time.time() < start + 2:
    time.sleep(0.2)
seen = {}
for _ in range(4):
    time.sleep(seconds / 5)
    for usage in nvml.usage():
        for process in usage.processes:
            label = names.get(process.pid, "other")
            seen.setdefault(label, []).append((process.memory_mib, process.sm_percent))
            print(f"  {usage.gpu_uuid} pid {process.pid} ({label}, pod {pod_uid_of(process.pid)}): "
                  f"memory {process.memory_mib} MiB, SM {process.sm_percent}%")
        print(f"  device: memory used {usage.memory_used_mib} MiB, SM {usage.sm_percent}%")
ok = all(label in seen and any(m > 0 for m, _ in seen[label]) for label in names.values())
print("PASS: both shares' processes seen with their memory" if ok else
      "FAIL: a share's process was not attributed (under MPS, NVML may list only the MPS server)")
nvml.close()
PYEOF
wait "$P25" "$P75"
R25=$(cut -d' ' -f2 "$WORK/w25.out"); R75=$(cut -d' ' -f2 "$WORK/w75.out")
echo "share 25%: $R25 matmul/s; share 75%: $R75 matmul/s"
"$PY" -c "r=$R75/$R25; print(f'ratio 75/25 = {r:.2f} (3.0 ideal): ' + ('PASS (within 2-4.5)' if 2 <= r <= 4.5 else 'OUT OF RANGE'))"
