"""A preload module that reads, at import, what torch/vLLM and the patch plugin read on the
H200: ``CUDA_VISIBLE_DEVICES`` (through ``os.environb``, as the read that made every
server of issue 24's run start plain) and ``RESIDUE_LAB_PATCHES``."""
import os

GPU = os.environb.get(b"CUDA_VISIBLE_DEVICES")
PATCHES = os.environ.get("RESIDUE_LAB_PATCHES")
