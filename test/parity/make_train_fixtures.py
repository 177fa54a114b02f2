#!/usr/bin/env python3
"""Writes test/parity/fixtures/resattnet_step.safetensors: one training step of a small
ResAttNet3D (depth 18, width 2, attention after layer3 and layer4, 1 input channel, 3
classes) in PyTorch, float64 on the CPU, stored as float32, for gridnn-train --dump-step
to match (test/models/train/test_train_parity.cpp; fp32 CPU, relative error <= 1e-4 per tensor).

Tensors:
  init.<name>            the weights and buffers the step starts from (PyTorch names); the
                         attention gammas, BatchNorm affine parameters and running
                         statistics are random, so every path carries a gradient
  x, y                   the batch: f32 [4, 1, 32, 40, 36] and i64 [4] (large enough that
                         the BatchNorms of layer4 see 16 values per channel: with fewer,
                         fp32 itself, PyTorch's included, strays beyond 1e-4 of float64)
  expect.logits, expect.loss, expect.grad.<param>
  <opt>.<name>           every parameter and buffer after one step of optimizer <opt>:
                         sgd (momentum 0.9, Nesterov, weight decay 5e-4, lr 0.05) and
                         adamw (lr 1e-3, weight decay 0.01, PyTorch's other defaults)
The metadata holds the model and optimizer settings as JSON.

Run with a Python that has torch and safetensors (the repository's .venv):
    .venv/bin/python test/parity/make_train_fixtures.py
"""
import json
import sys

import torch
import torch.nn.functional as F

from torch_modules import ResAttNet3D, randomized_state, write_fixture

MODEL = {"depth": 18, "width": 2, "in_channels": 1, "classes": 3, "att3": True, "att4": True}
OPTIMIZERS = {
    "sgd": {"kind": "sgd", "lr": 0.05, "momentum": 0.9, "nesterov": True, "weight_decay": 5e-4},
    "adamw": {"kind": "adamw", "lr": 1e-3, "weight_decay": 0.01},
}


def make_optimizer(config, params):
    if config["kind"] == "sgd":
        return torch.optim.SGD(params, lr=config["lr"], momentum=config["momentum"],
                               nesterov=config["nesterov"], weight_decay=config["weight_decay"])
    return torch.optim.AdamW(params, lr=config["lr"], weight_decay=config["weight_decay"])


def initial_state(generator):
    return randomized_state(ResAttNet3D(**MODEL).double(), generator, {"att3": 0.5, "att4": -0.3})


def step(state, x, y, optimizer):
    model = ResAttNet3D(**MODEL).double()
    model.load_state_dict(state)
    model.train()
    opt = make_optimizer(optimizer, model.parameters())
    logits = model(x)
    loss = F.cross_entropy(logits, y)
    opt.zero_grad()
    loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters()}
    opt.step()
    return logits.detach(), loss.detach().reshape([]), grads, model.state_dict()


def main():
    torch.manual_seed(2026)
    generator = torch.Generator().manual_seed(2026)
    state = initial_state(generator)
    x = torch.randn([4, 1, 32, 40, 36], generator=generator, dtype=torch.float64).float().double()
    y = torch.tensor([2, 0, 1, 1], dtype=torch.int64)

    out = {f"init.{k}": v for k, v in state.items()}
    out["x"], out["y"] = x, y
    for i, (name, optimizer) in enumerate(OPTIMIZERS.items()):
        logits, loss, grads, after = step(state, x, y, optimizer)
        if i == 0:
            out["expect.logits"], out["expect.loss"] = logits, loss
            out.update({f"expect.grad.{k}": g for k, g in grads.items()})
        out.update({f"{name}.{k}": v for k, v in after.items()})
    metadata = {"producer": "test/parity/make_train_fixtures.py", "torch": torch.__version__,
                "model": json.dumps(MODEL), "optimizers": json.dumps(OPTIMIZERS)}
    write_fixture("resattnet_step.safetensors", out, metadata)
    return 0


if __name__ == "__main__":
    sys.exit(main())
