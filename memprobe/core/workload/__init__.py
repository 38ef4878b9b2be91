"""What a scan is asked to run: the registry, each family's params, variants, strategies, option bounds and the steps a trial runs."""
