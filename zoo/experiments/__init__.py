"""The paper protocols (main job, UCI benchmark, covariate shift, tuning, comparisons)."""
