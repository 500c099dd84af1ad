"""The full-stack benchmark (`thinktier bench fullstack`): the whole stack on a GPU machine, config after config,
measured at the front door; what it saves, and the summary and comparison rebuilt from that."""
