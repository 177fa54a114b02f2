#!/usr/bin/env python3
"""Writes test/parity/fixtures/layers.safetensors: for every layer of models/layers/, a
small input, the layer's parameters, a loss weight w, the output y and the gradients of
L = sum(y * w) with respect to the input and every parameter, all computed by PyTorch on
the CPU in float64 and stored as float32. The C++ parity tests (test/models/layers/
test_parity.cpp) load the parameters into gridnn's layers and compare (fp32 CPU,
relative error <= 1e-5 per tensor).

Tensor names: "<case>.<role>", roles x, w, y, dx, and "param.<name>" / "grad.<name>"
with PyTorch's parameter names ("param.weight", "grad.bias", "param.query.weight").
BatchNorm cases also store "buffer.<name>" after the step. The metadata entry "<case>"
holds the case's configuration as JSON.

Run with a Python that has torch and safetensors (the repository's .venv):
    .venv/bin/python test/parity/make_layer_fixtures.py
"""
import json
import sys

import torch
import torch.nn.functional as F

from torch_modules import SelfAttention3d, write_fixture


def layer_cases():
    """(name, module, input shape, configuration) for every case."""
    return [
        ("conv3d_k3_s2_p1", torch.nn.Conv3d(3, 4, 3, stride=2, padding=1), [2, 3, 7, 6, 5],
         {"in": 3, "out": 4, "kernel": [3, 3, 3], "stride": [2, 2, 2], "padding": [1, 1, 1], "bias": True}),
        ("conv3d_k7_s2_p3_nobias", torch.nn.Conv3d(2, 3, 7, stride=2, padding=3, bias=False), [1, 2, 9, 8, 7],
         {"in": 2, "out": 3, "kernel": [7, 7, 7], "stride": [2, 2, 2], "padding": [3, 3, 3], "bias": False}),
        ("conv3d_k1", torch.nn.Conv3d(5, 2, 1), [2, 5, 3, 4, 2],
         {"in": 5, "out": 2, "kernel": [1, 1, 1], "stride": [1, 1, 1], "padding": [0, 0, 0], "bias": True}),
        ("maxpool3d_k3_s2_p1", torch.nn.MaxPool3d(3, stride=2, padding=1), [2, 3, 7, 6, 5],
         {"kernel": [3, 3, 3], "stride": [2, 2, 2], "padding": [1, 1, 1]}),
        ("avgpool3d_k2_s2", torch.nn.AvgPool3d(2, stride=2), [2, 3, 6, 4, 5],
         {"kernel": [2, 2, 2], "stride": [2, 2, 2], "padding": [0, 0, 0]}),
        ("globalavgpool3d", torch.nn.AdaptiveAvgPool3d(1), [2, 4, 3, 5, 2], {}),
        ("batchnorm3d_train", torch.nn.BatchNorm3d(4), [3, 4, 3, 2, 5], {"channels": 4, "training": True}),
        ("linear", torch.nn.Linear(10, 6), [4, 10], {"in": 10, "out": 6, "bias": True}),
        ("attention", SelfAttention3d(16), [2, 16, 3, 2, 2], {"channels": 16, "gamma": 0.7}),
    ]


def run_case(name, module, shape, config, generator):
    module = module.double()
    with torch.no_grad():
        for p in module.parameters():  # non-trivial values, also for BatchNorm's 1 / 0
            p.copy_(torch.rand(p.shape, generator=generator, dtype=torch.float64) * 2 - 1)
        if name == "attention":
            module.gamma.fill_(config["gamma"])
    module.train()
    x = (torch.rand(shape, generator=generator, dtype=torch.float64) * 2 - 1).requires_grad_()
    params = {n: p.detach().clone() for n, p in module.named_parameters()}
    y = module(x)
    if name == "globalavgpool3d":
        y = y.reshape(shape[0], shape[1])  # gridnn's GlobalAvgPool3d returns [N, C]
    w = torch.rand(y.shape, generator=generator, dtype=torch.float64) * 2 - 1
    (y * w).sum().backward()

    out = {f"{name}.x": x.detach(), f"{name}.w": w, f"{name}.y": y.detach(), f"{name}.dx": x.grad}
    for n, p in module.named_parameters():
        out[f"{name}.param.{n}"] = params[n]
        out[f"{name}.grad.{n}"] = p.grad
    for n, b in module.named_buffers():
        out[f"{name}.buffer.{n}"] = b.detach().clone()
    return {k: (v.float() if v.is_floating_point() else v).contiguous() for k, v in out.items()}


def loss_case(generator):
    logits = (torch.rand([5, 7], generator=generator, dtype=torch.float64) * 6 - 3).requires_grad_()
    labels = torch.tensor([0, 6, 3, 3, 1], dtype=torch.int64)
    loss = F.cross_entropy(logits, labels)
    loss.backward()
    return {"cross_entropy.logits": logits.detach().float(), "cross_entropy.labels": labels,
            "cross_entropy.loss": loss.detach().float().reshape(1),
            "cross_entropy.dlogits": logits.grad.float()}


def main():
    generator = torch.Generator().manual_seed(2026)
    tensors, metadata = {}, {"producer": "test/parity/make_layer_fixtures.py",
                             "torch": torch.__version__}
    for name, module, shape, config in layer_cases():
        tensors.update(run_case(name, module, shape, config, generator))
        metadata[name] = json.dumps(config)
    tensors.update(loss_case(generator))
    metadata["cross_entropy"] = json.dumps({"classes": 7})
    write_fixture("layers.safetensors", tensors, metadata)
    return 0


if __name__ == "__main__":
    sys.exit(main())
