"""A stand-in for ``torchvision`` (the corpus must not download data, and the PyPI wheel of
torchvision is CUDA-linked): ``datasets`` gives random images of the real shapes (and an
``ImageFolder`` over files), ``transforms`` the few transforms the corpus scripts use,
``models`` an untrained AlexNet. Only what the corpus needs is here."""

from torchvision import datasets, models, transforms

__all__ = ["datasets", "models", "transforms"]
__version__ = "0.0.0+corpus-shim"
