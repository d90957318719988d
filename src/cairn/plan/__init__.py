"""The plan: a manifest resolved into a DAG of content-addressed actions, computed before anything runs."""
