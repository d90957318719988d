"""The user-install gate: install a cell as its user does, on stock hosts, from its published index."""
