"""Moving memories in and out: other tools' databases, and memcairn's own JSONL export."""
