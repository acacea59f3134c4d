"""tracejit's version (pyproject.toml says the same): a module of its own, so the layers below the
package root (serialize writes it into every file) read it without importing the root."""
__version__ = "0.1.0"
