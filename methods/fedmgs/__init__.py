"""FedMGS (modality-imbalanced federated graph learning by latent synthesis; Wu et al., CIKM 2026)."""
