"""The images stage: container images per gfx target, built from the recipes in recipes/containers/."""
