"""`commbench accept`: the acceptance spec and its check kinds, running the checks, the verdict."""
