"""Build stage: the executor that runs a plan into the store, and the runner for each action kind."""
