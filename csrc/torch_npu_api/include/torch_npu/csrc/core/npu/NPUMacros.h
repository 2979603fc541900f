// torch_npu's export macros, which its headers put before each function of libtorch_npu.so (and extensions sometimes
// use for their own): default visibility, as torch_npu's on Linux.
#pragma once

#define C10_NPU_EXPORT __attribute__((__visibility__("default")))
#define C10_NPU_IMPORT C10_NPU_EXPORT
#define C10_NPU_API C10_NPU_EXPORT
#define TORCH_NPU_API C10_NPU_API

// The most npu devices a process can address (torch_npu's value).
#define C10_COMPILE_TIME_MAX_NPUS 32
