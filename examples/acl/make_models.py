"""Prepares the C++ example's models: exports resnet18 and the tiny BERT, converts them with atc, and writes their
inputs and PyTorch CPU's outputs as raw .bin files for run_om to compare against.

    python make_models.py OUTPUT_DIR
"""
import pathlib
import subprocess
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import models  # noqa: E402


def main(out: pathlib.Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    atc = pathlib.Path(sys.executable).with_name("atc")
    for name in models.MODELS:
        path, inputs, outputs = models.export(name, out)
        subprocess.run([str(atc), f"--model={path}", "--framework=5", f"--output={out / name}",
                        "--soc_version=Ascend910B3", "--precision_mode=force_fp32"], check=True)
        for i, t in enumerate(inputs):
            t.numpy().tofile(out / f"{name}_input{i}.bin")
        for i, t in enumerate(outputs):
            t.float().numpy().tofile(out / f"{name}_expect{i}.bin")


if __name__ == "__main__":
    main(pathlib.Path(sys.argv[1]))
