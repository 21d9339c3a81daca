// shardtune-ckpt export-gguf: a checkpoint (full or sharded) or a Hugging Face folder as one GGUF
// file that llama.cpp (and Ollama) load, as llama.cpp's own convert_hf_to_gguf.py writes a Llama:
// its tensor names and metadata keys, the query and key rows interleaved per head the way
// llama.cpp's rotary embedding pairs them, Llama 3 RoPE scaling as a rope_freqs tensor, norms and
// biases in f32, and the tokenizer embedded (byte-level BPE as "gpt2", SentencePiece-style BPE as
// "llama") with its chat template. One tensor in memory at a time.
#pragma once

#include <string>

namespace shardtune::tools {

// dtype: f32, f16 or bf16 (the matrices; 1-D tensors stay f32). tokenizer: a tokenizer.json
// (default: the model folder's, or the one the checkpoint's job trained with).
void export_gguf(const std::string& src, const std::string& out, const std::string& dtype, const std::string& tokenizer);

}  // namespace shardtune::tools
