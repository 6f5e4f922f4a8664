"""ember's own definitions of four torchvision architectures, needing only torch.

There is no CPU build of torchvision on PyPI, so the benchmark zoo (ember/tools/zoo.py,
the ``*_ours`` entries) and the model tests (tests/models.py) build these instead:

- ``ResNet``      ResNet v1.5 with bottleneck blocks; the defaults are resnet50;
- ``DenseNet``    dense blocks and transitions; the defaults are densenet121;
- ``MobileNetV2`` inverted residuals, depthwise convolutions, ReLU6; the
                  defaults are mobilenet_v2 (width 1.0);
- ``ViT``         ViT-B/16: patch embedding, class token, learned positions,
                  pre-norm blocks; attention is spelled out (matmul, softmax,
                  matmul) where torchvision calls nn.MultiheadAttention.

With their default arguments the first three have torchvision's layers and
parameter counts (25,557,032; 7,978,856; 3,504,872), and ViT has vit_b_16's
(86,567,656 at 224 x 224).  Dropout layers are left out: the zoo sets every
dropout to 0 anyway.  The constructors keep PyTorch's default initialisation
(the tests depend on the random stream they draw); ``init_like_torchvision``
redoes it the way torchvision's constructors do, for the benchmark.  No
weights are ever loaded.
"""
from __future__ import annotations

from typing import List, Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F


# ---------------------------------------------------------------- ResNet
class Bottleneck(nn.Module):
    """ResNet v1.5 bottleneck: 1x1 reduce, 3x3 (stride here), 1x1 expand x4."""
    expansion = 4

    def __init__(self, cin: int, width: int, stride: int = 1):
        super().__init__()
        cout = width * self.expansion
        self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, cout, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False),
                                            nn.BatchNorm2d(cout))

    def forward(self, x):
        idt = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + idt)


class ResNet(nn.Module):
    """ResNet-50's shape: 7x7/2 stem, 3x3/2 max pool, four bottleneck stages,
    global average pool, linear head.  layers=(3, 4, 6, 3), width=64 is ResNet-50."""

    def __init__(self, layers: Sequence[int] = (3, 4, 6, 3), width: int = 64, num_classes: int = 1000):
        super().__init__()
        self.conv1 = nn.Conv2d(3, width, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        cin = width
        stages = []
        for i, n in enumerate(layers):
            w = width * 2 ** i
            blocks = []
            for j in range(n):
                blocks.append(Bottleneck(cin, w, stride=2 if (j == 0 and i > 0) else 1))
                cin = w * Bottleneck.expansion
            stages.append(nn.Sequential(*blocks))
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(cin, num_classes)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


# ---------------------------------------------------------------- DenseNet
class DenseLayer(nn.Module):
    def __init__(self, cin: int, growth: int, bn_size: int):
        super().__init__()
        self.norm1 = nn.BatchNorm2d(cin)
        self.conv1 = nn.Conv2d(cin, bn_size * growth, 1, bias=False)
        self.norm2 = nn.BatchNorm2d(bn_size * growth)
        self.conv2 = nn.Conv2d(bn_size * growth, growth, 3, padding=1, bias=False)

    def forward(self, feats: List[torch.Tensor]) -> torch.Tensor:
        x = torch.cat(feats, 1)
        x = self.conv1(F.relu(self.norm1(x)))
        return self.conv2(F.relu(self.norm2(x)))


class DenseBlock(nn.Module):
    def __init__(self, n: int, cin: int, growth: int, bn_size: int):
        super().__init__()
        self.layers = nn.ModuleList(DenseLayer(cin + i * growth, growth, bn_size) for i in range(n))

    def forward(self, x):
        feats = [x]
        for layer in self.layers:
            feats.append(layer(feats))
        return torch.cat(feats, 1)


class DenseNet(nn.Module):
    """torchvision's densenet121 shape: blocks=(6, 12, 24, 16), growth 32,
    64 initial features, bn_size 4, transitions halving channels and size."""

    def __init__(self, blocks: Sequence[int] = (6, 12, 24, 16), growth: int = 32, init: int = 64,
                 bn_size: int = 4, num_classes: int = 1000):
        super().__init__()
        feats = [nn.Conv2d(3, init, 7, stride=2, padding=3, bias=False), nn.BatchNorm2d(init),
                 nn.ReLU(inplace=True), nn.MaxPool2d(3, stride=2, padding=1)]
        c = init
        for i, n in enumerate(blocks):
            feats.append(DenseBlock(n, c, growth, bn_size))
            c += n * growth
            if i != len(blocks) - 1:
                feats += [nn.BatchNorm2d(c), nn.ReLU(inplace=True), nn.Conv2d(c, c // 2, 1, bias=False),
                          nn.AvgPool2d(2, stride=2)]
                c //= 2
        feats.append(nn.BatchNorm2d(c))
        self.features = nn.Sequential(*feats)
        self.classifier = nn.Linear(c, num_classes)

    def forward(self, x):
        x = F.relu(self.features(x))
        x = F.adaptive_avg_pool2d(x, (1, 1))
        return self.classifier(torch.flatten(x, 1))


# ---------------------------------------------------------------- MobileNetV2
def _make_divisible(v: float, divisor: int = 8) -> int:
    new = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return new + divisor if new < 0.9 * v else new


def _conv_bn(cin, cout, k, stride=1, groups=1, act=True):
    layers = [nn.Conv2d(cin, cout, k, stride, (k - 1) // 2, groups=groups, bias=False),
              nn.BatchNorm2d(cout)]
    if act:
        layers.append(nn.ReLU6(inplace=True))
    return layers


class InvertedResidual(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int, expand: int):
        super().__init__()
        hidden = cin * expand
        layers = [] if expand == 1 else _conv_bn(cin, hidden, 1)
        layers += _conv_bn(hidden, hidden, 3, stride, groups=hidden)      # depthwise
        layers += _conv_bn(hidden, cout, 1, act=False)                    # linear bottleneck
        self.conv = nn.Sequential(*layers)
        self.use_res = stride == 1 and cin == cout

    def forward(self, x):
        return x + self.conv(x) if self.use_res else self.conv(x)


class MobileNetV2(nn.Module):
    """torchvision's mobilenet_v2 (width_mult=1.0, the full setting table);
    ``width`` scales channels and ``setting`` may be cut down for CI."""
    SETTING = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
               (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1))

    def __init__(self, width: float = 1.0, setting=SETTING, last: int = 1280, num_classes: int = 1000):
        super().__init__()
        cin = _make_divisible(32 * width)
        last = _make_divisible(last * max(1.0, width))
        feats = _conv_bn(3, cin, 3, 2)
        for t, c, n, s in setting:
            cout = _make_divisible(c * width)
            for i in range(n):
                feats.append(InvertedResidual(cin, cout, s if i == 0 else 1, t))
                cin = cout
        feats += _conv_bn(cin, last, 1)
        self.features = nn.Sequential(*feats)
        self.classifier = nn.Linear(last, num_classes)

    def forward(self, x):
        x = self.features(x)
        x = F.adaptive_avg_pool2d(x, (1, 1))
        return self.classifier(torch.flatten(x, 1))


# ---------------------------------------------------------------- ViT
class Attention(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.scale = (dim // heads) ** -0.5
        self.qkv = nn.Linear(dim, dim * 3)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        b, n, c = x.shape
        qkv = self.qkv(x).reshape(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        attn = (q * self.scale) @ k.transpose(-2, -1)
        attn = attn.softmax(dim=-1)
        x = (attn @ v).transpose(1, 2).reshape(b, n, c)
        return self.proj(x)


class Block(nn.Module):
    def __init__(self, dim: int, heads: int, mlp_ratio: float = 4.0):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.attn = Attention(dim, heads)
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        hidden = int(dim * mlp_ratio)
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))


class ViT(nn.Module):
    """ViT-B/16's shape (timm's vit_base_patch16_224 without fused attention):
    16x16 patch embedding, class token, learned positions, 12 pre-norm blocks
    of width 768 with 12 heads, final LayerNorm, linear head on the class token."""

    def __init__(self, image: int = 224, patch: int = 16, dim: int = 768, depth: int = 12,
                 heads: int = 12, num_classes: int = 1000):
        super().__init__()
        self.patch_embed = nn.Conv2d(3, dim, patch, stride=patch)
        n = (image // patch) ** 2
        self.cls_token = nn.Parameter(torch.randn(1, 1, dim) * 0.02)
        self.pos_embed = nn.Parameter(torch.randn(1, n + 1, dim) * 0.02)
        self.blocks = nn.Sequential(*[Block(dim, heads) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.head = nn.Linear(dim, num_classes)

    def forward(self, x):
        x = self.patch_embed(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1) + self.pos_embed
        x = self.norm(self.blocks(x))
        return self.head(x[:, 0])



# ---------------------------------------------------------------- initialisation
def init_like_torchvision(model: nn.Module) -> nn.Module:
    """Initialise ``model`` (a ResNet, DenseNet or MobileNetV2 from here) the way
    torchvision's constructor initialises the same architecture, drawing from
    torch's global RNG; a ViT keeps PyTorch's default initialisation (torchvision
    zeroes vit_b_16's head, which would make every logit 0)."""
    if isinstance(model, ViT):
        return model
    if not isinstance(model, (ResNet, DenseNet, MobileNetV2)):
        raise TypeError(f"no torchvision initialisation for {type(model).__name__}")
    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            if isinstance(model, DenseNet):
                nn.init.kaiming_normal_(m.weight)
            else:
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.BatchNorm2d):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Linear):
            if isinstance(model, MobileNetV2):
                nn.init.normal_(m.weight, 0, 0.01)
            if not isinstance(model, ResNet):    # torchvision's ResNet keeps Linear's default
                nn.init.zeros_(m.bias)
    return model
