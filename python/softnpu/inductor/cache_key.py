"""softnpu's code generation in Inductor's FX graph cache key.

The cache keys a compiled graph by torch's sources and Inductor's configuration, not by a device backend's: a graph
cached under another softnpu would come back with wrapper code calling that softnpu's kernel bindings. A device's
custom pass is part of the key through its uuid, so this pass changes nothing and only names the sources of this
package (a change to any of them misses the cache)."""

import pathlib

import torch
from torch._inductor.custom_graph_pass import CustomGraphModulePass, get_hash_for_files


class CodegenFingerprint(CustomGraphModulePass):
    def __call__(self, gm: torch.fx.GraphModule) -> None:
        return None

    def uuid(self) -> bytes:
        sources = sorted(str(p) for p in pathlib.Path(__file__).parent.glob("*.py"))
        return get_hash_for_files(tuple(sources))
