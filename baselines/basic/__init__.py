"""Basic federated baselines and bounds: Local, Centralized, FedAvg-Zero, FedProx, FedGCN, FedGraphSAGE."""
