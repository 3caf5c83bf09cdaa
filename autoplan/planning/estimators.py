"""The one Framework and the one estimator a search, an estimate or a refusal uses, from the names the
user gave: the framework's documented facts with the fitted efficiencies merged in, for the run's dtype."""
from __future__ import annotations

from autoplan.specs import DEFAULT_FRAMEWORK, Framework, get_framework


def resolve_framework(framework: str | Framework, dtype: str) -> Framework:
    """The one Framework a search or an estimate uses, from its name: the documented facts with the
    fitted efficiency values (cost_model/data/constants.json) merged in, as a run in `dtype` uses
    them. A Framework passes through (already resolved). The search space, the framework's rules and
    the estimator all read this object."""
    if isinstance(framework, Framework):
        return framework
    from cost_model import load_constants

    return load_constants().framework(get_framework(framework)).for_dtype(dtype)


def make_estimator(model, training, cluster, profile, allow_tp_across_nodes: bool = False, calibration=None,
                   framework: str | Framework = DEFAULT_FRAMEWORK, memory_headroom_bytes: int = 0):
    """The estimator for `framework` (a name, or the Framework `resolve_framework` gave), calibrated or
    not; "fits" is judged against the capacity less `memory_headroom_bytes`."""
    from cost_model import Estimator

    facts = resolve_framework(framework, training.dtype)
    if calibration is not None:
        from cost_model.learned.calibration import CalibratedEstimator

        return CalibratedEstimator(model, training, cluster, profile, calibration,
                                   allow_tp_across_nodes=allow_tp_across_nodes, framework=facts,
                                   memory_headroom_bytes=memory_headroom_bytes)
    return Estimator(model, training, cluster, profile, allow_tp_across_nodes=allow_tp_across_nodes, framework=facts,
                     memory_headroom_bytes=memory_headroom_bytes)
