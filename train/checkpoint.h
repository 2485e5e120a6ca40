#pragma once
/// @file
/// Checkpoints: RUN_DIR/checkpoints/step-N/{model.safetensors, optimizer.safetensors,
/// trainer.json}, built under a temporary directory, each file and the directory fsynced, then
/// renamed into place; the last `keep` are kept, and an older one is removed only after the new
/// one is complete.
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "train/safetensors.h"

/// Training state on disk: checkpoints and safetensors files.
namespace keel::train {

/// What one checkpoint holds.
struct CheckpointData {
  int64_t step = 0;     ///< the step number: N of step-N
  TensorMap model;      ///< parameter name -> value (HF GPT-2 names for gpt2-* presets)
  TensorMap optimizer;  ///< "<param>.exp_avg", "<param>.exp_avg_sq"
  std::string trainer;  ///< trainer.json text: step, data cursor, config, bundle, policy
  /// The model file's tensors and types; with model_tensor instead of `model` when the
  /// parameters are not held whole and per layer (split, stacked, or in a file opened).
  std::map<std::string, TensorType> model_types;
  /// Each tensor of model_types, asked for by name: as the file is written, or read from it.
  std::function<Array(const std::string& name)> model_tensor;
  /// The optimizer file's tensors and types; with optimizer_tensor instead of `optimizer` when
  /// the moments are not held whole and per layer.
  std::map<std::string, TensorType> optimizer_types;
  /// Each tensor of optimizer_types, asked for by name.
  std::function<Array(const std::string& name)> optimizer_tensor;
  /// When given, the order model_tensor must be asked in (its gathers meet the other processes'
  /// in it; the file's bytes are the same in any). Empty: name order.
  std::vector<std::string> model_order;
  /// The same for optimizer_tensor.
  std::vector<std::string> optimizer_order;
  /// Of a checkpoint opened (open_checkpoint): once each tensor of both files was asked for,
  /// keel::InputError when the bytes read do not match the files' checksums.
  std::function<void()> check_read;
  /// The same of the model file alone, once each of its tensors was asked for (--init-from reads
  /// no moments).
  std::function<void()> check_model_read;
};

/// Publishes step-N under run_dir/checkpoints and prunes to the newest `keep` (>= 1). Returns
/// the directory. model.safetensors metadata gets "format": "pt".
std::string write_checkpoint(const std::string& run_dir, const CheckpointData& data, int keep);

/// The newest complete checkpoint directory (step-N with all three files), or nullopt. Partial
/// temporaries are ignored (and never mistaken for checkpoints).
std::optional<std::string> latest_checkpoint(const std::string& run_dir);
/// Complete checkpoints, oldest first.
std::vector<std::string> list_checkpoints(const std::string& run_dir);

/// Reads a checkpoint directory; keel::InputError naming the file on anything missing or bad
/// (including trainer.json not JSON or without an integer "step").
CheckpointData read_checkpoint(const std::string& dir);

/// A checkpoint opened as read_checkpoint checks it, the files' headers included, with no tensor
/// read: model_tensor and optimizer_tensor read each from its file when asked for (keel::InputError
/// for one that is not finite), and check_read compares the checksums once all were, so a
/// process holds one tensor of it at a time. The files stay open: a checkpoint the run retires
/// meanwhile is still read whole. `whole`: every tensor will be held at once (read_checkpoint), so
/// a file larger than the memory this process may use is refused at once.
CheckpointData open_checkpoint(const std::string& dir, bool whole = false);

/// Asks for every tensor model_tensor and optimizer_tensor give, in their order, and holds them in
/// `model` and `optimizer` (then check_read, if any); the functions are cleared.
void hold_all_tensors(CheckpointData& d);

/// A checkpoint read from disk, with the directory it was read from.
struct FoundCheckpoint {
  std::string dir;      ///< the step-N directory
  CheckpointData data;  ///< its contents
};
/// The newest complete checkpoint, read, while a training run may still be writing the directory:
/// one that the writer retires (keep N) between the choice and the read is passed over for the
/// then-newest. nullopt when there is none; a damaged one is read_checkpoint's InputError.
std::optional<FoundCheckpoint> read_latest_checkpoint(const std::string& run_dir);
/// The same, opened (open_checkpoint) rather than read.
std::optional<FoundCheckpoint> open_latest_checkpoint(const std::string& run_dir);
/// Reads a checkpoint: `path` is a checkpoint (step-N) or a run directory (its newest checkpoint);
/// InputError naming the path when it is neither.
FoundCheckpoint read_checkpoint_or_newest(const std::string& path);
/// The same, opened (open_checkpoint) rather than read.
FoundCheckpoint open_checkpoint_or_newest(const std::string& path);

/// Resume writes into what exists: the bytes of each entry of `into` (its storage, shared with
/// the Variables it came from) are overwritten with the value of the same name from `from`. Any
/// missing, extra, reshaped or retyped tensor is a keel::InputError listing them all
/// ("[checkpoint] <source>: 2 tensors do not match this model: h.0.attn.c_attn.weight shape
/// [384,1152] in the checkpoint, [384,768] here; wpe.weight missing from the checkpoint").
void copy_into(TensorMap& into, const TensorMap& from, const std::string& source);
/// The check alone: `from` holds exactly `want`'s names, dtypes and shapes (the same error).
void check_tensors(const std::map<std::string, TensorType>& want, const TensorMap& from,
                   const std::string& source);
/// The same of tensors by type (an opened checkpoint's).
void check_tensors(const std::map<std::string, TensorType>& want,
                   const std::map<std::string, TensorType>& from, const std::string& source);

}  // namespace keel::train
