#include "nn/layer_stack.h"

#include <fmt/format.h>

#include <algorithm>
#include <string_view>

#include "ir/error.h"
#include "trace/scan.h"

namespace keel::nn {
namespace {

// One letter per kind of layer: bit 0 MoE, bit 1 an n-gram memory, bit 2 Mamba-2, bit 3 sparse
// attention (never with Mamba-2: '?').
constexpr char kKindLetters[] = "dmDMstSTxyXY????";

std::string describe(const std::string& kinds) {
  std::vector<std::string> words;
  for (char k : kinds) {
    const auto bits = static_cast<int>(std::string_view(kKindLetters).find(k));
    words.push_back(fmt::format("{}{}{}{}", bits & 2 ? "n-gram memory + " : "",
                                bits & 4 ? "Mamba + " : "", bits & 8 ? "sparse attention + " : "",
                                bits & 1 ? "MoE" : "dense"));
  }
  return fmt::format("[{}]", fmt::join(words, ", "));
}

std::string span(int64_t first, int64_t count) {
  return count == 1 ? fmt::format("{}", first) : fmt::format("{}..{}", first, first + count - 1);
}

// The xs entry of a scan whose stacks are read a layer at a time: the iteration's index.
const std::string kLayerIndex = "#layer";

std::string stacked_prefix(const LayerRun& run, int64_t j) {
  return fmt::format("scan.{}.{}.", run.first, j);
}

// Slot j of the body: the parameters of layers first + r*P + j over the R repeats, stacked to
// [R, ...] and named h.j.<rest> as the body sees them; taken as they are when stored stacked.
NamedTensors stacked_params(const NamedTensors& p, const LayerRun& run, int64_t name_offset) {
  NamedTensors out;
  for (int64_t j = 0; j < run.period; ++j) {
    const std::string stored = stacked_prefix(run, j);
    bool found = false;
    for (auto it = p.lower_bound(stored); it != p.end() && it->first.starts_with(stored); ++it) {
      out[fmt::format("h.{}.{}", j, it->first.substr(stored.size()))] = it->second;
      found = true;
    }
    if (found) continue;
    const std::string head = fmt::format("h.{}.", run.first + j - name_offset);
    for (auto it = p.lower_bound(head); it != p.end() && it->first.starts_with(head); ++it) {
      const std::string rest = it->first.substr(head.size());
      std::vector<Tensor> parts;
      for (int64_t r = 0; r < run.repeats; ++r) {
        const Tensor& t =
            p.at(fmt::format("h.{}.{}", run.first + r * run.period + j - name_offset, rest));
        Shape one = t.shape();
        one.insert(one.begin(), 1);
        parts.push_back(reshape(t, one));
      }
      out[fmt::format("h.{}.{}", j, rest)] = concat(parts, 0);
    }
  }
  return out;
}

Tensor scan_run(const GptConfig& c, const NamedTensors& p, const LayerRun& run, int64_t name_offset,
                const Tensor& x, const Context& ctx, BlockTotals& totals) {
  const bool rotary = ctx.cos.defined(), docs = ctx.doc_ids.defined();
  const bool grams = ctx.ngram_rows.defined(), places = ctx.positions.defined();
  std::vector<Tensor> consts;
  if (docs) consts.push_back(ctx.doc_ids);
  if (rotary) consts.insert(consts.end(), {ctx.cos, ctx.sin});
  if (grams) consts.push_back(ctx.ngram_rows);
  if (places) consts.push_back(ctx.positions);
  const int64_t first = run.first, period = run.period;
  NamedTensors xs = stacked_params(p, run, name_offset);
  // The stacks read a layer at a time: (body name, stored name), their held tensors the last
  // consts, and the iteration's index among the xs.
  std::vector<std::pair<std::string, std::string>> fetched;
  const size_t held_from = consts.size();
  if (ctx.layers) {
    for (int64_t j = 0; j < period; ++j) {
      const std::string stored = stacked_prefix(run, j);
      for (auto it = ctx.layers->held.lower_bound(stored);
           it != ctx.layers->held.end() && it->first.starts_with(stored); ++it) {
        fetched.emplace_back(fmt::format("h.{}.{}", j, it->first.substr(stored.size())), it->first);
        consts.push_back(it->second);
      }
    }
  }
  if (!fetched.empty()) xs[kLayerIndex] = iota({run.repeats}, 0, DType::i64);
  const LayerSource* source = ctx.layers;
  auto body = [&c, first, period, rotary, docs, grams, places, fetched, held_from, source](
                  const Tensor& carry, const NamedTensors& slices, const std::vector<Tensor>& k) {
    const size_t r = docs ? 1 : 0;  // where the rotary angles start
    const size_t g = r + (rotary ? 2 : 0), q = g + (grams ? 1 : 0);
    Context inner{docs ? k[0] : Tensor(), rotary ? k[r] : Tensor(), rotary ? k[r + 1] : Tensor(),
                  grams ? k[g] : Tensor(), places ? k[q] : Tensor()};
    NamedTensors w = slices;
    for (size_t f = 0; f < fetched.size(); ++f) {
      const auto& [name, stored] = fetched[f];
      w[name] = stop_gradient(source->layer(stored, k[held_from + f], slices.at(kLayerIndex))) +
                slices.at(name);
    }
    w.erase(kLayerIndex);
    BlockTotals moe;
    Tensor y = carry;
    for (int64_t j = 0; j < period; ++j) {
      y = block(c, w, fmt::format("h.{}", j), layer_kind(c, first + j), y, inner, moe);
    }
    // Per iteration: router loss, load rows [m, E], dropped; then the indexers' loss.
    std::vector<Tensor> ys;
    if (!moe.load.empty()) {
      ys = {moe.aux, moe.load.size() == 1 ? moe.load[0] : concat(moe.load, 0), moe.dropped};
    }
    if (moe.indexer.defined()) ys.push_back(moe.indexer);
    return std::pair<Tensor, std::vector<Tensor>>{y, ys};
  };
  ScanOptions options;
  options.remat = c.remat_layers;
  options.remat_policy = c.remat_policy;
  auto [out, ys] = scan_tree(body, x, xs, consts, options);
  BlockTotals more;
  if (ys.size() >= 3) {
    const Shape& rows = ys[1].shape();  // [R, m, E]
    more.aux = sum(ys[0]);
    more.load.push_back(reshape(ys[1], {rows[0] * rows[1], rows[2]}));
    more.dropped = sum(ys[2]);
  }
  if (ys.size() % 3 == 1) more.indexer = sum(ys.back());
  totals.add(more);
  return out;
}

std::vector<LayerRun> scanned_runs(const GptConfig& c) {
  std::vector<LayerRun> out;
  if (!c.layout.scanned) return out;
  for (const LayerRun& run : layer_plan(c, 0, c.layers).runs) {
    if (run.repeats > 1) out.push_back(run);
  }
  return out;
}

}  // namespace

std::string layer_kinds(const GptConfig& c, int64_t first, int64_t count) {
  std::string kinds;
  for (int64_t i = first; i < first + count; ++i) {
    const LayerKind k = layer_kind(c, i);
    kinds +=
        kKindLetters[(k.moe ? 1 : 0) + (k.engram ? 2 : 0) + (k.mamba ? 4 : 0) + (k.sparse ? 8 : 0)];
  }
  return kinds;
}

namespace {

// Each stacked tensor of a scanned stack: its name and the per-layer tensors it holds, in order.
struct Stacked {
  std::string name;
  std::vector<std::string> layers;
};

template <class Map>
std::vector<Stacked> stacking(const GptConfig& c, const Map& per_layer) {
  std::vector<Stacked> out;
  for (const LayerRun& run : scanned_runs(c)) {
    for (int64_t j = 0; j < run.period; ++j) {
      const std::string head = fmt::format("h.{}.", run.first + j);
      for (auto it = per_layer.lower_bound(head);
           it != per_layer.end() && it->first.starts_with(head); ++it) {
        const std::string rest = it->first.substr(head.size());
        Stacked st{stacked_prefix(run, j) + rest, {}};
        for (int64_t r = 0; r < run.repeats; ++r) {
          st.layers.push_back(fmt::format("h.{}.{}", run.first + r * run.period + j, rest));
        }
        out.push_back(std::move(st));
      }
    }
  }
  return out;
}

[[noreturn]] void not_stackable(const std::string& name, const std::string& like) {
  throw InputError(fmt::format(
      "[nn] stack_layer_params: expected per-layer parameter {} shaped like {} (the layers of a "
      "scanned run must match); pass unstacked h.N.* parameters",
      name, like));
}

}  // namespace

NamedTensors stack_layer_params(const GptConfig& c, const NamedTensors& per_layer) {
  NamedTensors out = per_layer;
  start_host_copies(per_layer);  // every copy under way before the first is waited for
  for (const Stacked& st : stacking(c, per_layer)) {
    const Array& one = per_layer.at(st.layers[0]).array();
    Shape shape = one.shape();
    shape.insert(shape.begin(), static_cast<int64_t>(st.layers.size()));
    Array stacked = Array::uninitialized(one.dtype(), shape);
    for (size_t r = 0; r < st.layers.size(); ++r) {
      auto found = per_layer.find(st.layers[r]);
      if (found == per_layer.end() || found->second.array().shape() != one.shape()) {
        not_stackable(st.layers[r], st.layers[0]);
      }
      const Array& a = found->second.array();
      std::copy(a.data(), a.data() + a.nbytes(),
                stacked.data() + static_cast<int64_t>(r) * static_cast<int64_t>(one.nbytes()));
      out.erase(st.layers[r]);
    }
    out[st.name] = Tensor(stacked);
  }
  return out;
}

std::vector<std::pair<std::string, std::vector<std::string>>> stacked_layer_names(
    const GptConfig& c, const std::map<std::string, TensorType>& per_layer) {
  std::vector<std::pair<std::string, std::vector<std::string>>> out;
  for (Stacked& st : stacking(c, per_layer)) out.emplace_back(st.name, std::move(st.layers));
  return out;
}

std::map<std::string, TensorType> stack_layer_types(
    const GptConfig& c, const std::map<std::string, TensorType>& per_layer) {
  std::map<std::string, TensorType> out = per_layer;
  for (const Stacked& st : stacking(c, per_layer)) {
    TensorType t = per_layer.at(st.layers[0]);
    for (const std::string& name : st.layers) {
      auto found = per_layer.find(name);
      if (found == per_layer.end() || found->second != t) not_stackable(name, st.layers[0]);
      out.erase(name);
    }
    t.shape.insert(t.shape.begin(), static_cast<int64_t>(st.layers.size()));
    out[st.name] = t;
  }
  return out;
}

NamedTensors unstack_layer_params(const GptConfig& c, const NamedTensors& stacked) {
  NamedTensors out = stacked;
  for (const LayerRun& run : scanned_runs(c)) {
    for (int64_t j = 0; j < run.period; ++j) {
      const std::string head = stacked_prefix(run, j);
      for (auto it = stacked.lower_bound(head); it != stacked.end() && it->first.starts_with(head);
           ++it) {
        const Array& all = it->second.array();
        Shape shape(all.shape().begin() + 1, all.shape().end());
        for (int64_t r = 0; r < run.repeats; ++r) {
          Array one = Array::uninitialized(all.dtype(), shape);
          std::copy(all.data() + r * static_cast<int64_t>(one.nbytes()),
                    all.data() + (r + 1) * static_cast<int64_t>(one.nbytes()), one.data());
          out[fmt::format("h.{}.{}", run.first + r * run.period + j,
                          it->first.substr(head.size()))] = Tensor(one);
        }
        out.erase(it->first);
      }
    }
  }
  return out;
}

LayerPlan layer_plan(const GptConfig& c, int64_t first, int64_t count) {
  const std::string kinds = layer_kinds(c, first, count);
  LayerPlan plan;
  if (count == 1) {
    plan.runs.push_back({first, 1, 1});
    plan.why = fmt::format("scan: layer {} alone, nothing to loop over; unrolled", first);
    return plan;
  }
  for (int64_t period = 1; period <= count / 2; ++period) {
    if (count % period != 0) continue;
    const std::string unit = kinds.substr(0, static_cast<size_t>(period));
    bool repeats = true;
    for (int64_t at = period; at < count && repeats; at += period) {
      repeats = kinds.compare(static_cast<size_t>(at), static_cast<size_t>(period), unit) == 0;
    }
    if (!repeats) continue;
    plan.runs.push_back({first, period, count / period});
    plan.why = fmt::format("scan: layers {} as {} iterations of one {}-layer body {}",
                           span(first, count), count / period, period, describe(unit));
    return plan;
  }
  // Not one repeated block: from each layer on, scan the longest stretch that repeats some
  // block at least twice (a run of one kind, or [dense, MoE] pairs before an odd last layer);
  // a layer that starts no such stretch is unrolled.
  std::vector<std::string> scanned, unrolled;
  for (int64_t at = 0; at < count;) {
    LayerRun best{first + at, 1, 1};
    for (int64_t period = 1; period <= (count - at) / 2; ++period) {
      const std::string unit = kinds.substr(static_cast<size_t>(at), static_cast<size_t>(period));
      int64_t repeats = 1;
      while (at + (repeats + 1) * period <= count &&
             kinds.compare(static_cast<size_t>(at + repeats * period), static_cast<size_t>(period),
                           unit) == 0) {
        ++repeats;
      }
      if (repeats >= 2 && repeats * period > best.repeats * best.period) {
        best = {first + at, period, repeats};
      }
    }
    const int64_t n = best.period * best.repeats;
    if (best.repeats >= 2) {
      scanned.push_back(fmt::format(
          "{} ({} x {})", span(first + at, n), best.repeats,
          describe(kinds.substr(static_cast<size_t>(at), static_cast<size_t>(best.period)))));
    } else {
      unrolled.push_back(fmt::format("{} ({})", span(first + at, 1),
                                     describe(kinds.substr(static_cast<size_t>(at), 1))));
    }
    plan.runs.push_back(best);
    at += n;
  }
  plan.why =
      fmt::format("scan: layers {} are not one repeated block ({}); scanned: {}; unrolled: {}",
                  span(first, count), describe(kinds),
                  scanned.empty() ? "none" : fmt::format("{}", fmt::join(scanned, ", ")),
                  unrolled.empty() ? "none" : fmt::format("{}", fmt::join(unrolled, ", ")));
  return plan;
}

Tensor run_layers(const GptConfig& c, const NamedTensors& p, int64_t first, int64_t count,
                  int64_t name_offset, const Tensor& x, const Context& ctx, BlockTotals& totals) {
  Tensor y = x;
  if (!c.layout.scanned) {
    for (int64_t i = first; i < first + count; ++i) {
      y = block(c, p, fmt::format("h.{}", i - name_offset), layer_kind(c, i), y, ctx, totals);
    }
    return y;
  }
  for (const LayerRun& run : layer_plan(c, first, count).runs) {
    if (run.repeats > 1) {
      y = scan_run(c, p, run, name_offset, y, ctx, totals);
      continue;
    }
    for (int64_t i = run.first; i < run.first + run.period; ++i) {
      y = block(c, p, fmt::format("h.{}", i - name_offset), layer_kind(c, i), y, ctx, totals);
    }
  }
  return y;
}

}  // namespace keel::nn
