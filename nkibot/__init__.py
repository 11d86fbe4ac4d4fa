"""nkibot: verified AWS Trainium NKI kernels from PyTorch modules and Triton kernels."""

__version__ = "0.1.0"
