"""Hookimpls of the ``radix`` plugin (registered through the ``hinge.plugins`` entry point)."""
