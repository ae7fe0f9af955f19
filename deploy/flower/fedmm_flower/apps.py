"""The ServerApp and ClientApp of this Flower App: the benchmark's own (benchmark.backends.flower_deploy)."""

from benchmark.backends.flower_deploy import client_app, server_app

__all__ = ["client_app", "server_app"]
