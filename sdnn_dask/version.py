"""The package version, below every module that writes it (stores, records)."""

__version__ = "0.1.0"
