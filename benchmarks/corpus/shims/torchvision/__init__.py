"""A stand-in for ``torchvision`` (the corpus must not download data, and the PyPI wheel of
torchvision is CUDA-linked): ``datasets`` gives random images of the real shapes, ``transforms``
the few transforms the corpus scripts use. Only what the corpus needs is here."""

from torchvision import datasets, transforms

__all__ = ["datasets", "transforms"]
__version__ = "0.0.0+corpus-shim"
