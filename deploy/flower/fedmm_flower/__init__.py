"""FedMM-Bench as a Flower App (see ../README.md)."""
