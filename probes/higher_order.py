"""Higher-order gradients: d2(x^3)/dx2, gradgradcheck, a Hessian-vector product."""

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
    x = torch.tensor(1.0, requires_grad=True, device=device)
    y = x**3
    (first,) = torch.autograd.grad(y, x, create_graph=True)
    rec.close_to("dy/dx of x^3 at 1", first.item(), 3.0)
    (second,) = torch.autograd.grad(first, x)
    rec.close_to("d2y/dx2 of x^3 at 1", second.item(), 6.0)

    torch.manual_seed(0)
    t = torch.randn(4, dtype=torch.float64, device=device, requires_grad=True)
    ok = torch.autograd.gradgradcheck(lambda v: (v.sin() * v**2).sum(), (t,))
    rec.check("gradgradcheck on sin(x)*x^2", ok, "second derivatives agree numerically")

    # f(v) = v^T A v has Hessian A + A^T; H @ u from autograd must equal it.
    a = torch.randn(5, 5, dtype=torch.float64, device=device)
    v = torch.randn(5, dtype=torch.float64, device=device, requires_grad=True)
    u = torch.randn(5, dtype=torch.float64, device=device)
    (grad,) = torch.autograd.grad(v @ a @ v, v, create_graph=True)
    (hvp,) = torch.autograd.grad(grad, v, grad_outputs=u)
    analytic = (a + a.T) @ u
    err = (hvp - analytic).abs().max().item()
    rec.check("Hessian-vector product of v^T A v", err < 1e-10, f"max abs error {err:.3g}")
    rec.metric("hvp_max_abs_error", err)
    return rec.report()


if __name__ == "__main__":
    main_for(NAME, run)
