// c10_npu::get_npu_hooks (NPUHooksInterface.h): the hooks softnpu's backend registered.
#include "torch_npu/csrc/core/npu/NPUHooksInterface.h"

namespace c10_npu {

at::PrivateUse1HooksInterface* get_npu_hooks() {
  // ATen hands out the registered hooks as const; torch_npu's accessor is not, and the hooks have no mutable state.
  return const_cast<at::PrivateUse1HooksInterface*>(&at::detail::getPrivateUse1Hooks());
}

}  // namespace c10_npu
