"""Pins that outlive the archive: compare a manifest's deb pins with the archive, refresh them, lock rootfs recipes."""
