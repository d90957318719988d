"""Publishing: a release bundle to a local directory or S3, in commit order, gated by channel."""
