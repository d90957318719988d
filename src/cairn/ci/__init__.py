"""CI workflows generated from the plan: the shard model (``shards``) and the GitHub Actions renderer (``github``)."""
