"""Training the difficulty classifier: recipes, cross-validation and the artifact writer."""
