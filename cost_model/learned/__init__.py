"""Learned parts of the cost model: op-level regressors baked into a learned HardwareProfile, and a
plan-level correction of the analytical step time, with grouped-CV evaluation and JSON persistence."""
