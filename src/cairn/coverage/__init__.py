"""Coverage from the audit, not from labels: which gfx targets each library of a release really covers."""
