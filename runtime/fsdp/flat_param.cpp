// Flat parameters: sharding, gathering, freeing, gradient reduction.
#include "runtime/fsdp/flat_param.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <ATen/core/grad_mode.h>
#include <c10/core/StorageImpl.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstring>
#include <optional>

#include "common/error.h"
#include "runtime/dist/agree.h"
#include "runtime/dist/device.h"
#include "runtime/fsdp/nf4_storage.h"

namespace shardtune::fsdp {
namespace {

// Drops a tensor's memory but keeps its storage object, which views (and autograd's saved
// tensors) refer to; restore_storage gives it memory again. On a GPU the memory goes back to the
// caching allocator in the order of the current stream, after the work that used it.
void drop_storage(at::Tensor& t) {
  c10::StorageImpl* impl = t.storage().unsafeGetStorageImpl();
  impl->set_data_ptr_noswap(at::DataPtr(nullptr, t.device()));
  impl->set_nbytes(0);
}

// Large host buffers on transparent huge pages where the kernel allows it (THP "madvise" mode):
// filling gigabytes of fresh shards otherwise costs one page fault per 4 KiB.
at::Tensor zeros_on_huge_pages(int64_t numel, const at::TensorOptions& options) {
  at::Tensor t = at::empty({numel}, options);
  constexpr uintptr_t kHuge = 2u << 20;
  const auto begin = reinterpret_cast<uintptr_t>(t.data_ptr());
  const uintptr_t first = (begin + kHuge - 1) & ~(kHuge - 1), last = (begin + t.nbytes()) & ~(kHuge - 1);
  if (t.device().is_cpu() && last > first) ::madvise(reinterpret_cast<void*>(first), last - first, MADV_HUGEPAGE);
  return t.zero_();
}

// Zeroes what of `buffer` (laid out as `layout`'s padded buffer) no gradient reached: parameters
// not written, alignment gaps and padding, each run of them in one pass.
void zero_unwritten(at::Tensor& buffer, const FlatLayout& layout, const std::vector<bool>& written) {
  int64_t from = 0;  // parameters lie in the flat buffer in order, alignment gaps between them
  for (size_t i = 0; i < layout.params().size(); ++i) {
    const ParamSpan& p = layout.params()[i];
    if (!written[i]) continue;
    if (p.offset > from) buffer.narrow(0, from, p.offset - from).zero_();
    from = p.offset + p.numel;
  }
  if (buffer.numel() > from) buffer.narrow(0, from, buffer.numel() - from).zero_();
}

void restore_storage(at::Tensor& t) {
  c10::StorageImpl* impl = t.storage().unsafeGetStorageImpl();
  const size_t nbytes = static_cast<size_t>(t.numel()) * t.element_size();
  if (impl->nbytes() == nbytes) return;
  impl->set_data_ptr_noswap(impl->allocator()->allocate(nbytes));
  impl->set_nbytes(nbytes);
}

}  // namespace

FlatParam::FlatParam(FlatLayout layout, std::vector<at::Tensor*> slots, bool trainable, const FsdpOptions& options,
                     int shard_rank, std::optional<quant::Nf4Format> nf4)
    : layout_(std::move(layout)), slots_(std::move(slots)), trainable_(trainable), options_(options),
      shard_rank_(shard_rank), nf4_(nf4) {
  ST_CHECK(slots_.size() == layout_.params().size(), common::ErrorKind::kInternal, "flat param: {} slots for {} params",
           slots_.size(), layout_.params().size());
  ST_CHECK(!nf4_ || (!trainable_ && layout_.align() == nf4_->record_elements()), common::ErrorKind::kInternal,
           "an NF4 flat parameter must be frozen and aligned to its records");
  const at::ScalarType master_dtype = trainable_ ? options_.precision.master : options_.precision.frozen;
  offloaded_ = options_.cpu_offload && (trainable_ || options_.offload_params);
  const at::TensorOptions master =
      offloaded_ ? at::TensorOptions().dtype(master_dtype).pinned_memory(options_.device.is_cuda())
                 : at::TensorOptions().dtype(master_dtype).device(options_.device);
  // Slots on the meta device have no values: the shard is filled later by a loader.
  const bool have_values = !slots_.empty() && !slots_.front()->is_meta();
  if (nf4_) {
    // Quantised from the frozen dtype's values, as a loader stages them (and as bitsandbytes
    // quantises a model loaded in its torch_dtype).
    std::vector<at::Tensor> values;
    if (have_values)
      for (at::Tensor* slot : slots_) values.push_back(slot->detach().to(options_.precision.frozen));
    shard_ = have_values ? to_home(quantize_shard(layout_, shard_rank_, values, *nf4_))
                         : padding_records(layout_.shard_numel() / nf4_->record_elements(), *nf4_, master);
  } else {
    shard_ = zeros_on_huge_pages(layout_.shard_numel(), master);  // padding stays zero
    for (const ShardPiece& piece : have_values ? layout_.pieces_in_shard(shard_rank_) : std::vector<ShardPiece>{}) {
      const at::Tensor src = slots_[piece.param]->detach().reshape({-1}).narrow(0, piece.param_offset, piece.length);
      shard_.narrow(0, piece.shard_offset, piece.length).copy_(src);
    }
  }
  for (at::Tensor* slot : slots_) *slot = at::Tensor();
  alias_full_to_shard_ =
      !offloaded_ && !nf4_ && layout_.shard_count() == 1 && options_.precision.compute == master_dtype;
  if (alias_full_to_shard_) {
    full_ = shard_;
    gathered_ = true;
  } else {
    full_ = at::empty({layout_.padded_numel()},
                      at::TensorOptions().dtype(options_.precision.compute).device(options_.device));
    drop_storage(full_);
  }
}

at::Tensor FlatParam::to_home(const at::Tensor& t) const {
  if (!offloaded_) return t.to(options_.device);
  const at::Tensor host = t.to(at::kCPU);
  return options_.device.is_cuda() ? host.pin_memory() : host;
}

at::Tensor& FlatParam::grad_buffer() {
  if (trainable_ && !grad_shard_.defined())
    grad_shard_ = zeros_on_huge_pages(layout_.shard_numel(), shard_.options());
  return grad_shard_;
}

at::Tensor& FlatParam::grad_shard() {
  ST_CHECK(!reduced_.defined(), common::ErrorKind::kInternal,
           "the gradient shard was read while its reduction was in flight (FsdpLlama::finish_grad_sync was not called)");
  land_grad();
  settle_grad();
  return grad_buffer();
}

void FlatParam::zero_grad() {
  if (!trainable_) return;
  ST_CHECK(!reduced_.defined(), common::ErrorKind::kInternal,
           "the gradient shard was zeroed while its reduction was in flight");
  land_grad();  // nothing on its way lands after the zero
  if (!grad_shard_.defined()) return;  // allocated zero
  grad_zero_pending_ = true;
  shard_grad_written_.assign(layout_.params().size(), false);
}

void FlatParam::settle_grad() {
  if (!grad_zero_pending_) return;
  grad_zero_pending_ = false;
  at::NoGradGuard no_grad;
  zero_unwritten(grad_shard_, layout_, shard_grad_written_);
}

void FlatParam::start_gather(dist::Communicator& shard_group) {
  // A copy kept gathered (NO_SHARD, SHARD_GRAD_OP within a step) is stale once the shard changed:
  // the optimizer's in-place update moves the shard's version on.
  if (gathered_ && !alias_full_to_shard_ && shard_._version() != gathered_version_) gathered_ = false;
  if (gathered_ || gather_work_ || dequantize_pending_) return;
  ST_CHECK(shard_group.size() == layout_.shard_count(), common::ErrorKind::kInternal,
           "flat param sharded {} ways gathered over a group of {}", layout_.shard_count(), shard_group.size());
  if (nf4_) {
    // The records travel packed; finish_gather dequantises them.
    ST_CHECK(!provisional_ && !staging_.defined(), common::ErrorKind::kInternal,
             "an NF4 flat parameter gathered before its quantisation finished");
    gathered_version_ = shard_._version();
    dequantize_pending_ = true;
    const at::TensorOptions on_device = at::TensorOptions().dtype(shard_.dtype()).device(options_.device);
    // Offloaded records come up to a GPU first, into a buffer of the current stream's kept until
    // gathered (the collective and the dequantisation read it), copied on the copy stream as the
    // other offloaded shards are: the collective follows the copy, finish_gather waits for both.
    const bool upload = offloaded_ && !options_.device.is_cpu();
    if (upload) device_records_ = at::empty({shard_.numel()}, on_device);
    const at::Tensor& records = upload ? device_records_ : shard_;
    if (shard_group.size() > 1) packed_full_ = at::empty({shard_.numel() * shard_group.size()}, on_device);
    std::optional<dist::CopyStreamScope> on_copy;
    if (upload) {
      on_copy.emplace(options_.device);
      device_records_.copy_(shard_, /*non_blocking=*/true);
    }
    if (shard_group.size() > 1) {
      wire_.gathered += static_cast<int64_t>(packed_full_.nbytes());
      gather_work_ = shard_group.start_all_gather(records, packed_full_);
    }
    if (on_copy) copied_ = on_copy->done();
    return;
  }
  restore_storage(full_);
  // Raw writes into storage that autograd leaves (saved for backward) view: through an alias
  // with its own version counter, so autograd does not take the refill for a modification.
  at::NoGradGuard no_grad;
  at::Tensor full = full_.variable_data();
  at::Tensor mine = full.narrow(0, layout_.shard_begin(shard_rank_), layout_.shard_numel());
  gathered_version_ = shard_._version();
  if (shard_group.size() > 1) wire_.gathered += static_cast<int64_t>(full.nbytes());
  if (!offloaded_) {
    mine.copy_(shard_);  // to the compute dtype
    gather_work_ = shard_group.start_all_gather(mine, full);
    return;
  }
  // Offloaded: up from pinned memory (without the host waiting) and to the compute dtype on the
  // device's copy stream, so that on a GPU the copy runs beside the compute queued until
  // finish_gather; the all-gather is ordered after it, and finish_gather the compute after both.
  const dist::CopyStreamScope on_copy(options_.device);
  mine.copy_(shard_, /*non_blocking=*/options_.device.is_cuda());
  gather_work_ = shard_group.start_all_gather(mine, full);
  copied_ = on_copy.done();
}

void FlatParam::finish_gather() {
  dist::wait_for_copies(copied_);
  copied_ = {};
  if (gather_work_) {
    gather_work_->wait();
    gather_work_.reset();
    gathered_ = true;
  }
  if (!dequantize_pending_) return;
  restore_storage(full_);
  at::NoGradGuard no_grad;
  at::Tensor full = full_.variable_data();
  dequantize_into(packed_full_.defined() ? packed_full_ : device_records_.defined() ? device_records_ : shard_, *nf4_,
                  full);
  packed_full_ = at::Tensor();
  device_records_ = at::Tensor();
  dequantize_pending_ = false;
  gathered_ = true;
}

at::Tensor& FlatParam::load_target() {
  if (!nf4_) return shard_;
  if (!staging_.defined()) staging_ = at::zeros({layout_.shard_numel()}, at::TensorOptions().dtype(options_.precision.frozen));
  return staging_;
}

void FlatParam::loaded() {
  if (!nf4_ || !staging_.defined()) return;
  const quant::Nf4Format single{nf4_->block_size, false};
  const int64_t per = nf4_->record_elements();
  at::Tensor records = padding_records(layout_.shard_numel() / per, single, at::TensorOptions());
  sums_.assign(layout_.params().size(), quant::ExactSum());
  const int64_t chunk = std::max<int64_t>(1, (int64_t{1} << 22) / per);  // records converted to fp32 at a time
  // A weight that cannot be quantised is kept as the flat's error, not thrown: a loader calls this
  // between its rounds, where a rank that left would leave the others waiting. finish_quantization
  // raises it on every rank at once.
  try {
    for (const ShardPiece& piece : layout_.pieces_in_shard(shard_rank_)) {
      const ParamSpan& p = layout_.params()[piece.param];
      for (int64_t first = 0; first * per < piece.length; first += chunk) {
        const int64_t begin = first * per, valid = std::min(chunk * per, piece.length - begin);
        const at::Tensor x = staging_.narrow(0, piece.shard_offset + begin, valid).to(at::kFloat).contiguous();
        check_finite(x, p.name, piece.param_offset + begin);
        std::vector<float> absmax(static_cast<size_t>((valid + nf4_->block_size - 1) / nf4_->block_size));
        quant::block_absmax(x.data_ptr<float>(), valid, *nf4_, absmax.data(), &sums_[piece.param]);
        quant::quantize_records(x.data_ptr<float>(), valid, (valid + per - 1) / per, 0.0f, single,
                                records.data_ptr<uint8_t>() + (piece.shard_offset + begin) / per * single.record_bytes());
      }
    }
  } catch (const common::Error& e) {
    load_error_ = e.what();
  }
  staging_ = at::Tensor();
  shard_ = to_home(records);
  provisional_ = true;
}

void FlatParam::load_records(const RecordReader& read) {
  ST_CHECK(nf4_.has_value(), common::ErrorKind::kInternal, "records loaded into a flat parameter without NF4");
  const int64_t per = nf4_->record_elements();
  at::Tensor records = padding_records(layout_.shard_numel() / per, *nf4_, at::TensorOptions());
  for (const ShardPiece& piece : layout_.pieces_in_shard(shard_rank_))
    read(layout_.params()[piece.param].name, piece.param_offset / per, (piece.length + per - 1) / per,
         records.data_ptr<uint8_t>() + piece.shard_offset / per * nf4_->record_bytes());
  staging_ = at::Tensor();
  shard_ = to_home(records);
  provisional_ = false;
}

void FlatParam::finish_quantization(dist::Communicator& shard_group) {
  if (!nf4_ || !provisional_) return;
  dist::act_on_all(shard_group, "quantising the base to NF4", [&] {
    ST_CHECK(load_error_.empty(), common::ErrorKind::kConfig, "{}", load_error_);
  });
  const auto params = static_cast<int64_t>(layout_.params().size());
  at::Tensor bins = at::empty({params, quant::ExactSum::kBins}, at::TensorOptions().dtype(at::kLong));
  for (int64_t i = 0; i < params; ++i)
    std::memcpy(bins[i].data_ptr<int64_t>(), sums_[static_cast<size_t>(i)].bins(), sizeof(int64_t) * quant::ExactSum::kBins);
  if (shard_group.size() > 1) {
    at::Tensor on_device = bins.to(options_.device);
    shard_group.all_reduce(on_device, dist::ReduceOp::kSum);
    bins = on_device.to(at::kCPU);
  }
  sums_.clear();
  provisional_ = false;
  if (!nf4_->double_quant) return;  // the fp32 scales are the format's own
  const quant::Nf4Format single{nf4_->block_size, false};
  const int64_t per = nf4_->record_elements();
  const at::Tensor host = shard_.to(at::kCPU);
  at::Tensor out = padding_records(layout_.shard_numel() / per, *nf4_, at::TensorOptions());
  for (const ShardPiece& piece : layout_.pieces_in_shard(shard_rank_)) {
    const ParamSpan& p = layout_.params()[piece.param];
    quant::ExactSum total;
    std::memcpy(total.bins(), bins[static_cast<int64_t>(piece.param)].data_ptr<int64_t>(),
                sizeof(int64_t) * quant::ExactSum::kBins);
    const float offset = quant::mean_absmax(total, (p.numel + nf4_->block_size - 1) / nf4_->block_size);
    const int64_t record = piece.shard_offset / per;
    quant::double_quantize_records(host.data_ptr<uint8_t>() + record * single.record_bytes(), piece.length,
                                   (piece.length + per - 1) / per, offset, *nf4_,
                                   out.data_ptr<uint8_t>() + record * nf4_->record_bytes());
  }
  shard_ = to_home(out);
}

void FlatParam::reshard() {
  if (!gathered_ || alias_full_to_shard_) return;
  drop_storage(full_);
  gathered_ = false;
}

const std::vector<at::Tensor>& FlatParam::leaves() {
  if (leaves_.empty()) {
    const at::Tensor base = full_.detach();
    for (size_t i = 0; i < layout_.params().size(); ++i) {
      const ParamSpan& p = layout_.params()[i];
      at::Tensor leaf = base.narrow(0, p.offset, p.numel).view(p.shape);
      leaf.requires_grad_(trainable_);
      leaves_.push_back(leaf);
      *slots_[i] = leaf;
    }
  }
  return leaves_;
}

void FlatParam::reset_leaves() {
  leaves_.clear();
  for (at::Tensor* slot : slots_) *slot = at::Tensor();
}

const FlatLayout& FlatParam::block_layout(int64_t block) const {
  if (!block_layout_) block_layout_ = layout_.blocks(block);
  ST_CHECK(block_layout_->align() * block == layout_.align(), common::ErrorKind::kInternal,
           "a flat parameter's blocks of {} asked for after blocks of {}", block, layout_.align() / block_layout_->align());
  return *block_layout_;
}

void FlatParam::accumulate_grad(size_t param, const at::Tensor& grad, bool unreduced) {
  at::NoGradGuard no_grad;
  ST_CHECK(trainable_, common::ErrorKind::kInternal, "gradient for a frozen parameter");
  const ParamSpan& p = layout_.params().at(param);
  if (!unreduced && !offloaded_ && layout_.shard_count() == 1 && options_.precision.reduce == shard_.scalar_type() &&
      !full_grad_.defined()) {
    // The add the reduction's end would make, without the buffer. A parameter given two gradients
    // in one pass (a tied embedding) takes them one at a time: the same terms, summed in another
    // order where the shard already holds earlier micro-batches' gradients.
    at::Tensor target = grad_buffer().narrow(0, p.offset, p.numel);
    if (grad_zero_pending_ && !shard_grad_written_.at(param)) {
      target.copy_(grad.reshape({-1}));  // onto a pending zero: the sum with zero, without reading it
      shard_grad_written_[param] = true;
    } else {
      target.add_(grad.reshape({-1}));
    }
    return;
  }
  if (!full_grad_.defined()) {
    // Not zero-filled: a parameter's first gradient is copied in, later ones added, and what no
    // gradient reached is zeroed when the reduction starts (zero_unwritten).
    full_grad_ = at::empty({layout_.padded_numel()}, shard_.options().dtype(options_.precision.reduce));
    grad_written_.assign(layout_.params().size(), false);
  }
  at::Tensor target = full_grad_.narrow(0, p.offset, p.numel);
  if (grad_written_.at(param)) {
    target.add_(grad.reshape({-1}));
  } else {
    target.copy_(grad.reshape({-1}));
    grad_written_[param] = true;
  }
}

void FlatParam::start_reduce(dist::Communicator& shard_group) {
  if (!full_grad_.defined()) return;
  ST_CHECK(!reduced_.defined(), common::ErrorKind::kInternal, "a second gradient reduction of one flat parameter");
  at::NoGradGuard no_grad;
  zero_unwritten(full_grad_, layout_, grad_written_);
  all_reducing_ = false;
  if (shard_group.size() == 1) {
    // One shard: the reduce-scatter's average over one rank is the gradient itself.
    reduced_ = std::move(full_grad_);
    full_grad_ = at::Tensor();
    return;
  }
  reduced_ = at::empty({layout_.shard_numel()}, full_grad_.options());
  wire_.reduced += static_cast<int64_t>(full_grad_.nbytes());
  // The work keeps the unsharded gradient alive until the reduce-scatter is done with it.
  reduce_work_ = shard_group.start_reduce_scatter(full_grad_, reduced_, dist::ReduceOp::kAvg);
  full_grad_ = at::Tensor();
}

bool FlatParam::advance_reduce(dist::Communicator& replicate_group) {
  if (!reduced_.defined()) return true;
  at::NoGradGuard no_grad;
  if (reduce_work_) {
    reduce_work_->wait();
    reduce_work_.reset();
  }
  if (!all_reducing_ && replicate_group.size() > 1) {
    wire_.reduced += static_cast<int64_t>(reduced_.nbytes());
    reduce_work_ = replicate_group.start_all_reduce(reduced_, dist::ReduceOp::kAvg);
    all_reducing_ = true;
    return false;
  }
  const at::Tensor reduced = std::move(reduced_);
  reduced_ = at::Tensor();
  if (!offloaded_) {
    const bool none_written =
        std::none_of(shard_grad_written_.begin(), shard_grad_written_.end(), [](bool w) { return w; });
    if (grad_zero_pending_ && none_written) {  // onto a pending zero: the sum with zero, without reading it
      grad_zero_pending_ = false;
      grad_buffer().copy_(reduced);
    } else {
      grad_shard().add_(reduced);
    }
    return true;
  }
  // Offloaded, the gradient comes down to the host: from a GPU into pinned memory on a copy stream,
  // after its reduction, neither the host nor backward's compute waiting (land_grad does, once
  // backward is queued).
  land_grad();  // an earlier one first (none within one backward)
  landing_ = dist::copy_to_host_async(reduced);
  return true;
}

void FlatParam::land_grad() {
  if (!landing_.defined()) return;
  const at::Tensor landed = std::move(landing_);
  landing_ = at::Tensor();
  dist::synchronize(options_.device);  // the copy down (no-op on the CPU)
  at::NoGradGuard no_grad;
  grad_shard().add_(landed);
}

int64_t FlatParam::persistent_bytes() const {
  int64_t bytes = offloaded_ ? 0 : shard_.nbytes();
  if (grad_shard_.defined() && !offloaded_) bytes += grad_shard_.nbytes();
  if (!alias_full_to_shard_ && gathered_) bytes += full_.nbytes();
  return bytes;
}

}  // namespace shardtune::fsdp
