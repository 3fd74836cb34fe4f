# Warnings are on for our code everywhere; turning them into errors is for tools/test and CI, so
# that a packager's build with a newer compiler does not break on a warning that compiler added.
option(BPFTRAIN_WERROR "treat warnings in bpftrain's own code (C++ and BPF) as errors" OFF)
if(BPFTRAIN_WERROR)
  set(BPFTRAIN_WERROR_FLAG -Werror)
else()
  set(BPFTRAIN_WERROR_FLAG "")
endif()

# Foreign headers are included as SYSTEM by their targets.
function(bpftrain_target_defaults target)
  target_compile_options(${target} PRIVATE -Wall -Wextra ${BPFTRAIN_WERROR_FLAG})
  target_include_directories(${target} PRIVATE ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR})
endfunction()

include(BpftrainSanitizers)  # BPFTRAIN_SANITIZE, BPFTRAIN_FUZZ: flags for every target

if(NOT BUILD_TESTING)
  return()
endif()
find_package(GTest CONFIG REQUIRED)
include(GoogleTest)

# bpftrain_test(NAME name SOURCES ... LIBS ... LABELS unit|bpf|e2e|numalab|bench [TIMEOUT s])
# builds a GoogleTest binary and registers each of its test cases with ctest as
# NAME.Suite.Case, under its labels. One ctest test per case, so that a GTEST_SKIP shows as
# skipped (gtest's "[  SKIPPED ]" line) without hiding the cases of the same binary that ran.
# Cases are listed when ctest starts (PRE_TEST), not at build time, so a compile-only build
# runs nothing. TIMEOUT applies to each case.
#
# A test's own sources (not the libraries and programs it tests, nor a benchmark's) are built
# with BPFTRAIN_TEST_OPTIMIZATION, last on the command line so that it wins: they are harness
# code, not what is measured, and GCC 12 built the heaviest of them in 5.2 s at -Og against
# 8.2 s at -O2 (fault_e2e_test.cc; 37% less over three files). Empty: the build type's level.
set(BPFTRAIN_TEST_OPTIMIZATION -Og CACHE STRING
  "optimization flag for test sources (not the code under test, not benchmarks); empty: the build type's")
function(bpftrain_test)
  cmake_parse_arguments(T "" "NAME;TIMEOUT" "SOURCES;LIBS;LABELS" ${ARGN})
  add_executable(${T_NAME} ${T_SOURCES})
  bpftrain_target_defaults(${T_NAME})
  if(NOT "bench" IN_LIST T_LABELS)
    target_compile_options(${T_NAME} PRIVATE ${BPFTRAIN_TEST_OPTIMIZATION})
  endif()
  target_link_libraries(${T_NAME} PRIVATE ${T_LIBS} GTest::gtest GTest::gtest_main GTest::gmock)
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 120)
  endif()
  # The environment comes through a launcher: gtest_discover_tests splits a list-valued
  # ENVIRONMENT property into separate values (CMake 3.25), which drops all but the first.
  set_property(TARGET ${T_NAME} PROPERTY CROSSCOMPILING_EMULATOR env
    BPFTRAIN_BUILD_DIR=${PROJECT_BINARY_DIR} BPFTRAIN_SOURCE_DIR=${PROJECT_SOURCE_DIR})
  gtest_discover_tests(${T_NAME}
    TEST_PREFIX "${T_NAME}."
    DISCOVERY_MODE PRE_TEST
    DISCOVERY_TIMEOUT 30
    PROPERTIES LABELS "${T_LABELS}" TIMEOUT ${T_TIMEOUT})
endfunction()
