"""`python -m simlab`: the same as the `simlab` command."""

from simlab.cli import main

raise SystemExit(main())
