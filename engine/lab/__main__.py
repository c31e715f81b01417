"""``python -m engine.lab --port P [flags]``: start the lab engine."""
from .cli import main

main()
