"""kevin-agent: write, verify and commit CUDA kernels for PyTorch modules with the Kevin model."""

__version__ = "0.1.0"
