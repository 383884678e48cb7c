"""pytest-dispatch: count and time WebGPU compute dispatches in pytest."""

__version__ = "0.1.0"
