"""FedMM-Bench: benchmark harness for federated multimodal graph learning with missing modalities."""

__version__ = "0.1.0"
