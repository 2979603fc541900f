"""softnpu's CANN toolkit tree (csrc/ascend), laid out as CANN's ascend-toolkit: ACL's headers in include/,
libascendcl.so in lib64/, <arch>-linux/ascend_toolkit_install.info with its version. Importing softnpu (or torch_npu)
points ASCEND_HOME_PATH and the other variables CANN's set_env.sh exports at it when the user has not set up a CANN
of their own, so build scripts written for Ascend (DeepSpeed's npu op builders, MindSpore's) find a CANN."""

import os
import re

TOOLKIT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ascend-toolkit", "latest")
# The driver's version.info, beside the toolkit as on Ascend (/usr/local/Ascend/driver beside ascend-toolkit).
DRIVER_VERSION_INFO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "driver", "version.info")
# The variables setup_environment set (the user did not): `softnpu report` shows them as defaults.
SET_AT_IMPORT: set[str] = set()


def ascend_home() -> str:
    """ASCEND_HOME_PATH, or "" when unset."""
    return os.environ.get("ASCEND_HOME_PATH", "")


def setup_environment() -> None:
    """As `source ascend-toolkit/set_env.sh`, when ASCEND_HOME_PATH is unset: ASCEND_HOME_PATH, ASCEND_TOOLKIT_HOME,
    ASCEND_OPP_PATH and ASCEND_AICPU_PATH (each unless set) name softnpu's tree, and its lib64 goes first in
    LD_LIBRARY_PATH (for the programs this process starts, such as a compiler linking -lascendcl)."""
    if ascend_home():
        return  # the user's CANN, whole: nothing of softnpu's is mixed into it
    defaults = {"ASCEND_HOME_PATH": TOOLKIT, "ASCEND_TOOLKIT_HOME": TOOLKIT,
                "ASCEND_OPP_PATH": os.path.join(TOOLKIT, "opp"), "ASCEND_AICPU_PATH": TOOLKIT}
    for name, value in defaults.items():
        if not os.environ.get(name):
            os.environ[name] = value
            SET_AT_IMPORT.add(name)
    paths = os.environ.get("LD_LIBRARY_PATH", "")
    os.environ["LD_LIBRARY_PATH"] = os.path.join(TOOLKIT, "lib64") + (":" + paths if paths else "")


def get_cann_version() -> str:
    """The version= of the first ascend_*_install.info under ASCEND_HOME_PATH, as torch_npu's collect_env reads it
    ("not known" without one)."""
    home = ascend_home()
    if not home:
        return "not known"
    for dirpath, _, filenames in os.walk(os.path.realpath(home)):
        for name in sorted(filenames):
            if re.match(r"ascend_.*_install\.info$", name):
                with open(os.path.join(dirpath, name)) as f:
                    for line in f:
                        if line.startswith("version="):
                            return line.strip().split("=", 1)[1]
    return "not known"


def get_driver_version() -> str:
    """The Version= of softnpu's driver/version.info (the release npu-smi presents), "not known" without one."""
    try:
        with open(DRIVER_VERSION_INFO) as f:
            for line in f:
                if line.startswith("Version="):
                    return line.strip().split("=", 1)[1]
    except OSError:
        pass
    return "not known"
