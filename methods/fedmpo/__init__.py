"""FedMPO (missing-modality robust federated multimodal graph learning): see ``fedmpo.py``."""
