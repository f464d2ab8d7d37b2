"""The package version, importable without importing OpenDP, NumPy or the measurements (``opendp-wgm --version``)."""

__version__ = "0.1.0"
