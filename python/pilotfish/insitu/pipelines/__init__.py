"""Shipped pipelines: statistics (count, min, max, mean, histogram) and isosurface."""
