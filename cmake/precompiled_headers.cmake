# Precompiled headers: the standard library, fmt, nlohmann/json, CLI11 and GoogleTest headers are
# parsed once per target instead of once per source file (28 % of a source's compile time with
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
