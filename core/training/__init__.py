"""Training and fine-tuning: the from-scratch / frozen-embedding runs, LoRA and full fine-tuning of a pre-trained model, and the delta format a fine-tuned run ships as."""
