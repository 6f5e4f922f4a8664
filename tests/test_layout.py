"""Channels-last activations around convolutions (src/layout.c): the values
ember's kernels write for a convolution torch runs get NHWC strides, the
convolution's result is taken channels-last as torch returns it, and the
kernels between them order their loops by those strides, on the CPU and on
CUDA."""
from __future__ import annotations

import glob
import re

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from conftest import DEVICE, EAGER, check

pytestmark = pytest.mark.skipif(EAGER or DEVICE != "cpu", reason="ember's CPU layout planning")


class _Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 8, 3, padding=1)
        self.b1 = nn.BatchNorm2d(8)
        self.c2 = nn.Conv2d(8, 8, 3, padding=1, groups=2)
        self.b2 = nn.BatchNorm2d(8)
        self.c3 = nn.Conv2d(8, 16, 1, stride=2)
        self.fc = nn.Linear(16, 5)

    def forward(self, x):
        y = F.relu(self.b1(self.c1(x)))
        y = F.relu(self.b2(self.c2(y)) + y)   # a residual add read in NHWC
        y = self.c3(y * torch.sigmoid(y))
        return self.fc(y.mean((2, 3))), y


def _model(train: bool):
    torch.manual_seed(0)
    m = _Net().train(train)
    with torch.no_grad():
        for b in (m.b1, m.b2):
            b.running_mean.uniform_(-0.5, 0.5)
            b.running_var.uniform_(0.5, 2)
    return m


def _nhwc_values(dump_dir):
    """The 4-d values of the dumped graphs with NHWC strides (channels stride 1)."""
    found = []
    for path in glob.glob(str(dump_dir / "run_*" / "graph_*" / "graph.txt")):
        for line in open(path):
            m = re.match(r"v\d+\s+\S+\s+\[(\d+), (\d+), (\d+), (\d+)\] strides \((\d+), (\d+), (\d+), (\d+)\)", line)
            if m and int(m.group(2)) > 1 and int(m.group(6)) == 1 and int(m.group(8)) == int(m.group(2)):
                found.append(line.split()[0])
    return found


def test_conv_net_inference(monkeypatch, tmp_path):
    monkeypatch.setenv("EMBER_DEBUG", "1")
    monkeypatch.setenv("EMBER_DEBUG_DIR", str(tmp_path))
    m = _model(False)
    with torch.no_grad():
        check(m, lambda: (torch.randn(2, 3, 12, 10),))
    nhwc = _nhwc_values(tmp_path)
    # c2's and c3's inputs (kernel results) and c2's result; c3's result is
    # returned, so it keeps torch's layout
    assert len(nhwc) >= 3, nhwc


def test_big_weight_small_image_stays_nchw(monkeypatch, tmp_path):
    # a convolution whose weight has over 1000 elements per output position
    # (here 256*256*9 = 589824 against 2*4*4 = 32 positions) keeps NCHW on
    # the CPU: oneDNN would reorder the NCHW weight at every call
    monkeypatch.setenv("EMBER_DEBUG", "1")
    monkeypatch.setenv("EMBER_DEBUG_DIR", str(tmp_path))
    torch.manual_seed(0)
    m = nn.Sequential(nn.Conv2d(3, 256, 1), nn.ReLU(), nn.Conv2d(256, 256, 3, padding=1), nn.ReLU()).eval()
    with torch.no_grad():
        check(m, lambda: (torch.randn(2, 3, 4, 4),))
    assert not _nhwc_values(tmp_path)


def test_conv_net_training_step():
    # training: the activations are saved for the backward (graph outputs),
    # so they keep torch's layout; the step must still equal eager's
    m = _model(True)

    def step(x):
        out, feat = m(x)
        loss = out.square().mean() + feat.mean()
        loss.backward()
        return loss

    check(step, lambda: (torch.randn(2, 3, 12, 10),), strict=False)
