"""AMFL track baselines (FedMBridge Appendix B.1), one module each."""
