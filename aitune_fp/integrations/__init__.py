"""Integrations with other tuning libraries; each is optional and imported only when used.

``aitune_fp.integrations.aitune`` gates NVIDIA AITune's own strategies (extra ``aitune``).
Nothing here is imported by the rest of the package at module level.
"""
