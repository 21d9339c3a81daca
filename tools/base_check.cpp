#include "tools/base_check.h"

#include "checkpoint/adapter_base.h"
#include "checkpoint/hf/model_identity.h"
#include "common/error.h"
#include "common/job/job_loader.h"
#include "runtime/fsdp/fsdp_options.h"

namespace shardtune::tools {

checkpoint::AdapterRecord check_adapter_base(const checkpoint::AdapterRecord& adapter, const checkpoint::HfFolder& base,
                        const std::string& base_dir, const std::string& src) {
  checkpoint::AdapterRecord here = adapter;
  here.base_path = base_dir;
  const checkpoint::ModelIdentity id = checkpoint::model_identity(base, "");
  here.base_config_sha256 = id.config_sha256;
  here.base_tensors_sha256 = id.tensors_sha256;
  here.base_weights_sha256.clear();
  here.base_weights_sample_sha256 = id.weights_sample_sha256;
  const std::optional<std::string> mismatch = checkpoint::base_mismatch(adapter, here);
  ST_CHECK(!mismatch, common::ErrorKind::kConfig, "{} is not the base model the adapters of {} were trained on: {}",
           base_dir, src, mismatch.value_or(""));
  return here;
}

at::ScalarType nf4_quantised_from(const checkpoint::Manifest& manifest, const std::string& where) {
  const job::Job job = job::parse_job(manifest.job_toml, where + "/manifest.json (its job)").job;
  return fsdp::precision_from_job(job.train, job.fsdp, /*lora=*/true).frozen;
}

}  // namespace shardtune::tools
