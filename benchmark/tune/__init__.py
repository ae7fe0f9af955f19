"""Equal-budget hyperparameter tuning on validation data (Optuna): search spaces declared
beside the options they search (:mod:`benchmark.tune.space`), one resumable study per
(method, setting, scale) (:mod:`benchmark.tune.study`), and the ``tune`` verb
(:mod:`benchmark.tune.verb`)."""

from benchmark.tune.space import Dimension, search_space
from benchmark.tune.study import DEFAULT_BUDGET, StudyResult, run_study, study_name, tuning_paths

__all__ = ["DEFAULT_BUDGET", "Dimension", "StudyResult", "run_study", "search_space", "study_name", "tuning_paths"]
