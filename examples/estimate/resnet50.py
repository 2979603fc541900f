"""A ResNet-50 (v1.5, torchvision's architecture: 25.6 M parameters, 4.1 GFLOPs per 224x224 image) training step in
mixed precision (float16 autocast, as the published Ascend results use), SGD with momentum. Self-contained (no
torchvision).

    softnpu estimate examples/estimate/resnet50.py                 # batch 256: fake tensors
    python examples/estimate/resnet50.py --batch 2 --image 64      # runs for real on softnpu
"""

import argparse

import torch
import torch.nn.functional as F
from torch import nn

import softnpu  # noqa: F401  (registers npu)
import softnpu.cost


class Bottleneck(nn.Module):
    def __init__(self, inplanes: int, planes: int, stride: int):
        super().__init__()
        width, out = planes, planes * 4
        self.conv1 = nn.Conv2d(inplanes, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride=stride, padding=1, bias=False)  # v1.5: stride on the 3x3
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, out, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(out)
        self.downsample = None
        if stride != 1 or inplanes != out:
            self.downsample = nn.Sequential(nn.Conv2d(inplanes, out, 1, stride=stride, bias=False), nn.BatchNorm2d(out))

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = F.relu(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        return F.relu(y + (x if self.downsample is None else self.downsample(x)))


class ResNet50(nn.Module):
    def __init__(self, classes: int = 1000):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
                                  nn.MaxPool2d(3, stride=2, padding=1))
        layers, inplanes = [], 64
        for planes, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
            for i in range(blocks):
                layers.append(Bottleneck(inplanes, planes, stride if i == 0 else 1))
                inplanes = planes * 4
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(2048, classes)

    def forward(self, x):
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(self.layers(self.stem(x)), 1), 1))


def train_step(model, optimizer, batch: int, image: int):
    images = torch.randn(batch, 3, image, image, device="npu")
    labels = torch.randint(0, 1000, (batch,), device="npu")
    with torch.autocast("npu", dtype=torch.float16):
        loss = F.cross_entropy(model(images), labels)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return loss


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--image", type=int, default=224)
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    model = ResNet50().to("npu")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, foreach=True)
    train_step(model, optimizer, args.batch, args.image)  # the first step also creates the optimizer's state
    with softnpu.cost.step():
        return train_step(model, optimizer, args.batch, args.image)


if __name__ == "__main__":
    main()
