"""pytest plugin for diffusers' CPU run: diffusers takes its torch_npu paths (torch_npu.npu_geglu, npu_rms_norm)
whenever torch_npu is installed, whatever device the tensors are on, so with torch_npu installed its CPU run fails
where a plain CPU install passes. The baseline the npu run is compared with is diffusers' CPU code."""
import diffusers.utils.import_utils


def pytest_configure(config):
    diffusers.utils.import_utils._torch_npu_available = False
