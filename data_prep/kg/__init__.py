"""Multimodal knowledge graphs: the KGDataset container, loaders (FB15K-237, its embedded subset) and a synthetic generator."""
