// Tensor formats (torch_npu's acl_format), see format.cpp.
#pragma once

namespace softnpu {

// Whether private formats may be created: torch.npu.config.allow_internal_format, read through a query the Python
// bindings install (python/format.cpp); without Python, torch_npu's default (true).
void set_internal_format_query(bool (*query)());

}  // namespace softnpu
