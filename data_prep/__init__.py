"""Datasets, partitioners, missing-modality maskers and the federated-artifact builder."""
