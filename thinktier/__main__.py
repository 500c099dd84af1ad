"""`python -m thinktier ...` is the `thinktier` command, for places where the console script is not on PATH."""

from thinktier.cli.main import main

raise SystemExit(main())
