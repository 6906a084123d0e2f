"""The SessionStart digest: built from the store's protocols (``build``), its lines (``lines``), kept rendered
(``memo``)."""
