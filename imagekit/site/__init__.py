"""The run page: a run's records as a static site."""
