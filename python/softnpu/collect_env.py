"""torch_npu.utils.collect_env: torch's environment report with the torch_npu and CANN versions
(`python -m torch_npu.utils.collect_env`)."""

import importlib.metadata

from torch.utils import collect_env as _torch_collect_env

from .cann import get_cann_version

__all__ = ["get_cann_version", "get_torch_npu_version", "get_pretty_env_info", "main"]


def get_torch_npu_version() -> str:
    return importlib.metadata.version("torch_npu")


def get_pretty_env_info() -> str:
    return (f"{_torch_collect_env.get_pretty_env_info()}\n\nTorch-npu version: {get_torch_npu_version()} (softnpu, a "
            f"software NPU)\nCANN:\n{get_cann_version()}")


def main() -> None:
    print("Collecting environment information...")
    print(get_pretty_env_info())


if __name__ == "__main__":
    main()
