"""cuDNN: conv2d forward and backward on the GPU, checked against a float64 CPU reference."""

from __future__ import annotations

from typing import Any

from _probekit import Recorder, main_for, probe_name, skip

NAME = probe_name(__file__)
PROBE = {
    "needs_gpu": True,
    "timeout_s": 120,
    "flavours": ["slim", "full"],
}


def run(device: str, expected: dict[str, Any]) -> dict[str, Any]:
    if not device.startswith("cuda"):
        return skip(NAME, "needs a GPU; this run has none")
    import torch

    rec = Recorder(NAME, device)
    torch.backends.cudnn.enabled = True
    rec.check("cuDNN is available", torch.backends.cudnn.is_available(), "")
    torch.manual_seed(0)
    x = torch.randn(8, 16, 32, 32, device=device, requires_grad=True)
    conv = torch.nn.Conv2d(16, 32, 3, padding=1).to(device)
    out = conv(x)
    out.square().mean().backward()

    x64 = x.detach().double().cpu().requires_grad_(True)
    ref = torch.nn.Conv2d(16, 32, 3, padding=1).double()
    ref.load_state_dict({k: v.double().cpu() for k, v in conv.state_dict().items()})
    out64 = ref(x64)
    out64.square().mean().backward()
    # cuDNN may use TF32 for convolutions by default: compare with a matching tolerance.
    tol = 2e-2 if torch.backends.cudnn.allow_tf32 else 1e-4
    fwd = ((out.detach().double().cpu() - out64).abs().max() / out64.abs().max()).item()
    assert x.grad is not None and x64.grad is not None
    bwd = ((x.grad.double().cpu() - x64.grad).abs().max() / x64.grad.abs().max()).item()
    rec.check("conv2d forward matches float64", fwd < tol, f"max relative error {fwd:.2e}")
    rec.check("conv2d backward matches float64", bwd < tol, f"max relative error {bwd:.2e}")
    rec.facts["cudnn_allow_tf32"] = torch.backends.cudnn.allow_tf32
    return rec.report()


if __name__ == "__main__":
    main_for(NAME, run)
