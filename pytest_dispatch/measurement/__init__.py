"""Measuring: the recorder of WebGPU calls, measurement sources, the meter and its instruments
(timed, counts only, counted instructions), GPU timestamps, the encodings, the adapter."""
