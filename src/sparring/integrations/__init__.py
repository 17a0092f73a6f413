"""Adapters from the Environment to the loops people already use: TRL, verifiers, OpenEnv, Gymnasium.

Each adapter is one thin module over :class:`sparring.env.Environment`, and each
third-party dependency is an optional extra (``pip install sparring[trl]``,
``[verifiers]``, ``[openenv]``, ``[gym]``): import the module you need
(``from sparring.integrations import trl``); nothing is imported here.
"""
