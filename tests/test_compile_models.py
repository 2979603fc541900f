"""torch.compile on npu against eager npu for real models: a tiny GPT-2 from transformers' config (random weights) and
a ResNet-18 (batch norm in train mode), forward and backward, with static and dynamic shapes.

Each case compiles a forward and a backward graph with Inductor (fullgraph, so the whole model is compiled, not
eager pieces between graph breaks); Inductor's cache lives in a directory of this test session and Dynamo is reset
between cases. The inputs are small so that a case compiles in tens of seconds on a 2-core host.
"""

import copy

import pytest
import torch


from compile_fixtures import fresh_dynamo, inductor_cache  # noqa: F401 (autouse fixtures)


def _compare_training_step(model, step, inputs, dynamic, rtol, atol):
    """The loss and every parameter's gradient of one step of the compiled copy against the same step eager."""
    eager = model.npu()
    compiled_model = copy.deepcopy(eager)
    compiled = torch.compile(compiled_model, dynamic=dynamic, fullgraph=True)
    loss = step(compiled, *inputs)
    expected = step(eager, *inputs)
    torch.testing.assert_close(loss.detach().cpu(), expected.detach().cpu(), rtol=rtol, atol=atol)
    grads = {name: p.grad for name, p in compiled_model.named_parameters()}
    for name, p in eager.named_parameters():
        assert p.grad is not None and grads[name] is not None, name
        torch.testing.assert_close(grads[name].cpu(), p.grad.cpu(), rtol=rtol, atol=atol,
                                   msg=lambda m, name=name: f"{name}: {m}")
    return eager, compiled_model, compiled


# ------------------------------------------------------------------------------------------------ GPT-2


def _gpt2():
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=128, n_positions=32,
                                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    model = transformers.GPT2LMHeadModel(config)
    model.loss_type = "ForCausalLM"  # unset, transformers logs a warning on each call: a graph break on any device
    return model


def _lm_step(model, ids):
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    return loss


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_gpt2_tiny_forward_and_backward_match_eager(dynamic):
    torch.manual_seed(0)
    model = _gpt2()
    ids = torch.randint(0, 128, (2, 16)).npu()
    eager, compiled_model, compiled = _compare_training_step(model, _lm_step, (ids,), dynamic, rtol=1e-4, atol=1e-5)
    if dynamic:  # another sequence length runs the same graph
        ids = torch.randint(0, 128, (2, 24)).npu()
        torch.testing.assert_close(compiled(input_ids=ids, labels=ids).loss.detach().cpu(),
                                   eager(input_ids=ids, labels=ids).loss.detach().cpu(), rtol=1e-4, atol=1e-5)


# ------------------------------------------------------------------------------------------------ ResNet-18


class BasicBlock(torch.nn.Module):
    def __init__(self, inplanes, planes, stride):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
        self.bn1 = torch.nn.BatchNorm2d(planes)
        self.conv2 = torch.nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = torch.nn.BatchNorm2d(planes)
        self.downsample = None
        if stride != 1 or inplanes != planes:
            self.downsample = torch.nn.Sequential(torch.nn.Conv2d(inplanes, planes, 1, stride, bias=False),
                                                  torch.nn.BatchNorm2d(planes))

    def forward(self, x):
        out = torch.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return torch.relu(out + (x if self.downsample is None else self.downsample(x)))


class ResNet18(torch.nn.Module):
    """torchvision's resnet18 (BasicBlock, [2, 2, 2, 2], 64 to 512 channels, ImageNet stem)."""

    def __init__(self, num_classes=10):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = torch.nn.BatchNorm2d(64)
        self.maxpool = torch.nn.MaxPool2d(3, 2, 1)
        layers, inplanes = [], 64
        for planes, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
            layers.append(torch.nn.Sequential(BasicBlock(inplanes, planes, stride), BasicBlock(planes, planes, 1)))
            inplanes = planes
        self.layers = torch.nn.Sequential(*layers)
        self.fc = torch.nn.Linear(512, num_classes)

    def forward(self, x):
        x = self.maxpool(torch.relu(self.bn1(self.conv1(x))))
        x = torch.flatten(torch.nn.functional.adaptive_avg_pool2d(self.layers(x), 1), 1)
        return self.fc(x)


def _classify_step(model, x, target):
    loss = torch.nn.functional.cross_entropy(model(x), target)
    loss.backward()
    return loss


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_resnet18_forward_and_backward_match_eager(dynamic):
    torch.manual_seed(0)
    model = ResNet18().train()
    x = torch.randn(4, 3, 32, 32).npu()
    target = torch.randint(0, 10, (4,)).npu()
    # Batch norm over 4 samples of layer 4's 1x1 maps amplifies the different order of Inductor's reductions through
    # the 20 layers: conv1's gradient differs from eager by up to 3.6e-4 (of values up to about 0.05).
    eager, compiled_model, _ = _compare_training_step(model, _classify_step, (x, target), dynamic,
                                                      rtol=1e-2, atol=1e-3)
    for (name, b), c in zip(eager.named_buffers(), compiled_model.buffers()):  # batch norm's running statistics
        torch.testing.assert_close(c.cpu(), b.cpu(), msg=name)
