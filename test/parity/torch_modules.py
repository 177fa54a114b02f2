"""PyTorch versions of gridnn modules that torch.nn does not have, shared by the parity
fixture generators (test/parity/make_*_fixtures.py) and the benchmark comparison
(bench/compare_torch.py); and write_fixture, how the generators save what they made."""
import os

import torch


class SelfAttention3d(torch.nn.Module):
    """docs/design.md §5 / models/layers/attention.h: y = gamma * V softmax(Q^T K)^T + x, with Q, K, V
    from 1x1x1 convolutions (C -> C/8, C/8, C) and softmax over the keys."""

    def __init__(self, channels, gamma=0.0):
        super().__init__()
        self.query = torch.nn.Conv3d(channels, channels // 8, 1)
        self.key = torch.nn.Conv3d(channels, channels // 8, 1)
        self.value = torch.nn.Conv3d(channels, channels, 1)
        self.gamma = torch.nn.Parameter(torch.full([1], float(gamma)))

    def forward(self, x):
        n, c = x.shape[:2]
        volume = x.shape[2] * x.shape[3] * x.shape[4]
        q = self.query(x).reshape(n, c // 8, volume)
        k = self.key(x).reshape(n, c // 8, volume)
        v = self.value(x).reshape(n, c, volume)
        a = torch.softmax(torch.bmm(q.transpose(1, 2), k), dim=-1)  # [n, N, N], rows: queries
        o = torch.bmm(v, a.transpose(1, 2)).reshape(x.shape)
        return self.gamma * o + x


class BasicBlock(torch.nn.Module):
    """models/nets/resattnet3d.h: torchvision's BasicBlock in 3D."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = torch.nn.Conv3d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.bn1 = torch.nn.BatchNorm3d(cout)
        self.conv2 = torch.nn.Conv3d(cout, cout, 3, padding=1, bias=False)
        self.bn2 = torch.nn.BatchNorm3d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = torch.nn.Sequential(
                torch.nn.Conv3d(cin, cout, 1, stride=stride, bias=False), torch.nn.BatchNorm3d(cout))

    def forward(self, x):
        h = torch.relu(self.bn1(self.conv1(x)))
        h = self.bn2(self.conv2(h))
        return torch.relu(h + (self.downsample(x) if self.downsample is not None else x))


class ResAttNet3D(torch.nn.Module):
    """docs/design.md §5 / models/nets/resattnet3d.h, with the same parameter and buffer names."""

    def __init__(self, depth=18, width=16, in_channels=1, classes=2, att3=True, att4=True):
        super().__init__()
        blocks = {18: [2, 2, 2, 2], 34: [3, 4, 6, 3]}[depth]
        self.conv1 = torch.nn.Conv3d(in_channels, width, 7, stride=2, padding=3, bias=False)
        self.bn1 = torch.nn.BatchNorm3d(width)
        self.maxpool = torch.nn.MaxPool3d(3, stride=2, padding=1)
        channels = width
        for i, n in enumerate(blocks):
            out = width << i
            layer = torch.nn.Sequential(*[
                BasicBlock(channels if b == 0 else out, out, 2 if b == 0 and i > 0 else 1) for b in range(n)])
            channels = out
            setattr(self, f"layer{i + 1}", layer)
            if (i == 2 and att3) or (i == 3 and att4):
                setattr(self, f"att{i + 1}", SelfAttention3d(channels))
        self.fc = torch.nn.Linear(channels, classes)

    def forward(self, x):
        h = self.maxpool(torch.relu(self.bn1(self.conv1(x))))
        for i in range(1, 5):
            h = getattr(self, f"layer{i}")(h)
            if hasattr(self, f"att{i}"):
                h = getattr(self, f"att{i}")(h)
        return self.fc(h.mean(dim=(2, 3, 4)))


def randomized_state(model, generator, gammas):
    """The state of `model` (float64) with the attention gammas set ({"att3": g3, "att4": g4}),
    BatchNorm affine parameters and running statistics drawn from `generator` (so every path
    carries a gradient), num_batches_tracked 7; rounded to float32 and back, so that gridnn,
    which reads float32, starts from the very same values."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("gamma"):
                p.fill_(gammas[name.split(".")[0]])
            elif ".bn" in name or name.startswith("bn1") or "downsample.1" in name:
                p.copy_(1 + 0.2 * (torch.rand(p.shape, generator=generator, dtype=torch.float64) - 0.5)
                        if name.endswith("weight") else
                        0.1 * (torch.rand(p.shape, generator=generator, dtype=torch.float64) - 0.5))
        for name, b in model.named_buffers():
            if name.endswith("running_mean"):
                b.copy_(0.1 * torch.randn(b.shape, generator=generator, dtype=torch.float64))
            elif name.endswith("running_var"):
                b.copy_(0.5 + torch.rand(b.shape, generator=generator, dtype=torch.float64))
            elif name.endswith("num_batches_tracked"):
                b.fill_(7)
    return {k: v.float().double() if v.is_floating_point() else v.clone() for k, v in model.state_dict().items()}


def write_fixture(file_name, tensors, metadata):
    """Saves `tensors` (float ones as float32, all contiguous) with `metadata` as
    test/parity/fixtures/<file_name> and says so."""
    from safetensors.torch import save_file

    tensors = {k: (v.float() if v.is_floating_point() else v).contiguous() for k, v in tensors.items()}
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", file_name)
    save_file(tensors, path, metadata=metadata)
    print(f"wrote {path}: {len(tensors)} tensors, {os.path.getsize(path)} bytes")
