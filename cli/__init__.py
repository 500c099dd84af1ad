"""The `thinktier` command line: the top layer, one module per command group."""
