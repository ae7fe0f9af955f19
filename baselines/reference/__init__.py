"""Competence references of the graph track, computed centrally (no federation), one module each.

Every (dataset, task) cell of a table shows them as rows: ``chance`` (the score of a trivial
predictor) and ``linear`` (a linear model of the features, fitted in closed form or by a
fixed number of full-batch steps), beside ``centralized`` (the GNN on the pooled graph,
``baselines/basic/centralized.py``). They are ordinary registered algorithms with
``centralized = True``: the engine gives them the pooled view as their only client, they
fit on its training rows only, and the task's own ``evaluate`` (or, for ``chance``, the
task's own scoring conventions) scores them on each client's data, so their numbers are
ordinary result records weighted over the same split nodes as every other method.
"""
