"""Federated and distributed clustering for Flower."""

__version__ = "0.1.0"
