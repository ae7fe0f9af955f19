"""Advanced federated graph learning baselines (personalized / prototype / structure-aware)."""
