"""Multimodal FL baselines adapted to graphs (the encoders feed the GNN): FedMAC, FedMVP, MH-pFLID, PEPSY."""
