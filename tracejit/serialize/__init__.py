from .archive import save, SCHEMA_VERSION
from .loader import load

__all__ = ["load", "save", "SCHEMA_VERSION"]
