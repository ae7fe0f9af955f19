"""Model parts: per-modality encoders, fusions and GNN backbones, all registered by name."""
