"""Training and fine-tuning: the from-scratch / frozen-embedding runs, LoRA and full fine-tuning of a
pre-trained model, and the delta format a fine-tuned run ships as.

  recipe         a recipe, typed: its fields and its freeze / pretrain / number_tokens / lora parts (no torch)
  stages         the chain of fine-tuning stages, from recipes alone (no torch: the dashboard reads it)
  train          training a demo model from scratch or with frozen number rows, top to bottom
  answers        a split as batches, the answer-token loss, accuracy
  optimiser      AdamW, the learning-rate schedule, the step bar
  checkpoint     saving and restoring a run's progress (and which tensors of a state dict are one tensor)
  number_rows    a demo model's number rows: their ids, what they are frozen to, the hook that keeps them
  module_bands   the controls' constraint: each module's output map held to one Fourier band
  pretraining    the number corpus and next-token pre-training
  finetune       number-token fine-tuning of a pre-trained model, top to bottom
  lora           the model fine-tuning trains: new rows, LoRA factors, the delta's tensors
  frozen_blocks  frozen lower blocks, their output computed once
  delta          the delta file, the number tokens it adds, the exact rebuild
"""
