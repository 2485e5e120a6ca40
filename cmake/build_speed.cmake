# How keel builds fast enough for make test's budget: precompiled headers and unity builds.
#
# Precompiled headers: the standard library, fmt, nlohmann/json, CLI11 and GoogleTest headers are
# parsed once per header instead of once per source file (28 % of a source's compile time with
# clang and ASan, 19 % of a library source's with GCC at -O2, sampled). Only outside headers go
# in, so a change to keel's own headers rebuilds no more than before. make fuzz builds the rooms
# with KEEL_PCH=OFF, which proves their sources still include what they use.
option(KEEL_PCH "Precompile the standard and third-party headers" ON)

set(KEEL_PCH_COMMON <algorithm> <chrono> <cmath> <cstdint> <cstring> <filesystem> <functional>
    <map> <memory> <mutex> <optional> <set> <span> <sstream> <string> <string_view> <vector>
    <fmt/format.h>)

# A target's own precompiled header: the common set plus the extra headers given.
function(keel_precompile target)
  if(KEEL_PCH)
    target_precompile_headers(${target} PRIVATE ${KEEL_PCH_COMMON} ${ARGN})
  endif()
endfunction()

# The rooms share one header, built once: building a header per room took 86 s of a fresh
# Release build (fifteen builds of the same headers). A header is only used with the flags it was
# built with, so rooms on OpenMP (-fopenmp, directly or through a room they link) share a second
# one, and a room with flags of its own (KEEL_ROOM_FLAGS_<target>) builds its own.
function(keel_room_precompile target source_count openmp)
  if(NOT KEEL_PCH)
    return()
  endif()
  if(DEFINED KEEL_ROOM_FLAGS_${target})
    if(source_count GREATER_EQUAL 4)  # below that, building the header costs what it saves
      keel_precompile(${target} <nlohmann/json.hpp>)
    endif()
    return()
  endif()
  set(owner keel_room_pch)
  if(openmp)
    set(owner keel_room_pch_openmp)
  endif()
  if(NOT TARGET ${owner})
    add_library(${owner} OBJECT ${PROJECT_SOURCE_DIR}/cmake/room_pch.cpp)
    target_link_libraries(${owner} PRIVATE fmt::fmt nlohmann_json::nlohmann_json)
    if(openmp)
      target_link_libraries(${owner} PRIVATE OpenMP::OpenMP_CXX)
    endif()
    keel_precompile(${owner} <nlohmann/json.hpp>)
  endif()
  target_precompile_headers(${target} REUSE_FROM ${owner})
endfunction()

# A target compiled with the same flags as `owner` reuses owner's precompiled header.
function(keel_precompile_like target owner)
  if(KEEL_PCH)
    target_precompile_headers(${target} REUSE_FROM ${owner})
  endif()
endfunction()

# Sources built with their own optimisation flags (the hot kernels) stay out of the target's
# header, which is built with the target's flags.
function(keel_skip_precompile)
  set_source_files_properties(${ARGN} PROPERTIES SKIP_PRECOMPILE_HEADERS ON)
endfunction()

# Unity builds: a room's sources compile in batches of sixteen, each batch one translation unit,
# so the templates they share (nlohmann/json above all) are instantiated and optimised once per
# batch. 17 of train/'s sources took 39 s in one unit against 94 s one by one (GCC -O2); make
# test's Release tree took 641 s of CPU in batches of 16 against 679 s in batches of 8 (2 cores,
# 2026-12-01). make fuzz builds with KEEL_UNITY=OFF, which proves every source still compiles on
# its own. Sources with flags of their own (the hot kernels) are left out by CMake, and so are
# those whose file-local helpers share a name with a batch-mate's (keel_unity_alone).
option(KEEL_UNITY "Compile each room's sources in batches (unity builds)" ON)

function(keel_unity_build target)
  if(KEEL_UNITY)
    set_target_properties(${target} PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE 16)
  endif()
endfunction()

# Sources compiled on their own in a unity build: their file-local helpers (ir/infer.cpp's fail
# and require, place_collectives' Placement) would meet a batch-mate's of the same name.
function(keel_unity_alone)
  set_source_files_properties(${ARGN} PROPERTIES SKIP_UNITY_BUILD_INCLUSION ON)
endfunction()
