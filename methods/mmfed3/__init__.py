"""MMFeD3, the federated dual distillation of MMFeD3-HidE (seed paper Sec. IV-D, Eq. 9-12)."""
