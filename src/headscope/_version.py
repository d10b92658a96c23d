"""``headscope.__version__``, read from the installed package's metadata (pyproject.toml)."""

from importlib import metadata

try:
    __version__ = metadata.version("headscope")
except metadata.PackageNotFoundError:  # a source tree on sys.path without an install
    __version__ = "0+unknown"
