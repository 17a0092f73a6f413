"""Training: GRPO on the policy's own tokens, configured by :class:`RLConfig`, run by :func:`run_rl`.

Public API: :class:`RLConfig` / :func:`load_config` and the advantage math
(:func:`group_advantages`). The recipe (``train.recipe.RLRecipe``, one method
per stage, and ``train.recipe.run_rl`` over it) and the torch parts
(``train.grpo``, ``train.model``, ``train.lora``) are imported where used, so
importing this package does not load torch.
"""

from sparring.train.advantages import group_advantages, grouped_advantages
from sparring.train.config import RLConfig, load_config

__all__ = ["RLConfig", "group_advantages", "grouped_advantages", "load_config"]
