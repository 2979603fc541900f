"""The two models of the offline-model examples, tests and benchmarks, with random weights.

resnet18: timm's and torchvision's ResNet-18 architecture (BasicBlock, [2, 2, 2, 2], 1000 classes), written here
because timm needs torchvision at import and torchvision's wheel for this torch does not load on this machine.
tiny BERT: transformers' BertModel from a small config.
"""
from __future__ import annotations

import pathlib

import torch
from torch import nn


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = torch.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return torch.relu(y + (x if self.downsample is None else self.downsample(x)))


class ResNet18(nn.Module):
    def __init__(self, num_classes: int = 1000):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        blocks, cin = [], 64
        for cout, stride in [(64, 1), (64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2), (512, 1)]:
            blocks.append(BasicBlock(cin, cout, stride))
            cin = cout
        self.layers = nn.Sequential(*blocks)
        self.fc = nn.Linear(512, num_classes)

    def forward(self, x):
        x = self.maxpool(torch.relu(self.bn1(self.conv1(x))))
        x = torch.flatten(nn.functional.adaptive_avg_pool2d(self.layers(x), 1), 1)
        return self.fc(x)


def resnet18() -> nn.Module:
    torch.manual_seed(0)
    model = ResNet18().eval()
    # Non-trivial batch-norm statistics, so that folding them into the convolutions is exercised.
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.1, 0.1)
            m.running_var.uniform_(0.5, 1.5)
            m.weight.data.uniform_(0.5, 1.5)
            m.bias.data.uniform_(-0.1, 0.1)
    return model


def tiny_bert() -> nn.Module:
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    config = BertConfig(vocab_size=1000, hidden_size=128, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=512, max_position_embeddings=128)
    return BertModel(config).eval()


def resnet18_inputs(batch: int = 1):
    return (torch.randn(batch, 3, 224, 224, generator=torch.Generator().manual_seed(1)),)


def bert_inputs(batch: int = 1, seq: int = 64):
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 1000, (batch, seq), generator=g)
    mask = torch.ones(batch, seq, dtype=torch.long)
    mask[:, seq - seq // 4:] = 0  # padding at the end, so the attention mask matters
    return ids, mask


MODELS = {
    "resnet18": (resnet18, resnet18_inputs, ["input"], ["output"]),
    "bert": (tiny_bert, bert_inputs, ["input_ids", "attention_mask"], ["last_hidden_state", "pooler_output"]),
}


def export(name: str, directory: pathlib.Path, batch: int = 1) -> tuple[pathlib.Path, tuple, list]:
    """Exports a model to directory/name.onnx with torch.onnx.export; returns the path, the inputs and PyTorch CPU's
    outputs for them."""
    build, make_inputs, input_names, output_names = MODELS[name]
    model = build()
    inputs = make_inputs(batch)
    path = directory / f"{name}.onnx"
    torch.onnx.export(model, inputs, str(path), input_names=input_names, output_names=output_names, dynamo=True)
    with torch.no_grad():
        out = model(*inputs)
    if not isinstance(out, torch.Tensor):
        out = [out[k] for k in output_names] if isinstance(out, dict) else list(out)[: len(output_names)]
    else:
        out = [out]
    return path, inputs, [o.detach() for o in out]
