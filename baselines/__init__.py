"""Baseline federated algorithms, one module each (registered in ALGORITHMS)."""
