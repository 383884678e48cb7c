"""Measuring: the recorder of WebGPU calls, the meter, GPU timestamps, the encodings, the adapter."""
