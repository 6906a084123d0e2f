"""The semantic mirror: embedders, vector indexes and the protocols between them."""
