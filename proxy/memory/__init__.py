"""LLM-facing memory logic: embedding, retrieval (and, later, extraction and conflict resolution)."""
