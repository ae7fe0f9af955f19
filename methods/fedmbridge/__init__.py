"""FedMBridge (Chen & Zhang, ICML 2024): a topology-aware hypernetwork bridges AMFL clients."""
