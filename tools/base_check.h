// The base model folder an adapter checkpoint is used with, checked against the base it was trained
// on (the identity the checkpoint records): its config, its tensor index and each tensor's first
// bytes, at once (merge-lora checks every byte as it reads them too).
#pragma once

#include <c10/core/ScalarType.h>

#include <string>

#include "checkpoint/hf/hf_folder.h"
#include "checkpoint/manifest.h"

namespace shardtune::tools {

// Throws common::Error(kConfig) naming both when `base` is another model than the adapters' of `src`.
// Returns the record as `base` measures (no digest of every byte yet).
checkpoint::AdapterRecord check_adapter_base(const checkpoint::AdapterRecord& adapter, const checkpoint::HfFolder& base,
                        const std::string& base_dir, const std::string& src);

// The dtype a QLoRA checkpoint's job rounded its base to before quantising it to NF4 (its frozen
// dtype: bf16 under mixed precision), so that a merge or a generation quantises the same values
// training did. `where` names the checkpoint in errors.
at::ScalarType nf4_quantised_from(const checkpoint::Manifest& manifest, const std::string& where);

}  // namespace shardtune::tools
