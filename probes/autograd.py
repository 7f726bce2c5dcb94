"""Autograd forward/backward: the textbook case, gradcheck on an MLP, define-by-run."""

from __future__ import annotations

from typing import Any

from _probekit import Recorder, main_for, probe_name

NAME = probe_name(__file__)
PROBE = {
    "needs_gpu": False,
    "timeout_s": 120,
    "flavours": ["slim", "full"],
}


def run(device: str, expected: dict[str, Any]) -> dict[str, Any]:
    import torch

    rec = Recorder(NAME, device)
    # y = w*x + b with x=2, w=3, b=1: dy/dx = w = 3, dy/dw = x = 2, dy/db = 1.
    x = torch.tensor(2.0, requires_grad=True, device=device)
    w = torch.tensor(3.0, requires_grad=True, device=device)
    b = torch.tensor(1.0, requires_grad=True, device=device)
    y = w * x + b
    rec.check(
        "y.grad_fn is AddBackward",
        "AddBackward" in type(y.grad_fn).__name__,
        f"saw {type(y.grad_fn).__name__}",
    )
    rec.close_to("y = w*x + b", y.item(), 7.0)
    y.backward()
    assert x.grad is not None and w.grad is not None and b.grad is not None
    rec.close_to("dy/dx", x.grad.item(), 3.0)
    rec.close_to("dy/dw", w.grad.item(), 2.0)
    rec.close_to("dy/db", b.grad.item(), 1.0)

    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2)).to(
        device=device, dtype=torch.float64
    )
    inputs = torch.randn(3, 4, dtype=torch.float64, device=device, requires_grad=True)
    ok = torch.autograd.gradcheck(lambda t: mlp(t), (inputs,), eps=1e-6, atol=1e-5)
    rec.check("gradcheck on a float64 MLP", ok, "numerical and analytical Jacobians agree")

    class Branchy(torch.nn.Module):
        """Python control flow in forward: the graph is whatever this call ran."""

        def __init__(self) -> None:
            super().__init__()
            self.scale = torch.nn.Parameter(torch.tensor(2.0, dtype=torch.float64))

        def forward(self, t: Any, steps: int) -> Any:
            for _ in range(steps):
                t = t * self.scale if t.sum() > 0 else t - self.scale
            return t.sum()

    module = Branchy().to(device)
    positive = torch.ones(3, dtype=torch.float64, device=device)
    module(positive, 3).backward()  # sum(s^3 * 1) over 3 items -> d/ds = 9 s^2 = 36
    grad = module.scale.grad
    rec.close_to("define-by-run loop gradient", grad.item() if grad is not None else 0.0, 36.0)
    module.scale.grad = None
    module(-positive, 1).backward()  # the other branch: sum(t - s) -> d/ds = -3
    grad = module.scale.grad
    rec.close_to("define-by-run branch gradient", grad.item() if grad is not None else 0.0, -3.0)
    rec.facts["device"] = device
    return rec.report()


if __name__ == "__main__":
    main_for(NAME, run)
