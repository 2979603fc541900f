"""The fragmentation pattern of issue 11 with and without expandable segments: allocate 8 x 16 MiB, free every other,
allocate 4 x 32 MiB; reserved and allocated memory (current and peak) in MiB, each configuration in a fresh process
(PYTORCH_NPU_ALLOC_CONF is read once), in the same run. Writes benchmarks/results/fragmentation.json."""

import json
import os
import subprocess
import sys

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")

PATTERN = """
import json, torch, torch_npu
MiB = 1 << 20
kept = [torch.empty(16 * MiB, dtype=torch.uint8, device="npu") for _ in range(8)]
del kept[::2]
grown = [torch.empty(32 * MiB, dtype=torch.uint8, device="npu") for _ in range(4)]
torch.npu.synchronize()
print(json.dumps({"reserved": torch.npu.memory_reserved() // MiB, "peak reserved": torch.npu.max_memory_reserved() // MiB,
                  "allocated": torch.npu.memory_allocated() // MiB,
                  "peak allocated": torch.npu.max_memory_allocated() // MiB}))
"""

CONFIGS = {"without expandable segments": "", "with expandable segments": "expandable_segments:True"}


def measure(conf: str) -> dict:
    env = dict(os.environ, PYTORCH_NPU_ALLOC_CONF=conf)
    out = subprocess.run([sys.executable, "-c", PATTERN], env=env, check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    rows = {name: measure(conf) for name, conf in CONFIGS.items()}
    print("fragmentation: 8 x 16 MiB, free every other, 4 x 32 MiB (MiB)")
    keys = ["reserved", "peak reserved", "allocated", "peak allocated"]
    print(f"{'':30}" + "".join(f"{k:>16}" for k in keys))
    for name, row in rows.items():
        print(f"{name:30}" + "".join(f"{row[k]:>16}" for k in keys))
    os.makedirs(RESULTS, exist_ok=True)
    with open(os.path.join(RESULTS, "fragmentation.json"), "w") as f:
        json.dump(rows, f, indent=2)


if __name__ == "__main__":
    main()
