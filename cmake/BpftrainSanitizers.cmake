# Sanitizer and fuzzing builds (tools/test --sanitize, CI). The flags apply to every C/C++ target
# of the tree (the BPF objects are compiled by their own clang command and stay as they are), so a
# sanitized build dir is a build dir of its own.
#   BPFTRAIN_SANITIZE=address  ASan + UBSan, any finding aborts (UBSan does not recover)
#   BPFTRAIN_SANITIZE=thread   TSan
#   BPFTRAIN_FUZZ=ON           Clang only: the libFuzzer targets of tests/fuzz and a ctest each
#                              (label fuzz); implies address, adds coverage instrumentation
set(BPFTRAIN_SANITIZE "" CACHE STRING "sanitizers for the whole build: address (ASan+UBSan), thread (TSan) or empty")
set_property(CACHE BPFTRAIN_SANITIZE PROPERTY STRINGS "" address thread)
option(BPFTRAIN_FUZZ "build the libFuzzer targets in tests/fuzz (Clang only)" OFF)
set(BPFTRAIN_FUZZ_SECONDS 60 CACHE STRING "how long each fuzz ctest (label fuzz) runs its target")

if(BPFTRAIN_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "BPFTRAIN_FUZZ=ON needs Clang (libFuzzer): configure with CXX=clang++-14 CC=clang-14")
  endif()
  if(BPFTRAIN_SANITIZE STREQUAL "")
    set(BPFTRAIN_SANITIZE address CACHE STRING "" FORCE)
  elseif(NOT BPFTRAIN_SANITIZE STREQUAL "address")
    message(FATAL_ERROR "BPFTRAIN_FUZZ=ON runs under ASan+UBSan; BPFTRAIN_SANITIZE=${BPFTRAIN_SANITIZE} cannot be combined with it")
  endif()
endif()

if(BPFTRAIN_SANITIZE STREQUAL "address")
  set(_san -fsanitize=address,undefined -fno-sanitize-recover=all)
elseif(BPFTRAIN_SANITIZE STREQUAL "thread")
  set(_san -fsanitize=thread)
elseif(NOT BPFTRAIN_SANITIZE STREQUAL "")
  message(FATAL_ERROR "BPFTRAIN_SANITIZE=${BPFTRAIN_SANITIZE}: expected address, thread or empty")
endif()
if(_san)
  add_compile_options(${_san} -fno-omit-frame-pointer)
  add_link_options(${_san})
  if(BPFTRAIN_FUZZ)
    # Coverage feedback for the code under test; only the fuzz binaries link libFuzzer's main.
    add_compile_options(-fsanitize=fuzzer-no-link)
  endif()
  message(STATUS "bpftrain: sanitizers: ${BPFTRAIN_SANITIZE}")
endif()
if(BPFTRAIN_FUZZ)
  message(STATUS "bpftrain: fuzz targets: ON (libFuzzer, ${BPFTRAIN_FUZZ_SECONDS} s each under ctest -L fuzz)")
endif()
