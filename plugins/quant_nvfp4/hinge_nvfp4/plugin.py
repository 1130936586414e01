"""Hookimpls of the ``nvfp4`` plugin (registered through the ``hinge.plugins`` entry point)."""
