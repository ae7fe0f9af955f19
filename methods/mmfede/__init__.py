"""MMFedE, the multimodal FedMKGC backbone of MMFeD3-HidE (Alg. 1 of the seed paper)."""
