"""The difficulty classifier at run time: its features, its artifact and the Serve deployment that scores prompts."""
