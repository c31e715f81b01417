"""An optional preload module that imports cleanly and does not touch CUDA."""
