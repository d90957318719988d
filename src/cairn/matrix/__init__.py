"""The compatibility matrix: one signed JSON document per release (model, schema, renderers)."""
