"""``python -m engine.prefork --preload a,b [--optional c,d]``: the fork server (started
by :class:`engine.prefork.ForkServer`, which speaks its JSON-lines protocol)."""
import sys

from ._server import main

sys.exit(main())
