"""The ``flashmla`` backend: DeepSeek's FlashMLA dense decode (`backend`), its ops (`ops`)."""

from backends.flashmla.backend import FlashMLABackend

__all__ = ["FlashMLABackend"]
