# `cmake --install build --prefix P`: headers the umbrella reaches under P/include/keel, the room
# libraries, the keel binary, the profiles, a CMake package (find_package(keel) ->
# keel::keel) and keel.pc, both relocatable.
include(CMakePackageConfigHelpers)
include(${CMAKE_CURRENT_LIST_DIR}/public_headers.cmake)

keel_public_headers(KEEL_PUBLIC_HEADERS keel.h)
foreach(header IN LISTS KEEL_PUBLIC_HEADERS)
  get_filename_component(dir ${header} DIRECTORY)
  install(FILES ${CMAKE_SOURCE_DIR}/${header} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/keel/${dir})
endforeach()
install(FILES ${CMAKE_BINARY_DIR}/generated/keel_version.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/keel)
# The Doxygen input: the same headers, one path per line (make docs).
list(TRANSFORM KEEL_PUBLIC_HEADERS PREPEND ${CMAKE_SOURCE_DIR}/ OUTPUT_VARIABLE KEEL_PUBLIC_PATHS)
list(JOIN KEEL_PUBLIC_PATHS "\n" KEEL_PUBLIC_LINES)
file(WRITE ${CMAKE_BINARY_DIR}/public_headers.txt "${KEEL_PUBLIC_LINES}\n")

get_property(KEEL_ROOM_TARGETS GLOBAL PROPERTY KEEL_ROOM_TARGETS)
install(TARGETS ${KEEL_ROOM_TARGETS} keel keel_dnnl EXPORT keelTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(TARGETS keel_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY ${CMAKE_SOURCE_DIR}/profiles/ DESTINATION ${CMAKE_INSTALL_DATADIR}/keel/profiles
        FILES_MATCHING PATTERN "*.toml")

set(KEEL_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/keel)
install(EXPORT keelTargets NAMESPACE keel:: DESTINATION ${KEEL_CMAKE_DIR})
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/keelConfig.cmake.in
                              ${CMAKE_BINARY_DIR}/keelConfig.cmake INSTALL_DESTINATION ${KEEL_CMAKE_DIR}
                              PATH_VARS CMAKE_INSTALL_DATADIR)
# 0.x releases: only the same minor version is compatible.
write_basic_package_version_file(${CMAKE_BINARY_DIR}/keelConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/keelConfig.cmake ${CMAKE_BINARY_DIR}/keelConfigVersion.cmake
        DESTINATION ${KEEL_CMAKE_DIR})

# keel.pc: the room libraries in link order (each before the rooms it uses), then what they use.
set(KEEL_PC_LIBS "")
foreach(room keel_train keel_data keel_nn keel_optim keel_runtime keel_cache keel_dist keel_diag
        keel_backend_builtin keel_backend_cpu ${KEEL_CUDA_ROOMS} keel_backend_ref keel_backend_c_source keel_backend
        keel_passes keel_policy keel_autodiff
        keel_trace keel_files keel_ir)
  get_target_property(type ${room} TYPE)
  if(room STREQUAL "keel_backend_builtin")  # whole, as keel::keel links it (CMakeLists.txt)
    string(APPEND KEEL_PC_LIBS " -Wl,--whole-archive -l${room} -Wl,--no-whole-archive")
  elseif(type STREQUAL "STATIC_LIBRARY")
    string(APPEND KEEL_PC_LIBS " -l${room}")
  endif()
endforeach()
file(RELATIVE_PATH KEEL_PC_PREFIX /root/${CMAKE_INSTALL_LIBDIR}/pkgconfig /root)
configure_file(${CMAKE_CURRENT_LIST_DIR}/keel.pc.in ${CMAKE_BINARY_DIR}/keel.pc @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/keel.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

# make docs: Doxygen over the installed headers; any warning (an undocumented public function or
# type included) fails it. A test runs it too.
list(JOIN KEEL_PUBLIC_PATHS " " KEEL_DOC_HEADERS)
configure_file(${CMAKE_SOURCE_DIR}/docs/Doxyfile.in ${CMAKE_BINARY_DIR}/Doxyfile @ONLY)
find_program(DOXYGEN_EXECUTABLE doxygen)
if(DOXYGEN_EXECUTABLE)
  add_custom_target(docs COMMAND ${DOXYGEN_EXECUTABLE} ${CMAKE_BINARY_DIR}/Doxyfile
                    COMMENT "API reference: ${CMAKE_BINARY_DIR}/docs/html/index.html" VERBATIM)
endif()
