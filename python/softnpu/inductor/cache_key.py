"""softnpu's code generation in Inductor's FX graph cache key.

The cache keys a compiled graph by torch's sources and Inductor's configuration, not by a device backend's: a graph
cached under another softnpu would come back with wrapper code calling that softnpu's kernel bindings. A device's
custom pass is part of the key through its uuid, so this pass changes nothing and only names the sources of this
package with its subpackages and the built-in NPU graph handlers (a change to any of them misses the cache), and the
backend library, whose answers shape the traced graph (npu's attention kernel choice, its Meta fixes): a graph traced
under another build would keep that build's choices."""

import pathlib

import torch
from torch._inductor.custom_graph_pass import CustomGraphModulePass, get_hash_for_files


class CodegenFingerprint(CustomGraphModulePass):
    def __call__(self, gm: torch.fx.GraphModule) -> None:
        return None

    def uuid(self) -> bytes:
        here = pathlib.Path(__file__).parent
        # With the built-in graph handlers, which decide the ACL graph update plans written into the code.
        sources = sorted(str(p) for folder in (here, here.parent / "npu" / "_npugraph_handlers")
                         for p in folder.rglob("*.py")) + [str(here.parent / "lib" / "libsoftnpu_backend.so")]
        return get_hash_for_files(tuple(sources))
