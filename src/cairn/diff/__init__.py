"""``cairn diff``: what changed between two releases, from manifests, bundles or published repositories."""
