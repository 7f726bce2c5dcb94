"""imagekit: build and validate PyTorch GPU container images from a declared version matrix."""

__version__ = "0.1.0"
