"""A Qwen2.5-0.5B-shaped checkpoint with random weights, written by transformers' save_pretrained in bf16."""
import sys, time
import torch, transformers
folder = sys.argv[1]
config = transformers.Qwen2Config(
    hidden_size=896, num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2,
    intermediate_size=4864, vocab_size=151936, tie_word_embeddings=True, rope_theta=1e6,
    max_position_embeddings=32768, rms_norm_eps=1e-6, use_sliding_window=False, sliding_window=32768,
    max_window_layers=21, bos_token_id=151643, eos_token_id=151643, dtype="bfloat16")
start = time.time()
torch.manual_seed(0)
torch.set_default_dtype(torch.bfloat16)
model = transformers.Qwen2ForCausalLM(config).eval()
print("params", sum(p.numel() for p in model.parameters()), "dtype", next(model.parameters()).dtype)
model.save_pretrained(folder)
print(f"wrote {folder} in {time.time() - start:.1f} s; transformers {transformers.__version__}, torch {torch.__version__}")
