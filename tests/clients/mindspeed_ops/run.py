"""MindSpeed's op builders (mindspeed/op_builder, Ascend's Megatron; not on PyPI: --source names a checkout or a git
clone of it) against softnpu's torch_npu C++ API, as MindSpeed builds them:

1. every builder is instantiated as MindSpeed does and each of its C++ sources is compiled with `g++ -fsyntax-only`
   with the builder's own include paths and -D flags (torch_npu/include, third_party/{acl,hccl}/inc,
   ASCEND_HOME_PATH/include, its ops/csrc/.../inc), each result with its first error;
2. for the sources that compile, the aclnn operators they call (MindSpeed dlopens libopapi.so) are looked up in
   softnpu's libopapi.so;
3. the builders given with --build are built through MindSpeed's builder.load() (torch's JIT extension builder,
   -ltorch_npu -lascendcl) and run on npu, forward and backward, against a CPU reference.

    python tests/clients/mindspeed_ops/run.py --source <MindSpeed checkout> [--build permute,unpermute,rope,adamw|none]

Prints one JSON line per source, per builder and per run case; `make mindspeed-ops` runs it, and
tests/test_mindspeed_ops.py runs the build-and-run cases when MINDSPEED_SOURCE names a checkout.
"""
import argparse
import concurrent.futures
import ctypes
import importlib
import inspect
import json
import os
import re
import subprocess
import sys
import sysconfig
import types
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
BUILD = REPO / "build" / "mindspeed"


def source_root(source):
    """A directory holding mindspeed/: the checkout itself, or the files of HEAD exported from a git clone."""
    path = Path(source).resolve()
    if (path / "mindspeed" / "op_builder").is_dir():
        return path
    git = ["git", f"--git-dir={path / '.git' if (path / '.git').exists() else path}"]
    head = subprocess.run(git + ["rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    root = BUILD / "src" / head[:12]
    if not (root / "mindspeed" / "op_builder").is_dir():
        root.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(git + ["archive", "HEAD", "mindspeed"], capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(root)], input=archive, check=True)
    return root


def builders_package(root):
    """mindspeed.op_builder without its __init__.py: that imports every builder, and gmm_builder imports torchair
    (torch_npu's GE graph compiler, which softnpu does not have), so `from mindspeed.op_builder import X` fails here
    for every X. Each builder module is imported on its own instead (those that import torchair still fail)."""
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    import mindspeed  # noqa: F401

    if "mindspeed.op_builder" not in sys.modules:
        package = types.ModuleType("mindspeed.op_builder")
        package.__path__ = [str(root / "mindspeed" / "op_builder")]
        sys.modules["mindspeed.op_builder"] = package


def builder_classes(root):
    """(module name, class, or the reason its module does not import) for every concrete MindSpeed op builder."""
    builders_package(root)
    from mindspeed.op_builder.builder import MindSpeedOpBuilder

    found = []
    for path in sorted((root / "mindspeed" / "op_builder").glob("*_builder.py")):
        name = f"mindspeed.op_builder.{path.stem}"
        try:
            module = importlib.import_module(name)
        except Exception as e:  # noqa: BLE001  (the reason is the result)
            found.append((path.stem, None, f"{type(e).__name__}: {e}"))
            continue
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if (issubclass(cls, MindSpeedOpBuilder) and cls.__module__ == name and not inspect.isabstract(cls)
                    and "sources" in {n for c in cls.__mro__ if c is not MindSpeedOpBuilder for n in vars(c)}):
                found.append((path.stem, cls, None))
    return found


def compile_flags(builder):
    """The -I and -D flags MindSpeed's load() passes for this builder (its other flags are for the real build)."""
    includes = builder.get_absolute_paths(builder.include_paths())
    defines = [a for a in " ".join(builder.cxx_args()).split() if a.startswith(("-D", "-std"))]
    defines = [d for d in defines if not d.startswith("-D__FILENAME__")] + ['-D__FILENAME__="source"']
    return includes, defines


def syntax_check(source, includes, defines):
    from torch.utils.cpp_extension import include_paths

    paths = includes + include_paths() + [sysconfig.get_paths()["include"]]
    cmd = ["g++", "-fsyntax-only", "-w", "-std=c++17", "-DTORCH_EXTENSION_NAME=check", "-DTORCH_API_INCLUDE_EXTENSION_H",
           *defines, *[f"-I{p}" for p in paths], source]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    errors = [line for line in proc.stderr.splitlines() if "error" in line]
    return proc.returncode == 0, (errors[0] if errors else "")


def aclnn_calls(source):
    text = Path(source).read_text(errors="replace")
    return sorted(set(re.findall(r"ACLNN_CMD\(\s*(aclnn\w+)", text)) | set(re.findall(r"EXEC_NPU_CMD\(\s*(aclnn\w+)", text)))


def survey(root):
    """Steps 1 and 2: one record per builder."""
    import torch_npu  # noqa: F401  (ASCEND_HOME_PATH, and libopapi.so loaded)

    opapi = ctypes.CDLL("libopapi.so")
    records, jobs = [], []
    for stem, cls, reason in builder_classes(root):
        record = {"builder": cls.__name__ if cls else stem, "module": stem}
        records.append(record)
        if cls is None:
            record["status"] = f"does not import: {reason}"
            continue
        try:
            builder = cls()
            includes, defines = compile_flags(builder)
            sources = builder.get_absolute_paths(builder.sources())
        except Exception as e:  # noqa: BLE001
            record["status"] = f"not instantiable here: {type(e).__name__}: {e}"
            continue
        record["sources"] = {}
        for source in sources:
            jobs.append((record, source, includes, defines))
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        results = pool.map(lambda job: (job, syntax_check(*job[1:])), jobs)
        for (record, source, _, _), (ok, error) in results:
            rel = os.path.relpath(source, root / "mindspeed")
            missing = [op for op in aclnn_calls(source) if not hasattr(opapi, op)]
            record["sources"][rel] = {"compiles": ok, "error": error, "aclnn_missing": missing}
    for record in records:
        if "sources" in record:
            compiles = all(s["compiles"] for s in record["sources"].values())
            missing = sorted({op for s in record["sources"].values() for op in s["aclnn_missing"]})
            record["status"] = ("compiles" if compiles else "does not compile") + (
                f"; libopapi.so lacks {', '.join(missing)}" if compiles and missing else
                ("; its aclnn operators are in libopapi.so" if compiles and any(
                    aclnn_calls(root / "mindspeed" / s) for s in record["sources"]) else ""))
    return records


# ---- step 3: built through MindSpeed's builders and run against the CPU.

def permute_reference(tokens, indices, num_out):
    flat = indices.reshape(-1)
    order = torch.argsort(flat, stable=True)
    topk = 1 if indices.dim() == 1 else indices.size(1)
    return tokens.index_select(0, order // topk)[:num_out]


def run_permute(module_permute, module_unpermute):
    torch.manual_seed(0)
    tokens = torch.randn(16, 32).bfloat16()
    indices = torch.randint(0, 4, (16, 2))
    probs = torch.rand(16, 2).bfloat16()
    t_npu = tokens.npu().requires_grad_()
    p_npu = probs.npu().requires_grad_()
    permuted, sorted_indices = module_permute.npu_moe_token_permute(t_npu, indices.npu())
    out = module_unpermute.npu_moe_token_unpermute(permuted, sorted_indices, p_npu)
    out.float().pow(2).sum().backward()

    t_cpu, p_cpu = tokens.float().requires_grad_(), probs.float().requires_grad_()
    ref_permuted = permute_reference(t_cpu, indices, indices.numel())
    order = torch.argsort(indices.reshape(-1), stable=True)
    rows = torch.empty_like(order)
    rows[order] = torch.arange(order.numel())
    ref_out = (ref_permuted[rows].view(16, 2, 32) * p_cpu.unsqueeze(-1)).sum(1)
    ref_out.pow(2).sum().backward()
    diffs = {"permuted": (permuted.float().cpu() - ref_permuted).abs().max().item(),
             "unpermuted": (out.float().cpu() - ref_out).abs().max().item(),
             "grad_tokens": (t_npu.grad.float().cpu() - t_cpu.grad).abs().max().item(),
             "grad_probs": (p_npu.grad.float().cpu() - p_cpu.grad).abs().max().item()}
    scale = {"permuted": 1.0, "unpermuted": ref_out.abs().max().item(), "grad_tokens": t_cpu.grad.abs().max().item(),
             "grad_probs": p_cpu.grad.abs().max().item()}
    return {"case": "moe_token_permute+unpermute (bf16, top-2)",
            "rel_diff": {k: diffs[k] / max(scale[k], 1e-6) for k in diffs}}


def rope_reference(x, cos, sin):
    half = x.size(-1) // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin


def run_rope(module):
    torch.manual_seed(1)
    x = torch.randn(2, 8, 4, 32)
    cos, sin = torch.randn(1, 8, 1, 32), torch.randn(1, 8, 1, 32)
    x_npu, cos_npu, sin_npu = (t.npu().requires_grad_() for t in (x, cos, sin))
    y = module.npu_rotary_position_embedding(x_npu, cos_npu, sin_npu, 0)
    y.pow(2).sum().backward()
    x_cpu, cos_cpu, sin_cpu = (t.clone().requires_grad_() for t in (x, cos, sin))
    ref = rope_reference(x_cpu, cos_cpu, sin_cpu)
    ref.pow(2).sum().backward()
    diffs = {"y": (y.cpu() - ref).abs().max().item(),
             "grad_x": (x_npu.grad.cpu() - x_cpu.grad).abs().max().item(),
             "grad_cos": (cos_npu.grad.cpu() - cos_cpu.grad).abs().max().item(),
             "grad_sin": (sin_npu.grad.cpu() - sin_cpu.grad).abs().max().item()}
    scale = {"y": ref.abs().max().item(), "grad_x": x_cpu.grad.abs().max().item(),
             "grad_cos": cos_cpu.grad.abs().max().item(), "grad_sin": sin_cpu.grad.abs().max().item()}
    return {"case": "rotary_position_embedding (fp32, mode 0)", "rel_diff": {k: diffs[k] / scale[k] for k in diffs}}


def run_adamw(module):
    """Three AdamW steps of MindSpeed's fused op (its step count incremented before each call, as MindSpeed's optimizer
    does) against torch.optim.AdamW on the CPU."""
    torch.manual_seed(2)
    param = torch.randn(64, 32)
    grads = [torch.randn(64, 32) for _ in range(3)]
    ref = param.clone().requires_grad_()
    optimizer = torch.optim.AdamW([ref], lr=1e-2, betas=(0.9, 0.99), eps=1e-8, weight_decay=0.1)
    p_npu = param.npu()
    exp_avg, exp_avg_sq, max_sq = (torch.zeros(64, 32).npu() for _ in range(3))
    step = torch.zeros(1).npu()
    for g in grads:
        ref.grad = g
        optimizer.step()
        step += 1
        module.npu_apply_fused_adamw_v2(p_npu, g.npu(), exp_avg, exp_avg_sq, max_sq, step, 1e-2, 0.9, 0.99, 0.1,
                                        1e-8, False, False)
    diff = (p_npu.cpu() - ref.detach()).abs().max().item()
    return {"case": "fused_adamw_v2 (fp32, 3 steps)", "rel_diff": {"param": diff / ref.detach().abs().max().item()}}


def build(root, which):
    """MindSpeed's builders' load() for the chosen ops; the run cases' results."""
    builders_package(root)
    os.environ.setdefault("TORCH_EXTENSIONS_DIR", str(BUILD / "torch_extensions"))
    results = []
    if {"permute", "unpermute"} & which:
        from mindspeed.op_builder import npu_moe_token_permute_builder as pb
        from mindspeed.op_builder import npu_moe_token_unpermute_builder as ub

        results.append(run_permute(pb.MoeTokenPermuteOpBuilder().load(verbose=False),
                                   ub.MoeTokenUnpermuteOpBuilder().load(verbose=False)))
    if "adamw" in which:
        from mindspeed.op_builder import fused_adamw_v2_builder as ab

        results.append(run_adamw(ab.FusedAdamWV2OpBuilder().load(verbose=False)))
    if "rope" in which:
        from mindspeed.op_builder import npu_rotary_position_embedding_builder as rb

        results.append(run_rope(rb.RotaryPositionEmbeddingOpBuilder().load(verbose=False)))
    return results


def main():
    global torch
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--source", required=True, help="a MindSpeed checkout or git clone")
    parser.add_argument("--build", default="permute,unpermute,rope,adamw", help="builders to build and run, or none")
    parser.add_argument("--no-survey", action="store_true", help="only build and run")
    args = parser.parse_args()
    import torch
    import torch_npu  # noqa: F401

    root = source_root(args.source)
    if not args.no_survey:
        for record in survey(root):
            print(json.dumps(record))
    which = set() if args.build == "none" else set(args.build.split(","))
    for result in build(root, which):
        print(json.dumps(result))


if __name__ == "__main__":
    main()
