"""Tensor and expert parallelism across ranks (one Ray actor per rank)."""
