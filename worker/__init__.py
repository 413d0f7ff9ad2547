"""A model worker: one FastAPI app owning one loaded backend and its sessions."""
