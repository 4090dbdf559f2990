"""The version of the distribution, in one place (pyproject.toml reads it)."""

__version__ = "0.2.0"
