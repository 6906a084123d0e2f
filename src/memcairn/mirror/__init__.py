"""The semantic mirror of the store: documents per field, watermark sync, backfill, vector queries."""
