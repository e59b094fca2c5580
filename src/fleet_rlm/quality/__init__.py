"""Evaluation and optimization: labels of captured turns, replays, ``fleet_metric`` and eval runs
(docs/evaluation.md). It runs on the service (its store, blobs and sandbox pool) and the engine."""
