#pragma once
/// @file
/// The device mesh: named axes and their sizes, one process per device, ranks laid out
/// row-major over the axes (the last axis varies fastest). MeshCollectives runs a program's
/// collectives over the communicator of one axis.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backend/collectives.h"
#include "dist/communicator.h"

namespace keel::dist {

/// Named axes and their sizes; one process per device, ranks row-major over the axes.
struct Mesh {
  std::vector<std::string> axes = {"data"};  ///< axis names, outermost first
  std::vector<int64_t> shape = {1};          ///< the size of each axis

  int64_t size() const;     ///< devices in the mesh: the product of the axis sizes
  std::string str() const;  ///< "data=2,model=1"
  /// The size of `axis`; 0 when the mesh has no such axis.
  int64_t axis_size(const std::string& axis) const;
  /// Rank's coordinate on each axis.
  std::vector<int64_t> coordinates(int64_t rank) const;
  bool operator==(const Mesh&) const = default;  ///< same axes and sizes, in the same order
};

/// Collectives over `mesh` laid onto `world` (whose size must be the mesh's): one communicator
/// per axis, split at construction (every process of the world constructs it together). On a
/// mesh of one device any axis name has size 1.
class MeshCollectives final : public backend::Collectives {
 public:
  /// Splits `world` into one communicator per axis; keel::Error when the world's size is not
  /// the mesh's.
  MeshCollectives(Communicator& world, Mesh mesh);
  int64_t axis_size(const std::string& axis) const override;
  int64_t axis_index(const std::string& axis) const override;
  bool reaches_other_processes() const override { return mesh_.size() > 1; }
  void all_reduce(const std::string& axis, ReduceKind kind, DType dtype, const void* in, void* out,
                  int64_t count) override;
  void all_gather(const std::string& axis, DType dtype, const void* in, void* out,
                  int64_t count) override;
  void reduce_scatter(const std::string& axis, DType dtype, const void* in, void* out,
                      int64_t count) override;
  void all_to_all(const std::string& axis, DType dtype, const void* in, void* out,
                  int64_t count) override;
  const Mesh& mesh() const { return mesh_; }  ///< the mesh it was built for

 private:
  Communicator& along(const std::string& axis) const;
  Mesh mesh_;
  std::vector<int64_t> coords_;
  std::map<std::string, std::unique_ptr<Communicator>> axis_comm_;
  std::unique_ptr<Communicator> one_;  ///< an axis the mesh does not name, when it is one device
};

}  // namespace keel::dist
