"""What the project trains, with its data: the difficulty classifier (and the artifacts deployments/ loads)."""
