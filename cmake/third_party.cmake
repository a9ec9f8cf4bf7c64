# The third-party libraries from MOEFLOW_THIRD_PARTY_DIR instead of the system's, for a machine
# with a compiler and CMake but none of the Debian packages (the GPU machines of
# scripts/gpu-check.sh; scripts/gpu-bundle.sh fills the folder):
#   include/{fmt,nlohmann,CLI}/   headers; fmt is used header-only (FMT_HEADER_ONLY)
#   httplib/httplib.{h,cpp}       cpp-httplib (llama.cpp's vendored copy), built here without TLS
#   googletest/                   GoogleTest sources (Debian's /usr/src/googletest)
# Defines the targets the system packages would: fmt::fmt, nlohmann_json::nlohmann_json,
# CLI11::CLI11, PkgConfig::HTTPLIB (+ HTTPLIB_FOUND), GTest::gtest, GTest::gtest_main.
set(tp "${MOEFLOW_THIRD_PARTY_DIR}")
foreach(f include/fmt/format.h include/nlohmann/json.hpp include/CLI/CLI.hpp)
  if(NOT EXISTS "${tp}/${f}")
    message(FATAL_ERROR "MOEFLOW_THIRD_PARTY_DIR=${tp} has no ${f} (make it with scripts/gpu-bundle.sh)")
  endif()
endforeach()

add_library(fmt::fmt INTERFACE IMPORTED)
set_target_properties(fmt::fmt PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${tp}/include"
                                          INTERFACE_COMPILE_DEFINITIONS FMT_HEADER_ONLY=1)
add_library(nlohmann_json::nlohmann_json INTERFACE IMPORTED)
set_target_properties(nlohmann_json::nlohmann_json PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${tp}/include")
add_library(CLI11::CLI11 INTERFACE IMPORTED)
set_target_properties(CLI11::CLI11 PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${tp}/include")

if(EXISTS "${tp}/httplib/httplib.cpp")
  add_library(moeflow_tp_httplib STATIC "${tp}/httplib/httplib.cpp")
  target_include_directories(moeflow_tp_httplib SYSTEM PUBLIC "${tp}/httplib")
  target_compile_options(moeflow_tp_httplib PRIVATE -w)
  target_link_libraries(moeflow_tp_httplib PUBLIC Threads::Threads)
  add_library(PkgConfig::HTTPLIB ALIAS moeflow_tp_httplib)
  set(HTTPLIB_FOUND ON)
endif()

if(MOEFLOW_TESTS)
  if(NOT EXISTS "${tp}/googletest/CMakeLists.txt")
    message(FATAL_ERROR "MOEFLOW_THIRD_PARTY_DIR=${tp} has no googletest/ (needed for MOEFLOW_TESTS)")
  endif()
  set(INSTALL_GTEST OFF CACHE BOOL "" FORCE)
  set(BUILD_GMOCK OFF CACHE BOOL "" FORCE)
  add_subdirectory("${tp}/googletest" "${CMAKE_BINARY_DIR}/third_party/googletest" EXCLUDE_FROM_ALL SYSTEM)
endif()
