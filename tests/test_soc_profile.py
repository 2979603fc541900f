"""The chip the devices present as (SOFTNPU_SOC_VERSION, csrc/common/soc_profiles.def) on every surface that names
it, the dtypes torch_npu refuses on it, the CANN toolkit tree with the environment set at import, and torch_npu's
distribution metadata."""

import importlib.metadata
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch_npu
from conftest import child_env, run_many, run_python
from test_atc import atc, load_from_mem, mlp_model, save

import acl
import softnpu

NPU_SMI = Path(sys.executable).parent / "npu-smi"
TOOLKIT = Path(softnpu.__file__).parent / "ascend-toolkit" / "latest"

SHOW = """
import torch, torch_npu
p = torch.npu.get_device_properties(0)
print(torch.npu.get_device_name(), torch_npu.npu.get_soc_version(), p.cube_core_num, p.vector_core_num,
      torch.npu.is_bf16_supported())
"""


def test_the_default_chip_is_ascend910b3_on_every_python_surface():
    assert torch.npu.get_device_name() == torch.npu.get_device_name(1) == "Ascend910B3"
    assert torch_npu.npu.get_soc_version() == torch.npu.get_soc_version() == 223
    p = torch.npu.get_device_properties(0)
    # torch_npu's multi_processor_count is the vector cores (what DataParallel's balance check counts).
    assert (p.name, p.soc_version, p.multi_processor_count, p.cube_core_num, p.vector_core_num) == \
        ("Ascend910B3", 223, 40, 20, 40)
    assert p.L2_cache_size == 192 << 20
    assert repr(p).startswith("_NPUDeviceProperties(name='Ascend910B3', total_memory=2048MB, cube_core_num=20, "
                              "vector_core_num=40")
    assert torch.npu.is_bf16_supported() and torch.bfloat16 in torch.npu.get_amp_supported_dtype()
    # What LLaMA-Factory, MindSpeed and vllm-ascend test before choosing their Ascend kernels.
    assert "Ascend910" in torch.npu.get_device_name() and 220 <= torch_npu.npu.get_soc_version() <= 225


def test_the_variable_selects_each_chip_of_the_table():
    cases = {"Ascend910B1": "Ascend910B1 220 24 48 True", "Ascend910B4": "Ascend910B4 224 20 40 True",
             "Ascend910B4-1": "Ascend910B4-1 225 20 40 True", "Ascend910_9391": "Ascend910_9391 250 24 48 True",
             "Ascend910_9362": "Ascend910_9362 255 24 48 True", "Ascend310P3": "Ascend310P3 202 8 7 False"}
    results = run_many([(SHOW, {"SOFTNPU_SOC_VERSION": name}) for name in cases])
    for (name, expected), r in zip(cases.items(), results):
        assert r.stdout.strip() == expected, (name, r.describe())


def test_an_unknown_chip_is_refused_naming_the_variable_and_the_choices():
    code = """
    import torch
    try:
        torch.ones(1, device="npu")
    except RuntimeError as e:
        print(str(e).splitlines()[0])
    """
    r = run_python(code, {"SOFTNPU_SOC_VERSION": "Ascend910C"})
    assert "SOFTNPU_SOC_VERSION='Ascend910C' is not valid: expected one of Ascend910B1, Ascend910B2," in r.stdout, \
        r.describe()
    assert "Ascend910_9391" in r.stdout and "Ascend310P3" in r.stdout


def test_the_default_capacity_is_the_chips_hbm_within_half_the_host():
    code = """
    import os, torch
    half_host = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 2 >> 20 << 20
    print(torch.npu.get_device_properties(0).total_memory == min(32 << 30, half_host))
    """
    r = run_python(code, {"SOFTNPU_SOC_VERSION": "Ascend910B4", "SOFTNPU_MEMORY_MB": None})
    assert r.stdout.strip() == "True", r.describe()


def test_bfloat16_autocast_on_a_310p_is_refused_as_torch_npu_refuses_it():
    # torch_npu's get_amp_supported_dtype has no bfloat16 below Ascend910B1, so torch's autocast warns and disables
    # itself: the layer computes in float32.
    code = """
    import warnings, torch
    layer = torch.nn.Linear(4, 4).npu()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with torch.autocast("npu", dtype=torch.bfloat16):
            y = layer(torch.randn(2, 4).npu())
    print(y.dtype, torch.npu.is_bf16_supported(), torch.npu.get_amp_supported_dtype())
    print([str(w.message).splitlines()[0] for w in caught])
    """
    r = run_python(code, {"SOFTNPU_SOC_VERSION": "Ascend310P3"})
    first, second = r.lines[:2]
    assert first == "torch.float32 False [torch.float16, torch.float32]", r.describe()
    assert "In npu autocast, but the target dtype is not supported. Disabling autocast." in second, r.describe()


def npu_smi(*args, **env) -> str:
    r = subprocess.run([str(NPU_SMI), *args], env=child_env(env), capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout


def npu_smi_fields(*args, **env) -> dict[str, str]:
    """The "Key : Value" lines of npu-smi's output (Ascend's layout: a tab, the key in 30 columns)."""
    return dict(re.findall(r"^\t(\S.*?) +: (.*)$", npu_smi(*args, **env), re.M))


def test_npu_smi_shows_the_chips_name_and_ai_cores():
    out = npu_smi_fields("info", "-l")
    assert out["Name"] == "910B3" and out["Aicore Count"] == "20", out
    p3 = {"SOFTNPU_SOC_VERSION": "Ascend310P3"}
    out = npu_smi_fields("info", "-t", "board", "-i", "0", **p3)
    assert out["Chip Name"] == "310P3" and out["NPU Name"] == "Ascend310P3", out
    out = npu_smi_fields("info", "-t", "common", "-i", "0", **p3)
    assert out["Aicore Count"] == "8" and out["Aicore Freq(MHZ)"] == "1080", out
    assert "Ascend 310P3" in npu_smi("info", "-m", **p3)


def test_atc_converts_for_any_chip_of_the_table_and_the_loader_checks_it(tmp_path):
    model = save(mlp_model(), tmp_path / "mlp.onnx")
    r = atc(f"--model={model}", "--framework=5", f"--output={tmp_path / 'p3'}", "--soc_version=Ascend310P3")
    assert r.returncode == 0, r.stdout
    assert load_from_mem((tmp_path / "p3.om").read_bytes()) != 0
    assert "converted for soc_version [Ascend310P3]; this device is [Ascend910B3]" in acl.get_recent_err_msg()
    r = atc(f"--model={model}", "--framework=5", f"--output={tmp_path / 'x'}", "--soc_version=SoftNPU")
    assert r.returncode != 0 and "E10001" in r.stdout and "Ascend910B1, Ascend910B2" in r.stdout, r.stdout


def test_the_cann_toolkit_tree_is_laid_out_as_canns():
    assert os.environ["ASCEND_HOME_PATH"] == os.environ["ASCEND_TOOLKIT_HOME"] == str(TOOLKIT)
    assert os.environ["ASCEND_OPP_PATH"] == str(TOOLKIT / "opp")
    assert os.environ["LD_LIBRARY_PATH"].split(":")[0] == str(TOOLKIT / "lib64")
    info = (TOOLKIT / f"{os.uname().machine}-linux" / "ascend_toolkit_install.info").read_text()
    version = re.search(r"^version=(\S+)$", info, re.M).group(1)
    assert re.fullmatch(r"\d+\.\d+\.(RC\d+|\d+)", version)
    assert torch.version.cann == version
    from torch_npu.utils.collect_env import get_cann_version
    assert get_cann_version() == version
    assert (TOOLKIT / "include" / "acl" / "acl.h").is_file()
    # The one libascendcl.so: the library pyACL loads, no copy of it elsewhere in the package.
    libraries = sorted(Path(softnpu.__file__).parent.rglob("libascendcl.so"))
    assert libraries == [TOOLKIT / "lib64" / "libascendcl.so"]
    assert Path(acl._lib.lib._name) == libraries[0]


def test_deepspeeds_npu_op_builder_finds_the_cann_version():
    # DeepSpeed's op_builder/npu/builder.py (0.19), NPUOpBuilder.installed_cann_path / installed_cann_version.
    ascend_path = os.environ["ASCEND_HOME_PATH"]
    cann_version = ""
    for dirpath, _, filenames in os.walk(os.path.realpath(ascend_path)):
        if cann_version:
            break
        install_files = [file for file in filenames if re.match(r"ascend_.*_install\.info", file)]
        if install_files:
            with open(os.path.join(dirpath, install_files[0])) as f:
                for line in f:
                    if line.find("version") != -1:
                        cann_version = line.strip().split("=")[-1]
                        break
    assert cann_version == torch.version.cann


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler")
def test_a_cann_program_builds_and_runs_against_the_tree(tmp_path):
    source = tmp_path / "soc.c"
    source.write_text('#include <stdio.h>\n#include "acl/acl.h"\n'
                      'int main(void) { if (aclInit(NULL)) return 1; printf("%s\\n", aclrtGetSocName()); '
                      'return aclFinalize(); }\n')
    home = os.environ["ASCEND_HOME_PATH"]
    subprocess.run(["cc", str(source), f"-I{home}/include", f"-L{home}/lib64", "-lascendcl", "-o", str(tmp_path / "soc")],
                   check=True, capture_output=True, timeout=120)
    r = subprocess.run([str(tmp_path / "soc")], env=child_env(), capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "Ascend910B3", (r.stdout, r.stderr)


def test_set_env_sh_exports_what_import_sets():
    script = TOOLKIT.parent / "set_env.sh"
    out = subprocess.run(["bash", "-c", f"source {script} && echo $ASCEND_HOME_PATH $ASCEND_OPP_PATH"],
                         env=child_env({"ASCEND_HOME_PATH": None}), capture_output=True, text=True, check=True)
    assert out.stdout.split() == [str(TOOLKIT), str(TOOLKIT / "opp")]


def test_a_users_cann_is_left_alone(tmp_path):
    (tmp_path / "x86_64-linux").mkdir()
    (tmp_path / "x86_64-linux" / "ascend_toolkit_install.info").write_text("package_name=x\nversion=8.0.RC3\n")
    code = """
    import os, torch, torch_npu
    print(os.environ["ASCEND_HOME_PATH"], os.environ.get("ASCEND_OPP_PATH"), torch.version.cann)
    """
    # (This process's import set ASCEND_OPP_PATH and the others: the child starts without them.)
    r = run_python(code, {"ASCEND_HOME_PATH": str(tmp_path), "ASCEND_OPP_PATH": None, "ASCEND_TOOLKIT_HOME": None,
                          "ASCEND_AICPU_PATH": None})
    assert r.stdout.split() == [str(tmp_path), "None", "8.0.RC3"], r.describe()


def test_torch_npu_is_an_installed_distribution():
    version = importlib.metadata.version("torch_npu")
    assert version == torch.__version__.split("+")[0]  # torch_npu numbers its releases after torch's
    # diffusers' is_torch_npu_available (utils/import_utils.py, _is_package_available): a module and a distribution.
    assert importlib.util.find_spec("torch_npu") is not None
    from torch_npu.utils.collect_env import get_torch_npu_version
    assert get_torch_npu_version() == version


def test_report_and_doctor_say_the_device_is_software():
    r = subprocess.run([str(Path(sys.executable).parent / "softnpu"), "report"], env=child_env(), capture_output=True,
                       text=True, timeout=120)
    assert "SOFTWARE NPUs presenting as Ascend910B3 (soc version 223, 20 AI cores" in r.stdout, r.stdout
    r = subprocess.run([str(Path(sys.executable).parent / "softnpu"), "doctor"], env=child_env(), capture_output=True,
                       text=True, timeout=300)
    devices = next(line for line in r.stdout.splitlines() if " devices " in line)
    assert "SOFTWARE NPUs presenting as Ascend910B3" in devices, r.stdout
