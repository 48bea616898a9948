"""vLLM's own code driven by the suite (imports vllm: runs only inside the vllm session)."""
