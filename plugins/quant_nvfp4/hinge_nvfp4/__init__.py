"""hinge's NVFP4 quantizer (plugin ``nvfp4``): ModelOpt checkpoints, ``hinge quantize``, kernels."""

__version__ = "0.1.0"
