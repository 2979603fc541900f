"""Every node test case (`make onnx-node-tests`); tests/test_onnx_node.py runs a slice of them in `make test`."""
from suite import node_test_cases

globals().update(node_test_cases(__name__))
