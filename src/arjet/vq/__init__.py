"""Image tokenizers: the `ImageTokenizer` contract and arjet's own Chameleon VQGAN (with its converter)."""

from .base import ImageTokenizer
from .chameleon_vqgan import ChameleonVQGAN
from .convert import convert_chameleon_vqgan

__all__ = ["ChameleonVQGAN", "ImageTokenizer", "convert_chameleon_vqgan"]
