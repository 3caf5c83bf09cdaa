"""autoplan: plan, predict and run the parallel training of large language models."""
from autoplan.specs import AUTOPLAN_VERSION as __version__  # noqa: F401
