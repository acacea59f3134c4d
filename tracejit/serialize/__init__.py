from .archive import load, save, SCHEMA_VERSION

__all__ = ["load", "save", "SCHEMA_VERSION"]
