// IR tests: dtype/shape helpers, type rules, text round trip, hash, verifier, differences,
// the UTF-8 escape of byte strings.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <bit>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <thread>

#include "ir/buffer.h"
#include "ir/diff.h"
#include "ir/error.h"
#include "ir/graph.h"
#include "ir/hash.h"
#include "ir/host_memory.h"
#include "ir/text.h"
#include "ir/utf8_escape.h"
#include "ir/verify.h"
#include "ir/version.h"
#include "tests/fake_device.h"
#include "tests/huge_pages.h"
#include "tests/scan_graphs.h"

namespace keel {
namespace {

using Ints = std::vector<int64_t>;
SourceLoc at(uint32_t line, std::string file = "model.cpp") {
  return {std::move(file), line};
}
TensorType T(DType d, Shape s) {
  return {d, std::move(s)};
}
constexpr DType f32 = DType::f32, bf16 = DType::bf16, i32 = DType::i32, i64 = DType::i64,
                boolean = DType::boolean;

// "" when infer_type accepts, else its error text.
std::string infer_error(Op op, std::vector<TensorType> in, const Attrs& attrs = {}) {
  try {
    infer_type(op, in, attrs);
    return "";
  } catch (const Error& e) {
    return e.what();
  }
}

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

void expect_same(const Graph& a, const Graph& b) {
  EXPECT_EQ(a.name(), b.name());
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    const Node &x = a.nodes()[i], &y = b.nodes()[i];
    EXPECT_EQ(x.op, y.op) << i;
    EXPECT_EQ(x.inputs, y.inputs) << i;
    EXPECT_EQ(x.type, y.type) << i;
    EXPECT_TRUE(x.attrs == y.attrs) << i;
    EXPECT_EQ(x.loc, y.loc) << i;
  }
  EXPECT_EQ(a.params(), b.params());
  EXPECT_EQ(a.outputs(), b.outputs());
  EXPECT_EQ(a.output_aliases(), b.output_aliases());
}

// print -> parse -> print gives the same text, an identical graph and the same hash.
void expect_round_trip(const Graph& g) {
  std::string text = print_graph(g);
  Graph back = parse_graph(text, "rt");
  expect_same(g, back);
  EXPECT_EQ(print_graph(back), text);
  EXPECT_EQ(graph_hash(back), graph_hash(g));
}

Graph example() {
  Graph g("train_step");
  NodeId x = g.add_param(T(f32, {4, 8}), at(12));
  NodeId c = g.add_constant(Array::scalar(2), at(13));
  g.add_output(g.emit(Op::mul, {x, c}, {}, at(13)));
  return g;
}

const char* kExample = R"(graph train_step {
  %0 = parameter() {index=0} : f32[4,8] @ "model.cpp":12
  %1 = constant() {value=f32[]{2}} : f32[] @ "model.cpp":13
  %2 = mul(%0, %1) : f32[4,8] @ "model.cpp":13
  return (%2)
}
)";

// A graph with every op of ir/ops.def, built through the checked emit().
Graph all_ops_graph() {
  Graph g("all \"ops\"");
  uint32_t line = 1;
  auto e = [&](Op op, std::vector<NodeId> in, Attrs a = {}) {
    return g.emit(op, std::move(in), std::move(a), at(line++, "dir/my \"file\"\\x.cpp"));
  };
  NodeId a = g.add_param(T(f32, {2, 3}), at(line++));
  NodeId b = g.add_param(T(f32, {2, 3}));
  NodeId seed = g.add_param(T(i64, {}), at(line++));
  NodeId ctr = g.add_constant(Array::scalar(7, i64), at(line++));
  NodeId two = g.add_constant(Array::scalar(2));
  NodeId idx = g.add_constant(Array::from_i64({2}, Ints{1, 0}, i32));
  e(Op::iota, {}, {{"shape", Ints{2, 3}}, {"dtype", i32}, {"dim", int64_t{1}}});
  e(Op::rng_uniform, {seed, ctr}, {{"shape", Ints{2, 3}}, {"dtype", bf16}});
  for (Op op : {Op::neg, Op::abs, Op::exp, Op::log, Op::tanh, Op::sqrt, Op::rsqrt, Op::sigmoid,
                Op::erf, Op::sin, Op::cos, Op::stop_gradient}) {
    e(op, {a});
  }
  for (Op op : {Op::add, Op::sub, Op::div, Op::max, Op::min, Op::pow}) e(op, {a, b});
  e(Op::mul, {a, two}, {{"note", std::string("tab\there \"q\" \\ \x01 caf\xc3\xa9\n")}});
  NodeId lt = e(Op::compare, {a, b}, {{"direction", std::string("lt")}});
  e(Op::select, {lt, a, b});
  e(Op::cast, {a}, {{"dtype", bf16}});
  e(Op::reshape, {a}, {{"shape", Ints{3, 2}}});
  e(Op::transpose, {a}, {{"perm", Ints{1, 0}}});
  e(Op::broadcast, {a}, {{"shape", Ints{4, 2, 3}}});
  e(Op::slice, {a}, {{"start", Ints{0, 1}}, {"limit", Ints{2, 3}}, {"stride", Ints{1, 2}}});
  e(Op::concat, {a, b, a}, {{"axis", int64_t{0}}});
  e(Op::pad, {a}, {{"low", Ints{0, 1}}, {"high", Ints{1, 0}}, {"value", -0.5}});
  NodeId gathered = e(Op::gather, {a, idx}, {{"axis", int64_t{1}}});
  e(Op::scatter_add, {a, idx, gathered}, {{"axis", int64_t{1}}});
  e(Op::one_hot, {idx}, {{"depth", int64_t{3}}, {"dtype", f32}});
  e(Op::reduce_sum, {a}, {{"axes", Ints{1}}, {"keepdims", int64_t{0}}});
  e(Op::reduce_max, {a}, {{"axes", Ints{0, 1}}, {"keepdims", int64_t{1}}});
  e(Op::reduce_mean, {a}, {{"axes", Ints{}}, {"keepdims", int64_t{0}}, {"eps", 2.0}});
  e(Op::argmax, {a}, {{"axis", int64_t{1}}, {"keepdims", int64_t{0}}});
  e(Op::cumsum, {a}, {{"axis", int64_t{1}}, {"reverse", int64_t{1}}});
  e(Op::top_k_values, {a}, {{"k", int64_t{2}}});
  const Attrs axis{{"axis", std::string("da\"ta")}, {"axis_size", int64_t{2}}};
  Attrs reduce = axis, along = axis;
  reduce.set("reduce", std::string("min"));
  along.set("dim", int64_t{0});
  e(Op::all_reduce, {a}, reduce);
  e(Op::all_gather, {a}, along);
  e(Op::reduce_scatter, {a}, along);
  e(Op::all_to_all, {a}, along);
  e(Op::axis_index, {}, axis);
  e(Op::pvary, {a}, axis);
  NodeId top = e(Op::top_k_indices, {a}, {{"k", int64_t{2}}});
  NodeId dot = e(Op::dot_general, {a, b},
                 {{"lhs_batch", Ints{}},
                  {"rhs_batch", Ints{}},
                  {"lhs_contract", Ints{1}},
                  {"rhs_contract", Ints{1}}});
  NodeId h = g.add_param(T(f32, {2, 3}), at(line++));
  NodeId ws = g.add_param(T(f32, {4, 3, 3}), at(line++));
  NodeId bias = g.add_param(T(f32, {3}), at(line++));
  std::vector<NodeId> sr = scan_test::tiny_scan(g, h, ws, bias, /*reverse=*/true);
  NodeId q = g.add_param(T(f32, {1, 4, 3, 2}), at(line++));
  NodeId kv = g.add_param(T(f32, {1, 2, 3, 2}), at(line++));
  NodeId doc = g.add_constant(Array::from_i64({1, 3}, Ints{0, 0, 1}, i32));
  const Attrs scale{{"scale", 0.7071}};
  NodeId att = e(Op::attention, {q, kv, kv, doc}, scale);
  NodeId lse = e(Op::attention_lse, {q, kv}, scale);
  for (Op op : {Op::attention_dq, Op::attention_dk, Op::attention_dv}) {
    e(op, {q, kv, kv, att, att, lse, doc}, scale);
  }
  NodeId sq = g.add_param(T(f32, {1, 3, 4, 2}), at(line++));
  NodeId skv = g.add_param(T(f32, {1, 3, 2, 2}), at(line++));
  NodeId keys = g.add_constant(Array::from_i64({1, 3, 2}, Ints{0, -1, 0, 1, 2, 1}, i32));
  NodeId sparse = e(Op::sparse_attention, {sq, skv, skv, keys}, scale);
  for (Op op : {Op::sparse_attention_dq, Op::sparse_attention_dk, Op::sparse_attention_dv}) {
    e(op, {sq, skv, skv, sparse, keys}, scale);
  }
  e(Op::sparse_attention_weights, {sq, skv, keys}, scale);
  g.set_outputs({dot, top, a, sr[1]});
  return g;
}

// An event: done at birth unless pending; wait() blocks until complete() and rethrows a failure;
// completing twice is a bug the event names.
TEST(Event, WaitsForCompletionAndRethrowsTheFailure) {
  EXPECT_TRUE(Event().done());
  Event pending = Event::pending();
  EXPECT_FALSE(pending.done());
  std::thread later([copy = pending] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    copy.complete();
  });
  pending.wait();
  EXPECT_TRUE(pending.done());
  later.join();
  EXPECT_THROW(pending.complete(), Error);
  Event failed = Event::pending();
  failed.complete(std::make_exception_ptr(Error("[test] the transfer failed")));
  EXPECT_THROW(failed.wait(), Error);
}

// A buffer is a handle: copies share the device's memory, reading it on the host goes through
// an asynchronous copy, and writes check the type. Nothing here knows what the device is.
TEST(Buffer, IsAHandleToDeviceMemoryReadThroughHostCopies) {
  using testing_support::fake_device_buffer;
  const Array host = Array::from_f32({3}, std::vector<float>{1, 2, 3});
  Buffer b = fake_device_buffer(host);
  EXPECT_EQ(b.device(), "fake:0");
  EXPECT_EQ(b.nbytes(), 12);
  const Buffer same = b;
  EXPECT_EQ(same.address(), b.address());
  HostCopy read = b.to_host();
  read.done.wait();
  EXPECT_TRUE(read.value.same_bytes(host));
  EXPECT_NE(static_cast<const void*>(read.value.data()), b.address());  // a copy, not a view

  Buffer copy = b.copy();
  EXPECT_NE(copy.address(), b.address());
  b.assign_from_host(Array::from_f32({3}, std::vector<float>{7, 8, 9})).wait();
  EXPECT_EQ(same.to_host().get().to_f32(), (std::vector<float>{7, 8, 9}));  // the other handle
  EXPECT_EQ(copy.to_host().get().to_f32(), (std::vector<float>{1, 2, 3}));  // not the copy
  b.assign_from(copy).wait();
  EXPECT_EQ(b.to_host().get().to_f32(), (std::vector<float>{1, 2, 3}));

  try {
    b.assign_from_host(Array::from_f32({2}, std::vector<float>{0, 0}));
    ADD_FAILURE() << "a host value of another shape was written";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "[ir] a host value of f32[2] written into a buffer of f32[3]; write a value of the "
              "buffer's dtype and shape");
  }
  try {
    (void)Buffer().to_host();
    ADD_FAILURE() << "an empty buffer was read";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "[ir] a host copy of an empty keel::Buffer; use one a backend made "
              "(Client::to_device or a program's result)");
  }
}

TEST(HostMemory, ZeroedArraysAreZeroAndAligned) {
  for (int64_t n : {int64_t{1000}, int64_t{1} << 20}) {  // heap and mapped blocks
    Array clean(DType::f32, {n});
    for (float x : clean.to_f32()) ASSERT_EQ(x, 0.0f) << n;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(clean.data()) % 64, 0u);
  }
}

// Blocks of 256 KB and more come populated, so writing them takes no page fault, and asked for
// 2 MB pages: where the kernel has transparent huge pages on request, /proc/self/smaps calls the
// mapping eligible (whether it got them depends on the free memory).
TEST(HostMemory, LargeBlocksComePopulatedAndAskForHugePages) {
  const size_t bytes = size_t{16} << 20;
  const std::shared_ptr<HostBlock> block = allocate_host(bytes, false);
  rusage before{}, after{};
  getrusage(RUSAGE_THREAD, &before);
  std::memset(block->data(), 1, bytes);
  getrusage(RUSAGE_THREAD, &after);
  EXPECT_LT(after.ru_minflt - before.ru_minflt, 64) << "page faults writing a fresh 16 MB block";
  if (!testing_support::huge_pages_on_request()) return;
  std::ifstream smaps("/proc/self/smaps");
  const auto at = reinterpret_cast<uintptr_t>(block->data());
  bool inside = false;
  int eligible = -1;
  for (std::string line; std::getline(smaps, line);) {
    uintptr_t lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &lo, &hi) == 2) {
      inside = lo <= at && at < hi;
    } else if (inside && line.rfind("THPeligible:", 0) == 0) {
      eligible = std::stoi(line.substr(12));
    }
  }
  EXPECT_EQ(eligible, 1) << "THPeligible of the block's mapping in /proc/self/smaps";
}

// Untouched zeros (stand-ins whose type alone matters) read as zeros, are aligned and writable,
// and a large block takes its pages only where it is written (it is not populated up front).
TEST(HostMemory, UntouchedZerosTakeMemoryOnlyWhereTouched) {
  for (int64_t n : {int64_t{1000}, int64_t{4} << 20}) {  // heap and mapped blocks
    Array zeros = Array::untouched_zeros(DType::f32, {n});
    EXPECT_EQ(reinterpret_cast<uintptr_t>(zeros.data()) % 64, 0u);
    double total = 0;
    for (int64_t i = 0; i < n; i += 1024) total += zeros.get_f64(i);
    EXPECT_EQ(total, 0.0) << n;
    zeros.set_f64(n - 1, 2.0);
    EXPECT_EQ(zeros.get_f64(n - 1), 2.0) << n;
  }
  const size_t bytes = size_t{64} << 20;
  std::shared_ptr<HostBlock> untouched = allocate_host_untouched(bytes);
  rusage before{}, after{};
  getrusage(RUSAGE_THREAD, &before);
  std::memset(untouched->data(), 1, bytes / 2);
  getrusage(RUSAGE_THREAD, &after);
  // Written, its pages fault in one by one (or 2 MB at a time, 16 for 32 MB): it was not
  // populated up front, as allocate_host's blocks are (a few faults at most).
  EXPECT_GE(after.ru_minflt - before.ru_minflt, 8) << "page faults writing half of 64 MB";
}

// An allocator that recycles blocks hands an Array one of exactly its bytes; the array keeps it
// alive and shares it with its copies.
TEST(HostMemory, AnArrayAdoptsABlockOfExactlyItsBytes) {
  std::shared_ptr<HostBlock> block = allocate_host(24, true);
  const std::byte* at = block->data();
  Array a = Array::adopt(DType::f32, {2, 3}, block);
  EXPECT_EQ(a.data(), at);
  EXPECT_EQ(block.use_count(), 2);
  try {
    (void)Array::adopt(DType::f32, {7}, block);
    ADD_FAILURE() << "a block of another size was adopted";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "[array] a host block of 24 bytes adopted for f32[7] (28 bytes); allocate the "
              "array's exact size");
  }
  struct Misaligned : HostBlock {  // 4 bytes into the system block it keeps
    explicit Misaligned(std::shared_ptr<HostBlock> from)
        : HostBlock(from->data() + 4, 8), from(std::move(from)) {}
    std::shared_ptr<HostBlock> from;
  };
  try {
    (void)Array::adopt(DType::f32, {2}, std::make_shared<Misaligned>(block));
    ADD_FAILURE() << "a block off the 64-byte alignment was adopted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("kernels read arrays 64-byte aligned"), std::string::npos)
        << e.what();
  }
}

#ifdef KEEL_POISON_MEMORY
TEST(HostMemory, PoisonBuildsFillUninitializedArraysWithNaN) {
  Array a = Array::uninitialized(DType::f32, {64});
  for (float x : a.to_f32()) ASSERT_TRUE(std::isnan(x));
}
#endif

// Text from files and the command line prints on one line that cannot steer a terminal: C0, DEL
// and UTF-8's C1 controls escaped; other UTF-8 (é) and backslashes as they are.
TEST(TextSpelling, PrintableTextEscapesControlCharacters) {
  EXPECT_EQ(printable_text("a\x1b[2Jb\n\x7f\\x"), "a\\x1b[2Jb\\x0a\\x7f\\x");
  EXPECT_EQ(printable_text("\xc2\x9b"
                           "1m \xc3\xa9 \xc2\xa0"),
            "\\xc2\\x9b1m \xc3\xa9 \xc2\xa0");
  EXPECT_EQ(printable_text("\xc2"), "\xc2");  // a lead byte at the end: nothing to pair
  EXPECT_EQ(quoted_text("a\"\x01", true), "\"a\\\"\\u0001\"");
  EXPECT_EQ(quoted_text("a\"\x01"), "\"a\\\"\\x01\"");
}

TEST(DType, NamesSizesAndBf16) {
  for (DType t : {f32, bf16, i32, i64, boolean}) EXPECT_EQ(parse_dtype(dtype_name(t)), t);
  EXPECT_EQ(dtype_name(boolean), "bool");
  EXPECT_FALSE(parse_dtype("f64"));
  EXPECT_EQ(dtype_size(bf16), 2u);
  EXPECT_EQ(dtype_size(i64), 8u);
  EXPECT_TRUE(is_float(bf16) && !is_float(i32) && is_int(i64) && !is_int(boolean));
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(f32_to_bf16(std::bit_cast<float>(0x3f808000u)), 0x3f80);  // tie rounds to even
  EXPECT_EQ(f32_to_bf16(std::bit_cast<float>(0x3f818000u)), 0x3f82);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(NAN))));
}

TEST(Shape, Helpers) {
  EXPECT_EQ(numel({}), 1);
  EXPECT_EQ(numel({2, 0, 3}), 0);
  EXPECT_EQ(shape_str({2, 3}), "[2,3]");
  EXPECT_EQ(strides_of({2, 3, 4}), (Ints{12, 4, 1}));
  EXPECT_EQ(broadcast_shapes({4, 1, 3}, {5, 1}), (Shape{4, 5, 3}));
  EXPECT_EQ(error_of([] {
              broadcast_shapes({2, 3}, {4});
            }),
            "shapes [2,3] and [4] do not broadcast (dimension 1: 3 vs 4)");
  EXPECT_TRUE(broadcastable_to({3}, {2, 3}));
  EXPECT_FALSE(broadcastable_to({2, 3}, {3}));
  EXPECT_EQ(normalize_axis(-1, 3), 2);
  EXPECT_EQ(error_of([] { normalize_axis(3, 3); }), "axis 3 is out of range for rank 3");
}

TEST(Infer, ElementwiseAndBroadcast) {
  EXPECT_EQ(infer_type(Op::add, std::vector{T(f32, {4, 1}), T(f32, {3})}, {}), T(f32, {4, 3}));
  EXPECT_EQ(infer_error(Op::add, {T(f32, {2}), T(i32, {2})}),
            "input 0 is f32 but input 1 is i32; cast one of them");
  EXPECT_EQ(infer_error(Op::add, {T(f32, {2})}), "takes 2 inputs; got 1");
  EXPECT_EQ(infer_error(Op::mul, {T(f32, {2, 3}), T(f32, {4})}),
            "shapes [2,3] and [4] do not broadcast (dimension 1: 3 vs 4)");
  EXPECT_EQ(infer_error(Op::exp, {T(i32, {2})}),
            "input 0 is i32; expected f32 or bf16 (cast first)");
  EXPECT_EQ(infer_error(Op::neg, {T(boolean, {})}), "input 0 is bool; expected a number type");
  EXPECT_EQ(infer_error(Op::neg, {T(i32, {})}), "");
  EXPECT_EQ(infer_error(Op::pow, {T(i32, {}), T(i32, {})}),
            "input 0 is i32; expected f32 or bf16 (cast first)");
  Attrs lt{{"direction", std::string("lt")}};
  EXPECT_EQ(infer_type(Op::compare, std::vector{T(i32, {3}), T(i32, {})}, lt), T(boolean, {3}));
  EXPECT_EQ(infer_error(Op::compare, {T(i32, {}), T(i32, {})}, {{"direction", std::string("<")}}),
            "direction '<' is not one of eq, ne, lt, le, gt, ge");
  EXPECT_EQ(infer_error(Op::compare, {T(i32, {}), T(i32, {})}), "attribute 'direction' is missing");
  EXPECT_EQ(infer_type(Op::select, std::vector{T(boolean, {2, 1}), T(f32, {3}), T(f32, {})}, {}),
            T(f32, {2, 3}));
  EXPECT_EQ(infer_error(Op::select, {T(f32, {}), T(f32, {}), T(f32, {})}),
            "predicate is f32; expected bool");
  EXPECT_EQ(infer_type(Op::cast, std::vector{T(f32, {2})}, {{"dtype", i32}}), T(i32, {2}));
  EXPECT_EQ(infer_error(Op::cast, {T(f32, {2})}, {{"dtype", int64_t{1}}}),
            "attribute 'dtype' must be a dtype");
}

TEST(Infer, LeavesAndRandom) {
  EXPECT_EQ(infer_type(Op::constant, {}, {{"value", Array(i64, {2})}}), T(i64, {2}));
  Attrs iota{{"shape", Ints{2, 3}}, {"dtype", i32}, {"dim", int64_t{2}}};
  EXPECT_EQ(infer_error(Op::iota, {}, iota), "dim 2 is out of range for shape [2,3]");
  EXPECT_EQ(infer_error(Op::parameter, {}), "parameters carry their own type");
  Attrs rng{{"shape", Ints{2}}, {"dtype", f32}};
  EXPECT_EQ(infer_type(Op::rng_uniform, std::vector{T(i64, {}), T(i64, {})}, rng), T(f32, {2}));
  EXPECT_EQ(infer_error(Op::rng_uniform, {T(i64, {}), T(i32, {})}, rng),
            "input 1 (i32[]) must be an i64 scalar (seed, counter)");
  rng.set("dtype", i32);
  EXPECT_EQ(infer_error(Op::rng_uniform, {T(i64, {}), T(i64, {})}, rng),
            "rng_uniform produces f32 or bf16");
}

TEST(Infer, Layout) {
  auto x = T(f32, {2, 3});
  EXPECT_EQ(infer_type(Op::reshape, std::vector{x}, {{"shape", Ints{6}}}), T(f32, {6}));
  EXPECT_EQ(infer_error(Op::reshape, {x}, {{"shape", Ints{4}}}),
            "cannot reshape [2,3] (6 elements) to [4] (4 elements)");
  EXPECT_EQ(infer_type(Op::transpose, std::vector{x}, {{"perm", Ints{1, 0}}}), T(f32, {3, 2}));
  EXPECT_EQ(infer_error(Op::transpose, {x}, {{"perm", Ints{0, 0}}}), "perm axis 0 is listed twice");
  EXPECT_EQ(infer_error(Op::broadcast, {x}, {{"shape", Ints{3, 3}}}),
            "shape [2,3] does not broadcast to [3,3]");
  Attrs sl{{"start", Ints{0, 1}}, {"limit", Ints{2, 3}}, {"stride", Ints{1, 2}}};
  EXPECT_EQ(infer_type(Op::slice, std::vector{x}, sl), T(f32, {2, 1}));
  sl.set("limit", Ints{2, 4});
  EXPECT_EQ(infer_error(Op::slice, {x}, sl),
            "dimension 1: need 0 <= start 1 <= limit 4 <= size 3 and stride 2 >= 1");
  EXPECT_EQ(infer_type(Op::concat, std::vector{x, T(f32, {2, 1})}, {{"axis", int64_t{1}}}),
            T(f32, {2, 4}));
  EXPECT_EQ(infer_error(Op::concat, {x, T(f32, {1, 3})}, {{"axis", int64_t{1}}}),
            "input 1 has shape [1,3], which differs from [2,3] outside axis 1");
  Attrs pad{{"low", Ints{1, 0}}, {"high", Ints{0, -1}}, {"value", 0.0}};
  EXPECT_EQ(infer_error(Op::pad, {x}, pad), "dimension 1: padding must be >= 0 (got 0, -1)");
}

TEST(Infer, IndexReduceScanTopKDot) {
  auto x = T(f32, {2, 3});
  Attrs ax1{{"axis", int64_t{1}}};
  EXPECT_EQ(infer_type(Op::gather, std::vector{x, T(i32, {4, 5})}, ax1), T(f32, {2, 4, 5}));
  EXPECT_EQ(infer_error(Op::gather, {x, T(f32, {4})}, ax1), "indices is f32; expected i32 or i64");
  EXPECT_EQ(infer_error(Op::scatter_add, {x, T(i32, {4}), T(f32, {2, 3})}, ax1),
            "updates have shape [2,3]; expected [2,4]");
  EXPECT_EQ(
      infer_type(Op::one_hot, std::vector{T(i64, {5})}, {{"depth", int64_t{3}}, {"dtype", f32}}),
      T(f32, {5, 3}));
  Attrs red{{"axes", Ints{0}}, {"keepdims", int64_t{1}}};
  EXPECT_EQ(infer_type(Op::reduce_sum, std::vector{x}, red), T(f32, {1, 3}));
  red.set("axes", Ints{2});
  EXPECT_EQ(infer_error(Op::reduce_max, {x}, red), "reduction axis 2 is out of range for rank 2");
  EXPECT_EQ(
      infer_type(Op::argmax, std::vector{x}, {{"axis", int64_t{1}}, {"keepdims", int64_t{0}}}),
      T(i64, {2}));
  EXPECT_EQ(infer_error(Op::cumsum, {x}, {{"axis", int64_t{5}}, {"reverse", int64_t{0}}}),
            "axis 5 is out of range for rank 2");
  EXPECT_EQ(infer_type(Op::top_k_indices, std::vector{x}, {{"k", int64_t{2}}}), T(i64, {2, 2}));
  EXPECT_EQ(infer_error(Op::top_k_values, {x}, {{"k", int64_t{4}}}), "k = 4 must be in [1, 3]");
  Attrs dot{{"lhs_batch", Ints{0}},
            {"rhs_batch", Ints{0}},
            {"lhs_contract", Ints{2}},
            {"rhs_contract", Ints{1}}};
  EXPECT_EQ(infer_type(Op::dot_general, std::vector{T(f32, {5, 2, 3}), T(f32, {5, 3, 4})}, dot),
            T(f32, {5, 2, 4}));
  EXPECT_EQ(infer_error(Op::dot_general, {T(f32, {5, 2, 3}), T(f32, {5, 2, 4})}, dot),
            "contracting dimension 0: lhs [5,2,3] has 3 but rhs [5,2,4] has 2");
  // preferred_element_type: f32 sums of bf16 operands, or the operands' own type; no other.
  Attrs wide = dot;
  wide.set("preferred_element_type", DType::f32);
  EXPECT_EQ(infer_type(Op::dot_general, std::vector{T(bf16, {5, 2, 3}), T(bf16, {5, 3, 4})}, wide),
            T(f32, {5, 2, 4}));
  EXPECT_EQ(infer_type(Op::dot_general, std::vector{T(f32, {5, 2, 3}), T(f32, {5, 3, 4})}, wide),
            T(f32, {5, 2, 4}));
  EXPECT_EQ(infer_error(Op::dot_general, {T(i32, {5, 2, 3}), T(i32, {5, 3, 4})}, wide),
            "preferred_element_type f32 for i32 operands; expected f32 for bf16 operands, or the "
            "operands' own type");
  Attrs narrow = dot;
  narrow.set("preferred_element_type", DType::bf16);
  EXPECT_EQ(infer_error(Op::dot_general, {T(f32, {5, 2, 3}), T(f32, {5, 3, 4})}, narrow),
            "preferred_element_type bf16 for f32 operands; expected f32 for bf16 operands, or the "
            "operands' own type");
  Attrs bad = dot;
  bad.set("preferred_element_type", int64_t{1});
  EXPECT_EQ(infer_error(Op::dot_general, {T(bf16, {5, 2, 3}), T(bf16, {5, 3, 4})}, bad),
            "preferred_element_type is not a dtype");
  EXPECT_EQ(infer_error(Op::dot_general, {T(bf16, {5, 2, 3}), T(f32, {5, 3, 4})}, wide),
            "input 0 is bf16 but input 1 is f32; cast one of them");
}

TEST(Infer, AttentionFamily) {
  const auto q = T(f32, {2, 8, 5, 4}), kv = T(f32, {2, 2, 5, 4}), rows = T(f32, {2, 8, 5});
  const Attrs s{{"scale", 0.5}};
  EXPECT_EQ(infer_type(Op::attention, std::vector{q, kv, kv}, s), q);
  EXPECT_EQ(infer_type(Op::attention, std::vector{q, kv, kv, T(i64, {2, 5})}, s), q);
  EXPECT_EQ(infer_type(Op::attention_lse, std::vector{q, kv, T(i32, {2, 5})}, s), rows);
  EXPECT_EQ(infer_type(Op::attention_dq, std::vector{q, kv, kv, q, q, rows}, s), q);
  EXPECT_EQ(infer_type(Op::attention_dk, std::vector{q, kv, kv, q, q, rows}, s), kv);
  EXPECT_EQ(infer_type(Op::attention_dv, std::vector{q, kv, kv, q, q, rows, T(i64, {2, 5})}, s),
            kv);
  EXPECT_EQ(infer_error(Op::attention, {q, T(f32, {2, 3, 5, 4}), T(f32, {2, 3, 5, 4})}, s),
            "q has 8 heads but k has 3; the query heads must be a multiple of the kv heads "
            "(grouped-query attention)");
  EXPECT_EQ(infer_error(Op::attention, {q, T(f32, {2, 2, 6, 4}), kv}, s),
            "k is f32[2,2,6,4]; expected [2, kv_heads, 5, 4] to match q f32[2,8,5,4]");
  EXPECT_EQ(infer_error(Op::attention, {q, kv, T(f32, {2, 2, 5, 3})}, s),
            "v is f32[2,2,5,3]; expected shape [2,2,5,4]");
  EXPECT_EQ(infer_error(Op::attention, {T(bf16, {2, 8, 5, 4}), kv, kv}, s),
            "q is bf16; expected f32 (cast first)");
  EXPECT_EQ(infer_error(Op::attention, {q, kv, kv, T(f32, {2, 5})}, s),
            "doc ids are f32[2,5]; expected i32 or i64 [2, 5] (a document id per position)");
  EXPECT_EQ(infer_error(Op::attention_dq, {q, kv, kv, q, q, T(f32, {2, 8, 4})}, s),
            "lse is f32[2,8,4]; expected shape [2,8,5]");
  EXPECT_EQ(infer_error(Op::attention, {q, kv}, s), "takes 3 inputs; got 2");
  EXPECT_EQ(infer_error(Op::attention, {q, kv, kv}, {{"scale", std::nan("")}}),
            "scale nan must be finite");
  EXPECT_EQ(infer_error(Op::attention, {T(f32, {2, 8, 5}), kv, kv}, s),
            "q is f32[2,8,5]; expected rank 4 [batch, heads, seq, head_dim]");
}

// Layout bthd: the same rules with heads after positions; lse stays [B, H, T]; messages show the
// shapes as given.
TEST(Infer, AttentionFamilyInLayoutBthd) {
  const auto q = T(f32, {2, 5, 8, 4}), kv = T(f32, {2, 5, 2, 4}), rows = T(f32, {2, 8, 5});
  const Attrs s{{"scale", 0.5}, {"layout", std::string("bthd")}};
  EXPECT_EQ(infer_type(Op::attention, std::vector{q, kv, kv, T(i64, {2, 5})}, s), q);
  EXPECT_EQ(infer_type(Op::attention_lse, std::vector{q, kv}, s), rows);
  EXPECT_EQ(infer_type(Op::attention_dq, std::vector{q, kv, kv, q, q, rows}, s), q);
  EXPECT_EQ(infer_type(Op::attention_dk, std::vector{q, kv, kv, q, q, rows}, s), kv);
  EXPECT_EQ(infer_error(Op::attention, {q, T(f32, {2, 6, 2, 4}), kv}, s),
            "k is f32[2,6,2,4]; expected [2, 5, kv_heads, 4] to match q f32[2,5,8,4]");
  EXPECT_EQ(infer_error(Op::attention, {q, kv, T(f32, {2, 2, 5, 4})}, s),
            "v is f32[2,2,5,4]; expected shape [2,5,2,4]");
  EXPECT_EQ(infer_error(Op::attention_dq, {q, kv, kv, q, q, T(f32, {2, 5, 8})}, s),
            "lse is f32[2,5,8]; expected shape [2,8,5]");
  // A bhtd-shaped q under bthd reads 8 positions of 5 heads.
  EXPECT_EQ(infer_error(Op::attention, {T(f32, {2, 8, 5, 4}), kv, kv}, s),
            "k is f32[2,5,2,4]; expected [2, 8, kv_heads, 4] to match q f32[2,8,5,4]");
  EXPECT_EQ(infer_error(Op::attention, {T(f32, {2, 8, 5}), kv, kv}, s),
            "q is f32[2,8,5]; expected rank 4 [batch, seq, heads, head_dim]");
  EXPECT_EQ(infer_error(Op::attention, {q, kv, kv}, {{"scale", 0.5}, {"layout", std::string("x")}}),
            "layout 'x' is not bhtd or bthd");
}

// Sparse attention: q [B, T, H, D], k and v [B, T, KV, D], keys [B, T, S] of positions.
TEST(Infer, SparseAttentionFamily) {
  const auto q = T(f32, {2, 5, 8, 4}), kv = T(f32, {2, 5, 2, 4}), keys = T(i32, {2, 5, 3});
  const Attrs s{{"scale", 0.5}};
  EXPECT_EQ(infer_type(Op::sparse_attention, std::vector{q, kv, kv, keys}, s), q);
  EXPECT_EQ(infer_type(Op::sparse_attention_dq, std::vector{q, kv, kv, q, T(i64, {2, 5, 3})}, s),
            q);
  EXPECT_EQ(infer_type(Op::sparse_attention_dk, std::vector{q, kv, kv, q, keys}, s), kv);
  EXPECT_EQ(infer_type(Op::sparse_attention_dv, std::vector{q, kv, kv, q, keys}, s), kv);
  EXPECT_EQ(infer_type(Op::sparse_attention_weights, std::vector{q, kv, keys}, s),
            T(f32, {2, 5, 3}));
  EXPECT_EQ(infer_error(Op::sparse_attention, {q, kv, kv, T(f32, {2, 5, 3})}, s),
            "keys is f32[2,5,3]; expected i32 or i64 [2, 5, S >= 1] (the key positions each "
            "query attends)");
  EXPECT_EQ(infer_error(Op::sparse_attention, {q, kv, kv, T(i32, {2, 4, 3})}, s),
            "keys is i32[2,4,3]; expected i32 or i64 [2, 5, S >= 1] (the key positions each "
            "query attends)");
  EXPECT_EQ(infer_error(Op::sparse_attention, {q, T(f32, {2, 5, 3, 4}), kv, keys}, s),
            "q has 8 heads but k has 3; the query heads must be a multiple of the kv heads "
            "(grouped-query attention)");
  EXPECT_EQ(infer_error(Op::sparse_attention, {q, kv, T(f32, {2, 5, 1, 4}), keys}, s),
            "v is f32[2,5,1,4]; expected shape [2,5,2,4] (as k)");
  EXPECT_EQ(infer_error(Op::sparse_attention_dq, {q, kv, kv, kv, keys}, s),
            "dout is f32[2,5,2,4]; expected shape [2,5,8,4] (as q)");
  EXPECT_EQ(infer_error(Op::sparse_attention, {q, kv, kv, keys}, {{"scale", std::nan("")}}),
            "scale nan must be finite");
}

TEST(Text, PrintsTheDocumentedForm) {
  EXPECT_EQ(print_graph(example()), kExample);
  std::string bare = print_graph(example(), false);
  EXPECT_EQ(bare.find('@'), std::string::npos);
  EXPECT_NE(bare.find("%2 = mul(%0, %1) : f32[4,8]\n"), std::string::npos);
  expect_same(parse_graph(kExample), example());
  Graph empty("");
  EXPECT_EQ(print_graph(empty), "graph \"\" {\n  return ()\n}\n");
  expect_round_trip(empty);
}

TEST(Text, RoundTripsEveryOp) {
  Graph g = all_ops_graph();
  std::set<Op> used;
  for (const Node& n : g.nodes()) used.insert(n.op);
  for (const OpInfo& info : all_ops()) EXPECT_TRUE(used.count(info.op)) << info.name;
  EXPECT_TRUE(verify_problems(g).empty());
  expect_round_trip(g);
  // Without locations the text still parses, to the same hash.
  EXPECT_EQ(graph_hash(parse_graph(print_graph(g, false))), graph_hash(g));
}

// Donation is part of the program: printed as `%out -> %param`, parsed back, hashed and checked.
TEST(Text, DonatedOutputsRoundTripAndChangeTheHash) {
  Graph g("update");
  NodeId p = g.add_param(T(f32, {4}), at(1));
  NodeId m = g.add_param(T(f32, {4}), at(2));
  NodeId s = g.add_param(T(f32, {}), at(3));
  g.add_output(g.emit(Op::add, {p, m}, {}, at(4)));
  g.add_output(g.emit(Op::mul, {m, m}, {}, at(5)));
  g.add_output(s);
  const Hash128 plain = graph_hash(g);
  g.set_output_alias(0, 0);
  g.set_output_alias(1, 1);
  g.set_output_alias(2, 2);
  EXPECT_NE(print_graph(g, false).find("return (%3 -> %0, %4 -> %1, %2 -> %2)"), std::string::npos)
      << print_graph(g, false);
  EXPECT_TRUE(verify_problems(g).empty());
  expect_round_trip(g);
  EXPECT_NE(graph_hash(g), plain);
  Graph undonated = g;
  undonated.set_output_alias(1, -1);
  EXPECT_EQ(explain_difference(g, undonated),
            "output 1 written into parameter 1 -> a fresh buffer (donation)");
  EXPECT_EQ(parse_graph(print_graph(g)).output_alias(1), 1);
  // Only a parameter can take an output.
  EXPECT_EQ(error_of([] {
              parse_graph(
                  "graph g {\n  %0 = parameter() {index=0} : f32[]\n"
                  "  %1 = neg(%0) : f32[]\n  return (%1 -> %1)\n}");
            }),
            "[ir.parse] <text>:4:17: expected a parameter for output 0 to be written into, got "
            "'%1'");
  Graph bad = g;
  bad.set_output_alias(0, 2);  // f32[4] into an f32[] parameter, which output 2 also takes
  bad.set_output_alias(1, 7);
  EXPECT_EQ(verify_problems(bad),
            (std::vector<std::string>{
                "output 0 (f32[4]) is written into parameter 2 of another type f32[]",
                "output 1 is written into parameter 7, but there are 3",
                "outputs 0 and 2 are both written into parameter 2"}));
}

TEST(Text, ArraysOfEveryDtypeRoundTripBitExactly) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> fs = {0.1f,
                           -0.0f,
                           1e-45f,
                           3.4028235e38f,
                           inf,
                           -inf,
                           std::numeric_limits<float>::quiet_NaN(),
                           std::bit_cast<float>(0xffc00000u),
                           std::bit_cast<float>(0x7f800001u),
                           16777217.0f,
                           1.0f / 3};
  Graph g("arrays");
  g.add_constant(Array::from_f32({static_cast<int64_t>(fs.size())}, fs));
  Array b(bf16, {9});
  uint16_t bits[] = {0x3f80, 0x3dcd, 0x8000, 0x7f80, 0xff80, 0x7fc0, 0x7fc1, 0x0001, 0x7f7f};
  std::memcpy(b.data(), bits, sizeof bits);
  g.add_constant(b);
  g.add_constant(Array::from_i64({2, 2}, Ints{INT32_MIN, INT32_MAX, -1, 0}, i32));
  g.add_constant(Array::from_i64({3}, Ints{INT64_MIN, INT64_MAX, 0}, i64));
  g.add_constant(Array::from_i64({1, 3}, Ints{1, 0, 1}, boolean));
  g.add_constant(Array(f32, {0, 5}));
  Node n;  // an attribute of every kind, doubles that look like integers included
  n.op = Op::stop_gradient;
  n.inputs = {0};
  n.type = T(f32, {11});
  n.attrs = {{"i", int64_t{-2}},
             {"d", 2.0},
             {"neg0", -0.0},
             {"inf", -HUGE_VAL},
             {"nan", std::nan("")},
             {"tiny", 5e-324},
             {"big", 1e300},
             {"list", Ints{}},
             {"t", bf16},
             {"s", std::string("")},
             {"odd key=", int64_t{1}}};
  g.append_unchecked(n);
  std::string text = print_graph(g);
  EXPECT_NE(text.find("f32[11]{0.1,-0,1e-45,3.4028235e+38,inf,-inf,nan,-nan,nan(0x7f800001),"
                      "16777216,0.33333334}"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("bf16[9]{1,0.1,-0,inf,-inf,nan,nan(0x7fc1),9e-41,3.39e+38}"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("bool[1,3]{true,false,true}"), std::string::npos);
  EXPECT_NE(text.find("{big=1e+300, d=2.0, i=-2, inf=-inf, list=[], nan=nan, neg0=-0.0, "
                      "\"odd key=\"=1, s=\"\", t=bf16, tiny=5e-324}"),
            std::string::npos)
      << text;
  expect_round_trip(g);
  Graph back = parse_graph(text);
  EXPECT_TRUE(std::holds_alternative<double>(*back.node(6).attrs.find("d")));
  EXPECT_TRUE(std::holds_alternative<int64_t>(*back.node(6).attrs.find("i")));
}

TEST(Hash, GoldenAndStable) {
  Graph g = example();
  // Computed once; a change here means every cached compilation key changes.
  EXPECT_EQ(graph_hash(g).hex(), "7f6516c6f85969440e7445389e69e294");
  EXPECT_EQ(graph_hash(g).hex().size(), 32u);
  EXPECT_EQ(hash_bytes("").hex(), "99aa06d3014798d86001c324468d497f");  // XXH3-128 of ""
  Graph renamed = parse_graph(kExample);
  renamed.set_name("other");
  for (size_t i = 0; i < renamed.size(); ++i) {
    const_cast<Node&>(renamed.nodes()[i]).loc = at(999, "elsewhere.cpp");
  }
  EXPECT_EQ(graph_hash(renamed), graph_hash(g));
  auto changed = [&](const std::string& from, const std::string& to) {
    std::string text = kExample;
    for (size_t p = 0; (p = text.find(from, p)) != std::string::npos; p += to.size()) {
      text.replace(p, from.size(), to);
    }
    return graph_hash(parse_graph(text)) != graph_hash(g);
  };
  EXPECT_TRUE(changed("f32[]{2}", "f32[]{3}"));
  EXPECT_TRUE(changed("f32[4,8]", "f32[4,9]"));
  Graph attr = example();
  const_cast<Node&>(attr.nodes()[2]).attrs.set("note", int64_t{1});
  EXPECT_NE(graph_hash(attr), graph_hash(g));
}

TEST(Verify, NamesNodeOpLocationAndRule) {
  Graph g("bad");
  NodeId x = g.add_param(T(f32, {4}), at(1));
  auto add = [&](Op op, std::vector<NodeId> in, TensorType t, Attrs a = {}, uint32_t line = 42) {
    return g.append_unchecked(Node{op, std::move(in), std::move(t), std::move(a), at(line)});
  };
  add(Op::mul, {x, 5}, T(f32, {4}));  // %1: later input
  add(Op::neg, {x, x}, T(f32, {4}));  // %2: arity
  add(Op::neg, {x}, T(f32, {3}));     // %3: wrong type
  add(Op::exp, {add(Op::constant, {}, T(i32, {}), {{"value", Array(i32, {})}})}, T(i32, {}));
  add(Op::parameter, {}, T(f32, {}), {{"index", int64_t{3}}});  // %6: not in params()
  g.set_outputs({3, 17});
  std::vector<std::string> p = verify_problems(g);
  std::vector<std::string> want = {
      "node %1 (mul) at model.cpp:42: input 1 is %5, which is not an earlier node",
      "node %2 (neg) at model.cpp:42: takes 1 inputs; got 2",
      "node %3 (neg) at model.cpp:42: recorded f32[3] but inputs give f32[4]",
      "node %5 (exp) at model.cpp:42: input 0 is i32; expected f32 or bf16 (cast first)",
      "node %6 (parameter) at model.cpp:42: parameter node is not in params()",
      "output 1 is %17, which does not exist"};
  EXPECT_EQ(p, want);
  EXPECT_EQ(error_of([&] { verify(g); }), "[verify] " + want[0]);
  g.set_params({x, 6, 3});
  p = verify_problems(g);
  EXPECT_EQ(p[4],
            "node %6 (parameter) at model.cpp:42: index attribute is 3 but it is params()[1]");
  EXPECT_EQ(p[5], "node %3 (neg) at model.cpp:42: params()[2] is not a parameter node");
  Graph c("c");
  c.append_unchecked(Node{Op::constant, {}, T(f32, {2}), {{"value", Array(f32, {})}}, {}});
  EXPECT_EQ(verify_problems(c),
            std::vector<std::string>{
                "node %0 (constant) at <unknown>: recorded f32[2] but attributes give f32[]"});
}

Graph mlp(Shape in, float scale, Ints axes, bool extra) {
  Graph g("mlp");
  NodeId w = g.add_param(T(f32, {8, 256}), at(10));
  NodeId x = g.add_param(T(f32, std::move(in)), at(11));
  NodeId s = g.add_constant(Array::scalar(scale), at(42));
  NodeId y = g.emit(Op::mul, {x, s}, {}, at(50));
  if (extra) y = g.emit(Op::neg, {y}, {}, at(57));
  NodeId r =
      g.emit(Op::reduce_sum, {y}, {{"axes", axes}, {"keepdims", int64_t{0}}}, at(9, "f.cpp"));
  g.set_outputs({r, w});
  return g;
}

TEST(Diff, NamesTheFirstDifference) {
  Graph base = mlp({8, 256}, 0.5f, {1}, false);
  EXPECT_EQ(explain_difference(base, parse_graph(print_graph(base, false))), "");
  EXPECT_EQ(explain_difference(base, mlp({4, 256}, 0.5f, {1}, false)),
            "input 1 shape f32[8,256] -> f32[4,256]");
  Graph dt = base;
  const_cast<Node&>(dt.nodes()[1]).type.dtype = bf16;
  EXPECT_EQ(explain_difference(base, dt), "input 1 dtype f32[8,256] -> bf16[8,256]");
  // With the caller's names for the new graph's inputs (a short list names only those it has).
  EXPECT_EQ(explain_difference(base, mlp({4, 256}, 0.5f, {1}, false),
                               {"argument 0", "argument 1 leaf 'x'"}),
            "input 1 (argument 1 leaf 'x') shape f32[8,256] -> f32[4,256]");
  EXPECT_EQ(explain_difference(base, mlp({4, 256}, 0.5f, {1}, false), {"argument 0"}),
            "input 1 shape f32[8,256] -> f32[4,256]");
  EXPECT_EQ(explain_difference(base, mlp({8, 256}, 0.25f, {1}, false)),
            "constant at model.cpp:42 changed 0.5 -> 0.25");
  EXPECT_EQ(explain_difference(base, mlp({8, 256}, 0.5f, {0}, false)),
            "reduce_sum at f.cpp:9: attribute axes [1] -> [0]");
  EXPECT_EQ(explain_difference(base, mlp({8, 256}, 0.5f, {1}, true)),
            "op added at model.cpp:57: neg");
  EXPECT_EQ(explain_difference(mlp({8, 256}, 0.5f, {1}, true), base),
            "op removed at model.cpp:57: neg");
  Graph big1("b"), big2("b");
  big1.add_constant(Array::from_f32({4}, std::vector<float>{1, 2, 3, 4}), at(3));
  big2.add_constant(Array::from_f32({4}, std::vector<float>{1, 5, 6, 7}), at(3));
  EXPECT_EQ(explain_difference(big1, big2),
            "constant at model.cpp:3 changed f32[4]{...} (3 of 4 elements differ)");
  // Equal constants close by are not mistaken for an insertion.
  Graph two1("c"), two2("c");
  for (float v : {0.5f, 0.5f}) two1.add_constant(Array::scalar(v), at(1));
  for (float v : {0.25f, 0.5f}) two2.add_constant(Array::scalar(v), at(1));
  EXPECT_EQ(explain_difference(two1, two2), "constant at model.cpp:1 changed 0.5 -> 0.25");
  two2 = Graph("c");
  two2.add_constant(Array::scalar(0.5, bf16), at(1));
  two2.add_constant(Array::scalar(0.5), at(1));
  EXPECT_EQ(explain_difference(two1, two2),
            "constant at model.cpp:1 changed f32[]{0.5} -> bf16[]{0.5}");
  Graph other_op = base;
  const_cast<Node&>(other_op.nodes()[3]).op = Op::add;
  EXPECT_EQ(explain_difference(base, other_op), "node %3 differs: mul -> add at model.cpp:50");
  Graph outs = base;
  outs.set_outputs({4});
  EXPECT_EQ(explain_difference(base, outs), "outputs (%4, %0) -> (%4)");
  Graph swapped = base;
  const_cast<Node&>(swapped.nodes()[3]).inputs = {2, 1};
  EXPECT_EQ(explain_difference(base, swapped),
            "node %3 differs: mul at model.cpp:50: inputs (%1, %2) -> (%2, %1)");
}

TEST(Parse, ErrorsNameLineAndColumn) {
  auto err = [](std::string text) { return error_of([&] { parse_graph(text, "f.ir"); }); };
  EXPECT_EQ(err(""), "[ir.parse] f.ir:1:1: expected 'graph', got end of input");
  EXPECT_EQ(err("graph g {\n  %0 = frob() : f32[]\n"),
            "[ir.parse] f.ir:2:8: expected an op name, got 'frob'");
  EXPECT_EQ(err("graph g {\n  %1 = iota() : f32[]\n"),
            "[ir.parse] f.ir:2:3: expected '%0' (nodes are numbered in order), got '%1'");
  EXPECT_EQ(err("graph g {\n  %0 = constant() {value=f32[2]{1}} : f32[2]\n"),
            "[ir.parse] f.ir:2:34: expected 2 values for f32[2], got 1");
  EXPECT_EQ(err("graph g {\n  %0 = constant() {value=f32[]{1x}} : f32[]\n"),
            "[ir.parse] f.ir:2:33: expected '}', got 'x'");
  EXPECT_EQ(err("graph g {\n  %0 = constant() {value=i32[]{3000000000}} : i32[]\n"),
            "[ir.parse] f.ir:2:32: expected an i32, got '3000000000'");
  EXPECT_EQ(err("graph g {\n  %0 = parameter() {index=0} : f32[] @ \"a.cpp\n"),
            "[ir.parse] f.ir:2:46: expected '\"' closing the string, got end of line");
  EXPECT_EQ(err("graph g {\n  return (%0)\n}"),
            "[ir.parse] f.ir: output 0 is %0, which does not exist");
  EXPECT_EQ(err("graph g {\n  return ()\n} x"),
            "[ir.parse] f.ir:3:3: expected end of input, got 'x'");
}

// Random truncations and byte mutations of a valid text either parse or throw keel::Error.
TEST(Parse, FuzzedTextNeverCrashes) {
  const std::string text = print_graph(all_ops_graph());
  std::mt19937 rng(1234);
  const std::string alphabet = "%=(){}[],:@\"\\.-+0123456789eEnaixf_ \n";
  int parsed = 0;
  for (int iter = 0; iter < 1500; ++iter) {
    std::string t = text;
    if (iter % 4 == 0) {
      t.resize(rng() % t.size());
    } else {
      for (int k = 0; k <= iter % 3; ++k) {
        size_t pos = rng() % t.size();
        char c = alphabet[rng() % alphabet.size()];
        switch (rng() % 3) {
          case 0:
            t[pos] = c;
            break;
          case 1:
            t.insert(t.begin() + pos, c);
            break;
          default:
            t.erase(pos, 1);
        }
      }
    }
    try {
      Graph g = parse_graph(t);
      EXPECT_EQ(print_graph(parse_graph(print_graph(g))), print_graph(g));
      ++parsed;
    } catch (const Error&) {
    }
  }
  EXPECT_GT(parsed, 0);
}

}  // namespace
}  // namespace keel

namespace keel {
namespace {

Graph scan_program(bool reverse, double scale = 1.0) {
  Graph g("scanned");
  NodeId h = g.add_param(T(f32, {2, 3}), at(1));
  NodeId ws = g.add_param(T(f32, {5, 3, 3}), at(2));
  NodeId b = g.add_param(T(f32, {3}), at(3));
  std::vector<NodeId> r = scan_test::tiny_scan(g, h, ws, b, reverse, scale);
  g.set_outputs({r[0], r[1]});
  return g;
}

TEST(Scan, TypesResultsAndTextRoundTrip) {
  Graph g = scan_program(false);
  EXPECT_EQ(verify_problems(g), std::vector<std::string>{});
  EXPECT_EQ(g.node(3).op, Op::scan);
  EXPECT_EQ(g.node(3).type.str(), "bool[0]");
  EXPECT_EQ(g.node(4).type.str(), "f32[2,3]");  // final carry
  EXPECT_EQ(g.node(5).type.str(), "f32[5,2]");  // stacked ys
  const std::string text = print_graph(g);
  EXPECT_NE(text.find("body=graph body {"), std::string::npos) << text;
  Graph back = parse_graph(text);
  EXPECT_EQ(print_graph(back), text);
  EXPECT_EQ(graph_hash(back), graph_hash(g));
  EXPECT_EQ(print_graph(parse_graph(print_graph(g, false))), print_graph(g, false));
}

TEST(Scan, HashCoversTheBodyButNotItsLocations) {
  const Hash128 h = graph_hash(scan_program(false));
  EXPECT_NE(graph_hash(scan_program(false, 2.0)), h);  // a different body
  EXPECT_NE(graph_hash(scan_program(true)), h);        // reverse
  std::string text = print_graph(scan_program(false));
  for (size_t p = 0; (p = text.find("scan_graphs.h", p)) != std::string::npos; p += 5) {
    text.replace(p, 13, "other.h");
  }
  EXPECT_EQ(graph_hash(parse_graph(text)), h);
}

TEST(Scan, DiffExplainsAChangeInsideTheBody) {
  const std::string why = explain_difference(scan_program(false), scan_program(false, 2.0));
  EXPECT_NE(why.find("scan at scan_graphs.h:50: in its body: "), std::string::npos) << why;
  EXPECT_NE(why.find("scan_graphs.h:"), why.rfind("scan_graphs.h:")) << why;
}

TEST(Scan, VerifierChecksBodyTypesAndResults) {
  // A body parameter that does not match the slice of its xs.
  Graph g("bad");
  NodeId h = g.add_param(T(f32, {2, 3}));
  NodeId ws = g.add_param(T(f32, {5, 3, 4}));
  NodeId b = g.add_param(T(f32, {3}));
  try {
    emit_scan(g, {h, ws, b}, scan_attrs(scan_test::tiny_body(2, 3), 1, 1, 5, false), at(7), "t");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("body parameter 1 is f32[3,3] but the scan passes "
                                         "f32[3,4] (one slice of the xs input)"),
              std::string::npos)
        << e.what();
  }
  // Wrong trip count.
  Graph g2("bad2");
  h = g2.add_param(T(f32, {2, 3}));
  ws = g2.add_param(T(f32, {5, 3, 3}));
  b = g2.add_param(T(f32, {3}));
  EXPECT_THROW(
      emit_scan(g2, {h, ws, b}, scan_attrs(scan_test::tiny_body(2, 3), 1, 1, 4, false), at(7), "t"),
      Error);
  // A new carry of another type than the carry.
  auto body = std::make_shared<Graph>("body");
  NodeId p = body->add_param(T(f32, {2, 3}));
  body->set_outputs(
      {body->emit(Op::reduce_sum, {p}, {{"axes", Ints{1}}, {"keepdims", int64_t{0}}}, {})});
  Graph g3("bad3");
  NodeId c = g3.add_param(T(f32, {2, 3}));
  try {
    emit_scan(g3, {c}, scan_attrs(body, 1, 0, 3, false), at(9), "t");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("new carry"), std::string::npos) << e.what();
  }
  // Results missing after the scan, a scan read directly, a broken body.
  Graph ok = scan_program(false);
  std::string text = print_graph(ok, false);
  const size_t r = text.find("  %5 = scan_result");
  std::string missing = text.substr(0, r) + "  return (%4)\n}\n";
  try {
    parse_graph(missing);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("must be followed by scan_result(%3) {index=1}"),
              std::string::npos)
        << e.what();
  }
  std::string broken = text;
  broken.replace(broken.find("keepdims=0"), 10, "keepdims=1");
  try {
    parse_graph(broken);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("in its body: node %"), std::string::npos) << e.what();
  }
  // A body that donates: the loop owns its buffers, so that is refused.
  std::string donating = text;
  const size_t body_return = donating.find("return (%");
  donating.insert(donating.find(',', body_return), " -> %0");
  try {
    parse_graph(donating);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("its body writes output 0 into a parameter; a scan body "
                                         "cannot donate"),
              std::string::npos)
        << e.what();
  }
  // A body returning a node it does not have: an error naming the output, not a crash.
  std::string dangling = text;
  const size_t ret = dangling.find("return (");  // the body's return comes first
  dangling.replace(ret, dangling.find(')', ret) - ret + 1, "return (%99, %99)");
  try {
    parse_graph(dangling);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("body output 0 is %99, which does not exist"),
              std::string::npos)
        << e.what();
  }
}

// ---- utf8_escape: any bytes as valid UTF-8 and back ----

// nlohmann's strict dump throws on anything that is not valid UTF-8.
bool valid_utf8(const std::string& s) {
  try {
    (void)nlohmann::json(s).dump();
    return true;
  } catch (const nlohmann::json::type_error&) {
    return false;
  }
}

// Through the transform and through a JSON dump/parse of a "sample" field, as record.json does.
void expect_round_trip(const std::string& bytes) {
  const std::string text = bytes_to_utf8(bytes);
  EXPECT_TRUE(valid_utf8(text)) << testing::PrintToString(bytes);
  EXPECT_EQ(utf8_to_bytes(text), bytes);
  const std::string dumped = nlohmann::ordered_json{{"sample", text}}.dump(2);
  EXPECT_EQ(utf8_to_bytes(nlohmann::json::parse(dumped).at("sample").get<std::string>()), bytes);
}

TEST(Utf8Escape, EveryByteValueRoundTrips) {
  std::string all;
  for (int b = 0; b < 256; ++b) {
    const std::string one(1, static_cast<char>(b));
    expect_round_trip(one);
    expect_round_trip("a" + one + "z");
    all += one;
  }
  expect_round_trip(all);
  // A stray byte b >= 0x80 is the one code point U+10FF00 + b.
  EXPECT_EQ(bytes_to_utf8("\xff"), "\xf4\x8f\xbf\xbf");  // U+10FFFF
  EXPECT_EQ(bytes_to_utf8("\x80"), "\xf4\x8f\xbe\x80");  // U+10FF80
}

TEST(Utf8Escape, ValidTextIsUnchanged) {
  for (const std::string s :
       {"", "plain ASCII\n\t\x01", "caf\xc3\xa9 \xe2\x82\xac \xf0\x9d\x84\x9e",
        "\xf4\x8f\xbd\xbf" /* U+10FF7F, just below the reserved range */,
        "\xef\xbf\xbf\xf0\x90\x80\x80" /* U+FFFF, U+10000 */}) {
    EXPECT_TRUE(valid_utf8(s));
    EXPECT_EQ(bytes_to_utf8(s), s);
    EXPECT_EQ(utf8_to_bytes(s), s);
  }
}

TEST(Utf8Escape, IllFormedSequencesAreEscapedByteByByte) {
  for (const std::string s :
       {"\xc0\x80" /* overlong NUL */, "\xe0\x80\xaf" /* overlong */,
        "\xed\xa0\x80" /* surrogate */, "\xf4\x90\x80\x80" /* > U+10FFFF */, "\xf5\x80\x80\x80",
        "\xe2\x82" /* truncated */, "\x80\xbf", "\xc3\xa9\xc3" /* valid, then truncated */}) {
    expect_round_trip(s);
    EXPECT_NE(bytes_to_utf8(s), s);
  }
  // A valid sequence after a stray byte is kept as it is.
  EXPECT_EQ(bytes_to_utf8("\xff\xc3\xa9"), "\xf4\x8f\xbf\xbf\xc3\xa9");
}

// Text that already holds reserved code points is escaped too, so decoding stays exact.
TEST(Utf8Escape, ReservedCodePointsInTheInputRoundTrip) {
  for (const std::string s : {"\xf4\x8f\xbe\x80", "\xf4\x8f\xbf\xbf", "x\xf4\x8f\xbf\xbfy\xff"}) {
    expect_round_trip(s);
    EXPECT_NE(bytes_to_utf8(s), s);
  }
  // U+10FF80 itself becomes its four bytes, each escaped.
  EXPECT_EQ(bytes_to_utf8("\xf4\x8f\xbe\x80"),
            "\xf4\x8f\xbf\xb4\xf4\x8f\xbe\x8f\xf4\x8f\xbe\xbe\xf4\x8f\xbe\x80");
}

TEST(Utf8Escape, RandomByteStringsRoundTrip) {
  std::mt19937 rng(1234);
  // Bytes that make and break UTF-8 sequences, and the reserved range's lead bytes.
  const std::string alphabet("a\x00\x7f\x80\x8f\xbe\xbf\xc2\xc3\xe0\xe2\xed\xef\xf0\xf4\xf5\xff",
                             17);
  for (int n = 0; n < 3000; ++n) {
    std::string s(rng() % 40, '\0');
    for (char& c : s) {
      c = n % 2 ? alphabet[rng() % alphabet.size()] : static_cast<char>(rng() & 0xff);
    }
    expect_round_trip(s);
    if (testing::Test::HasFailure()) break;
  }
}

// Another writer's JSON may spell the reserved code points as \u escapes (surrogate pairs).
TEST(Utf8Escape, DecodesEscapesWrittenByOtherTools) {
  auto j = nlohmann::json::parse(R"({"s": "ok\udbff\udfff\udbff\udf80"})");
  EXPECT_EQ(utf8_to_bytes(j.at("s").get<std::string>()), "ok\xff\x80");
  EXPECT_EQ(utf8_to_bytes(std::vector<std::string>{"\xf4\x8f\xbf\xbf", "x"}),
            (std::vector<std::string>{"\xff", "x"}));
}

// A reader takes its own format and older ones; a newer one names the version it needs.
TEST(Version, FormatProblemsNameTheVersionNeeded) {
  EXPECT_EQ(format_problem("format", 1, 1), "");
  EXPECT_EQ(format_problem("format", 1, 3), "");
  EXPECT_EQ(format_problem("format", 4, 3),
            std::string("field \"format\" is format 4, written by a newer keel; this keel (") +
                kVersion +
                ") reads format 3 and older: open it with a keel release that reads format 4");
  EXPECT_EQ(format_problem("format", 0, 3),
            "field \"format\" must be a format number >= 1, found 0");
  EXPECT_THROW(check_format("cache", "m.json", "format", 2, 1), InputError);
  EXPECT_NO_THROW(check_format("cache", "m.json", "format", 1, 1));
  EXPECT_EQ(std::string(kVersion), std::to_string(KEEL_VERSION_MAJOR) + "." +
                                       std::to_string(KEEL_VERSION_MINOR) + "." +
                                       std::to_string(KEEL_VERSION_PATCH));
}

}  // namespace
}  // namespace keel
