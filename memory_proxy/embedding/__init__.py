"""Embeddings: text to vectors, for a turn's query and for every stored memory.

- embedders.py: the narrow interface (`await embedder.embed(texts)`), the remote providers and `build_embedder`;
- local_model.py: all-MiniLM-L6-v2 in process on onnxruntime (EMBEDDING_PROVIDER=local), with its per-word
  states for late interaction;
- memory_document.py: the text a memory is embedded as (its date, then the fact);
- reembed.py: every stored vector of another model re-embedded after EMBEDDING_MODEL changed.
"""
