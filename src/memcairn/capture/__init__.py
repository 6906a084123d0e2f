"""Capture: hook events become observations and summaries (queue processing, compressors, privacy)."""
