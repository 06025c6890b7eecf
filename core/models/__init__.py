"""Model sourcing: loading a model from a hub id or folder, its module names, capture hooks, the number vocabulary, importing GGUF weights, random controls."""
