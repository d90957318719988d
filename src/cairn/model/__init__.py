"""Pure data models: the gfx target registry and release manifests. Nothing here touches the network."""
