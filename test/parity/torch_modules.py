"""PyTorch versions of gridnn modules that torch.nn does not have, shared by the parity
fixture generator (test/parity/make_layer_fixtures.py) and the benchmark comparison
(bench/compare_torch.py)."""
import torch


class SelfAttention3d(torch.nn.Module):
    """DESIGN §5 / models/layers/attention.h: y = gamma * V softmax(Q^T K)^T + x, with Q, K, V
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
