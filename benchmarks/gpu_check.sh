#!/usr/bin/env bash
# amplint verify on the CUDA paths, in one go, on a machine with an NVIDIA GPU (CI never runs this).
# Real fp16 autocast, the CUDA GradScaler, a NaN case under --nan-guard, and the profiler with
# kernels (when amplint.runtime.profiling is present).  Prints a summary; paste it into BENCHMARKS.md.
#   bash benchmarks/gpu_check.sh
set -u
cd "$(dirname "$0")/.."
PY=${PYTHON:-python}
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
$PY -c "import torch,sys; print('torch', torch.__version__, '| cuda', torch.cuda.is_available(), '|', torch.cuda.get_device_name(0) if torch.cuda.is_available() else '-'); sys.exit(0 if torch.cuda.is_available() else 3)" || { echo "no CUDA device: nothing to check"; exit 3; }

cat > "$OUT/clip.py" <<'PYEOF'
import torch
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1)).cuda()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
scaler = torch.cuda.amp.GradScaler()
for step in range(20):
    x = torch.randn(64, 512, device="cuda")
    with torch.autocast("cuda"):
        out = model(x)
        assert out.dtype == torch.float16
        loss = out.float().pow(2).mean()
    scaler.scale(loss).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()
PYEOF

cat > "$OUT/good.py" <<'PYEOF'
import torch
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1)).cuda()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
scaler = torch.amp.GradScaler("cuda")
for step in range(20):
    x = torch.randn(64, 512, device="cuda")
    with torch.autocast("cuda", dtype=torch.float16):
        loss = model(x).float().pow(2).mean()
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()
PYEOF

cat > "$OUT/nan.py" <<'PYEOF'
import torch
class Blowup(torch.nn.Module):
    def forward(self, x):
        return x * 1e5          # 1e5 > 65504: inf in fp16
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 64), Blowup(), torch.nn.Linear(64, 1)).cuda()
optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
scaler = torch.amp.GradScaler("cuda")
for step in range(10):
    x = torch.randn(32, 64, device="cuda")
    with torch.autocast("cuda", dtype=torch.float16):
        loss = model(x).float().mean()
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()
PYEOF

elapsed() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }'; }  # (no bc on the GPU image)

run() {  # name, expected exit, verify args...
    local name=$1 want=$2; shift 2
    local t0=$EPOCHREALTIME
    $PY -m amplint verify --no-progress --report "$OUT/$name.json" "$@" > "$OUT/$name.txt" 2>&1
    local rc=$?
    local dt=$(elapsed "$t0")
    echo "== $name: exit $rc (want $want), ${dt}s"
    cat "$OUT/$name.txt" | grep -v "^amplint verify \[" | head -12
    [ "$rc" = "$want" ] && echo "   OK" || echo "   MISMATCH"
}
run clip 1 --steps 10 "$OUT/clip.py"
run good 0 --steps 10 "$OUT/good.py"
run nan 1 --nan-guard --steps 6 "$OUT/nan.py"
$PY - "$OUT" <<'PYEOF'
import json, sys
out = sys.argv[1]
clip = json.load(open(f"{out}/clip.json"))
nan = json.load(open(f"{out}/nan.json"))
print("summary:")
for f in clip["findings"]:
    print(f"  clip.py {f['code']}:{f['line']} {f['status']} {json.dumps(f['evidence'])[:160]}")
for r in nan["runtime_findings"]:
    print(f"  nan.py {r['code']}:{r['line']} {r['message']}")
print(f"  device={clip['device']} emulated={clip['emulated']}")
PYEOF
if $PY -c "import amplint.runtime.profiling" 2>/dev/null; then
    run profile 1 --steps 6 --profile "$OUT/trace" "$OUT/clip.py"
    find "$OUT/trace" -name "*.json*" | head -3
    $PY - "$OUT/trace" <<'PYEOF'
import glob, gzip, json, sys, collections
files = glob.glob(f"{sys.argv[1]}/**/*.json*", recursive=True)
kernels = collections.Counter()
for f in files:
    data = json.load(gzip.open(f) if f.endswith(".gz") else open(f))
    for e in data.get("traceEvents", []):
        if e.get("cat") == "kernel":
            kernels[e["name"][:60]] += 1
print("  kernels:", len(kernels), "distinct;", kernels.most_common(5))
PYEOF
else
    echo "== profile: skipped (amplint.runtime.profiling not present)"
fi
echo "== compare on CUDA: fp32 vs fp16 autocast + GradScaler vs bf16, 15 steps of good.py"
t0=$EPOCHREALTIME
$PY -m amplint compare --steps 15 --bf16 --report "$OUT/compare.json" "$OUT/good.py" 2>&1 | grep -v "^amplint compare \[" | head -20
echo "   exit ${PIPESTATUS[0]}, $(elapsed "$t0")s"
echo "== verify overhead on CUDA: launch-bound (d_model 128) and wider (d_model 2048, batch still small)"
$PY benchmarks/verify_overhead.py --device cuda --width 128 --steps 30 --rounds ${ROUNDS:-2} || true
$PY benchmarks/verify_overhead.py --device cuda --width 2048 --steps 30 --rounds ${ROUNDS:-2} || true
