"""A slice of ONNX's backend node tests through atc and ACL (`make onnx-node-tests` runs all of them; see
tests/onnx_node/suite.py): the op families common models are made of."""
from onnx_node.suite import node_test_cases

SLICE = [rf"^test_{family}(_|$)" for family in (
    "add", "sub", "mul", "div", "pow", "relu", "sigmoid", "tanh", "gelu", "erf", "softmax", "logsoftmax",
    "conv", "convtranspose", "gemm", "matmul", "maxpool", "averagepool", "globalaveragepool", "batchnorm",
    "layer_normalization", "reshape", "transpose", "concat", "slice", "gather", "unsqueeze", "squeeze", "flatten",
    "reduce_mean", "reduce_sum", "cast", "where", "expand", "split", "pad", "clip", "argmax", "topk", "cumsum",
    "quantizelinear", "dequantizelinear", "qlinearmatmul", "scatternd", "gathernd", "nonzero", "lstm", "gru",
    "attention", "rms_normalization", "rotary_embedding", "resize", "sce", "gridsample", "lppool")]

globals().update(node_test_cases(__name__, SLICE))
