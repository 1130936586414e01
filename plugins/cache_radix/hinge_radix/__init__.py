"""hinge's radix prefix cache with recurrent-state checkpoints (plugin ``radix``)."""

__version__ = "0.1.0"
