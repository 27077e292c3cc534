"""The passes that make partitions fusion groups: rewrite, then the type and finite guards."""
