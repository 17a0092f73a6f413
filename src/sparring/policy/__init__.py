"""Policies: what picks the next assistant message.

Public API: the :class:`Policy` protocol and its records (:class:`ActRequest`,
:class:`Action`; an action's tokens are a :class:`sparring.trajectory.TokenTrace`), and :func:`make_policy`, which builds one
from a spec (``oracle``, ``random``, ``adversarial[:CLASS]``,
``openai:URL#MODEL``, ``hf:PATH``). Backends (``policy.openai_http``,
``policy.hf``, ``policy.scripted``) are imported by :func:`make_policy` only
when asked for, so heavy dependencies stay unloaded.
"""

from sparring.policy.base import Action, ActRequest, Policy
from sparring.policy.spec import make_policy

__all__ = ["ActRequest", "Action", "Policy", "make_policy"]
