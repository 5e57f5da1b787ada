"""The run machinery: one train -> predict -> score routine, datasets, distribution, plots."""
