"""Ready models: one file per family, one builder per model name, and their registry."""
