// Trains a small SentencePiece BPE model with Llama 2's settings (identity normalization, dummy
// prefix, byte fallback, split digits, <unk> <s> </s> at 0 1 2), for the tokenizer tests.
// usage: train_sentencepiece INPUT.txt MODEL_PREFIX VOCAB_SIZE
#include <sentencepiece_trainer.h>

#include <iostream>
#include <string>

int main(int argc, char** argv) {
  if (argc != 4) {
    std::cerr << "usage: train_sentencepiece INPUT.txt MODEL_PREFIX VOCAB_SIZE\n";
    return 2;
  }
  const std::string args = std::string("--input=") + argv[1] + " --model_prefix=" + argv[2] + " --vocab_size=" + argv[3] +
                           " --model_type=bpe --byte_fallback=true --normalization_rule_name=identity"
                           " --remove_extra_whitespaces=false --add_dummy_prefix=true --split_digits=true"
                           " --allow_whitespace_only_pieces=true --character_coverage=0.9995 --unk_id=0 --bos_id=1"
                           " --eos_id=2 --pad_id=-1 --num_threads=2 --minloglevel=2";
  const auto status = sentencepiece::SentencePieceTrainer::Train(args);
  if (!status.ok()) {
    std::cerr << "train_sentencepiece: " << status.ToString() << "\n";
    return 1;
  }
  return 0;
}
