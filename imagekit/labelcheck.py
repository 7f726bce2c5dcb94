"""Do an image's labels and CUDA environment agree with imagekit's compatibility data? Pure.

Labels are what schedulers, `imagekit doctor` and people read before they pull an image, so a
label that disagrees with the data (a minimum driver copied from the wrong CUDA, a missing
architecture) misleads everyone downstream. These checks need only `docker image inspect`.
"""

from __future__ import annotations

from imagekit.checks import Check
from imagekit.compat import CompatData
from imagekit.plan import nvidia_require_cuda

PREFIX = "io.imagekit."


def label_checks(labels: dict[str, str], env: dict[str, str], data: CompatData) -> list[Check]:
    """Checks that the CUDA labels and NVIDIA_* variables of an image match the data.

    A CPU image must carry neither CUDA labels nor NVIDIA_REQUIRE_CUDA.
    """
    checks: list[Check] = []

    def add(name: str, ok: bool, detail: str) -> None:
        checks.append(Check(name, bool(ok), detail))

    cuda = labels.get(PREFIX + "cuda")
    torch = labels.get(PREFIX + "torch", "")
    if not cuda:
        stray = sorted(k for k in ("cudnn", "nccl", "min-driver") if labels.get(PREFIX + k))
        stray += ["NVIDIA_REQUIRE_CUDA"] if "NVIDIA_REQUIRE_CUDA" in env else []
        add("a CPU image carries no CUDA labels", not stray, f"found {stray}" if stray else "none")
        return checks

    problem = data.check_pair(torch, cuda)
    if problem:
        add(
            "the compatibility data knows this torch and CUDA", False, f"{problem}; update imagekit"
        )
        return checks
    variant = data.torch[torch].variants[cuda]
    driver = data.cuda[cuda].min_driver

    def agree(key: str, want: str) -> None:
        seen = labels.get(PREFIX + key)
        add(f"label {key} agrees with the data", seen == want, f"label {seen!r}, data {want!r}")

    agree("min-driver", driver)
    agree("cudnn", variant.cudnn)
    agree("nccl", variant.nccl)
    seen_archs = labels.get(PREFIX + "cuda-archs", "").split()
    missing = [a for a in variant.archs if a not in seen_archs]
    extra = [a for a in seen_archs if a not in variant.archs]
    add(
        "label cuda-archs agrees with the data",
        not missing and not extra,
        f"label lacks {missing}, adds {extra}"
        if missing or extra
        else f"{' '.join(seen_archs)} (torch {torch} cu{cuda.replace('.', '')})",
    )
    want_require = nvidia_require_cuda(cuda)
    seen_require = env.get("NVIDIA_REQUIRE_CUDA")
    add(
        "NVIDIA_REQUIRE_CUDA matches the CUDA of the image",
        seen_require == want_require,
        f"env {seen_require!r}, expected {want_require!r}",
    )
    capabilities = set(env.get("NVIDIA_DRIVER_CAPABILITIES", "").split(","))
    add(
        "NVIDIA_DRIVER_CAPABILITIES include compute and utility",
        {"compute", "utility"} <= capabilities or "all" in capabilities,
        env.get("NVIDIA_DRIVER_CAPABILITIES", "unset"),
    )
    return checks
