"""KG-track (FedMKGC) baselines and bounds: FedE, S-Ind, MMInd; shared code in common.py."""
